"""No thread of the candidate's harness runs beside candidate code: the profiler's warm-up (started when the process
starts, to overlap the build) has ended before model_new.py is imported. On the H100 an import half done in the
warm-up's thread while the candidate's first torch ops imported the same package failed every trial."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HARNESS = """
import json, sys, threading
import cudagent.evaluator.audit.runtime_audit as audit
from cudagent.evaluator import child

release = threading.Event()
audit.warm_profiler = lambda cuda: release.wait(20)  # a warm-up that is still going when the load arrives
audit.start_profiler_warmup(cuda=False)
threading.Timer(1.0, release.set).start()
reply = child.Harness(None).op_load({"device": "cpu", "handin": sys.argv[1], "init_inputs": [], "import_only": True})
print(json.dumps({"ok": reply.get("ok", True), "error": reply.get("error")}))
"""

CANDIDATE = """
import os, threading
alive = any(t.name == "cudagent-profiler-warmup" and t.is_alive() for t in threading.enumerate())
with open(os.environ["SEEN_AT_IMPORT"], "w") as f:
    f.write("warm-up running" if alive else "alone")

class ModelNew:
    pass
"""


def test_candidate_code_is_imported_only_once_the_profilers_warm_up_has_ended(tmp_path):
    handin = tmp_path / "handin"
    handin.mkdir()
    (handin / "model_new.py").write_text(CANDIDATE)
    seen = tmp_path / "seen.txt"
    env = dict(os.environ, SEEN_AT_IMPORT=str(seen), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", HARNESS, str(handin)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["ok"], done.stdout
    assert seen.read_text() == "alone"
