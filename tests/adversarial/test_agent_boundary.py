"""The agent's side of the boundary (cudagent/boundary/), tried as an attacker would: what the model's shell plants,
what its tool calls name, what its text holds. One test per class of escape found on the landed main before it, each
run with the defence on (nothing gets out) and, where the attack can be shown without harm, with it off (it does:
the attack is real).

    1 cudagent's git running the workspace's programs     nested repository (fsmonitor, hooks), .gitmodules
    2 the file tools following planted links              a link at the temporary name, at the target, kernels/
    3 the shell reading what is not its own                a home's key, another run, a token, env, a socket
    4 a survivor of a command                              setsid + nohup, in every sandbox mode
    5 one malformed tool call ending a run                 NUL, wrong types, infinities, a failure inside a tool
    6 escape sequences reaching the terminal               a reply and an output through `cudagent show`
    7 the ast race of CPython 3.11                         the evaluator's threads parsing as the agent's do
(`serve` running a client's task: tests/serve/test_serve.py.)
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cudagent.agent.gitrun import RunRepo
from cudagent.agent.tools import Toolbox
from cudagent.boundary import shell
from cudagent.evaluator.port import snapshot_of
from cudagent.procs import Limits
from cudagent.workspace import Workspace
from tests.agent.episodes import MODEL_NEW, cli_env, cudagent, events, git, summary, write_task
from tests.agent.script_server import ScriptedServer, from_list

TASK = "import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n"
SMALL = Limits(memory_bytes=512 << 20, max_processes=64, max_file_bytes=64 << 20)
BWRAP_SKIPPED = shell.bwrap_problem() is not None and os.environ.get("CUDAGENT_REQUIRE_BWRAP") != "1"
needs_bwrap = pytest.mark.skipif(BWRAP_SKIPPED, reason=f"bubblewrap cannot run here: {shell.bwrap_problem()}")
SHELL_MODE = "limits" if BWRAP_SKIPPED else "bwrap"


def toolbox(tmp_path: Path, mode: str = SHELL_MODE) -> tuple[Workspace, Toolbox]:
    ws = Workspace.create(tmp_path / "ws", TASK)
    return ws, Toolbox(ws, TASK, None, shell.choose(mode, SMALL))


def call(box: Toolbox, tool: str, **args):
    return asyncio.run(box.run(tool, args))


# ----- 1. git -----------------------------------------------------------------------------------------------------


def plant_nested_repository(root: Path, marker: Path) -> None:
    """What a model's shell can do in its workspace: a repository of its own under kernels/, whose configuration
    names a program (fsmonitor) and whose hooks are programs, and a .gitmodules whose update is a command."""
    script = root / "kernels" / "fsmonitor.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f'#!/bin/sh\necho "$OPENAI_API_KEY" >> "{marker}"\n')
    script.chmod(0o755)
    nested = root / "kernels" / "vendor"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "v.cu").write_text("// vendored\n")
    git(nested, "add", "v.cu")
    git(nested, "-c", "user.name=m", "-c", "user.email=m@x", "commit", "-qm", "v")
    git(nested, "config", "core.fsmonitor", str(script))
    for hook in ("pre-commit", "post-commit", "reference-transaction", "post-checkout", "post-index-change"):
        shutil.copy2(script, nested / ".git" / "hooks" / hook)
    (root / ".gitmodules").write_text(
        f'[submodule "vendor"]\n\tpath = kernels/vendor\n\turl = ./kernels/vendor\n\tupdate = !sh {script}\n'
    )
    (root / ".gitattributes").write_text("* filter=evil diff=evil\n")


def test_the_runs_git_never_runs_what_the_workspace_names(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-user")
    marker = tmp_path / "marker"
    task = write_task(tmp_path / "plain")
    repo = RunRepo.create(task, tmp_path / "run", "r1", "t")
    ws = Path(repo.workspace)
    Workspace.create(ws, TASK)
    repo.commit("setup", allow_empty=True)
    plant_nested_repository(ws, marker)
    (ws / "model_new.py").write_text(MODEL_NEW)
    first = repo.commit("turn 1")
    (ws / "kernels" / "vendor" / "v.cu").write_text("// changed\n")
    second = repo.commit("turn 2")
    assert repo.show(second) and repo.files_at(first)
    repo.reset_to(first)
    assert not marker.exists(), marker.read_text()  # nothing ran
    files = repo.files_at(first)
    assert "kernels/vendor/v.cu" in files and "model_new.py" in files and ".gitmodules" in files
    assert not [f for f in files if ".git/" in f]  # the nested repository's own files never entered a commit
    assert (ws / "kernels" / "vendor" / "v.cu").read_text() == "// vendored\n"  # reset wrote the file back

    # defence off: the git commands the run used before (add, status; hooks already off) die on the .gitmodules
    # (`git status` exits 128: the run ended with a traceback), and without it run the nested repository's program
    monkeypatch.delenv("OPENAI_API_KEY")
    naive = tmp_path / "naive"
    shutil.copytree(ws, naive, ignore=shutil.ignore_patterns(".git"), symlinks=True)
    shutil.copytree(ws / "kernels" / "vendor" / ".git", naive / "kernels" / "vendor" / ".git")
    git(naive, "init", "-q")

    def plain(*args):
        return subprocess.run(["git", "-C", str(naive), "-c", "core.hooksPath=/dev/null", *args], capture_output=True)

    plain("add", "-A")
    assert plain("status", "--porcelain").returncode == 128
    (naive / ".gitmodules").unlink()
    plain("update-index", "--force-remove", ".gitmodules")
    plain("status", "--porcelain")
    assert marker.exists(), "the nested repository's fsmonitor did not run under plain git: the attack is not real"


def test_a_damaged_run_repository_is_a_sentence_and_the_run_goes_on(tmp_path):
    """Where the shell is not confined (limits, none) it can break the run's git directory: the commit fails with a
    sentence the model reads, the next turns are committed again once the repository is sound."""
    from cudagent.agent.recorders import GitRecorder

    task = write_task(tmp_path / "plain")
    repo = RunRepo.create(task, tmp_path / "run", "r1", "t")
    Workspace.create(Path(repo.workspace), TASK)
    repo.commit("setup", allow_empty=True)
    objects = Path(repo.git_dir) / "objects"
    saved = tmp_path / "objects"
    objects.rename(saved)
    objects.write_text("not a folder\n")
    recorder = GitRecorder(repo, "r1", "m", None)

    class Turn:
        number, actions = 1, [{"tool": "bash"}]

    (Path(repo.workspace) / "model_new.py").write_text("x\n")
    said = recorder.turn(Turn, type("S", (), {"head": ""})(), {})
    assert "could not record turn 1" in said["notice"], said
    objects.unlink()
    saved.rename(objects)
    assert recorder.turn(Turn, type("S", (), {"head": ""})(), {})["commit"]


# ----- 2. the file tools and links --------------------------------------------------------------------------------


def test_the_file_tools_never_write_or_read_through_a_planted_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("the user's file\n")
    ws, box = toolbox(tmp_path)
    planted = call(
        box,
        "bash",
        command=f"ln -s {victim} kernels/.k.cu.cudagent-tmp; ln -s {victim} kernels/target.cu; "
        f"ln -s {outside} linked; ln -s {victim} model_new.py; echo planted",
    )
    assert "planted" in planted.text, planted.text
    wrote = call(box, "write_file", path="kernels/k.cu", content="kernel\n")  # a link waits at the old temp name
    over = call(box, "write_file", path="kernels/target.cu", content="replaced\n")  # the target is a link
    into = call(box, "write_file", path="linked/new.cu", content="x\n")  # a folder on the way is a link
    read = call(box, "read_file", path="model_new.py")
    edit = call(box, "edit_file", path="model_new.py", old_str="user", new_str="model")
    assert victim.read_text() == "the user's file\n"
    assert not (outside / "new.cu").exists() and list(outside.iterdir()) == [victim]
    assert wrote.ok and (ws.kernels_dir / "k.cu").read_text() == "kernel\n"
    assert over.ok and not (ws.kernels_dir / "target.cu").is_symlink()  # the link itself was replaced
    assert not into.ok and "symbolic link" in into.text, into.text
    assert not read.ok and "symbolic link" in read.text and "the user's file" not in read.text, read.text
    assert not edit.ok, edit.text

    # defence off: writing the way the tool did (a fixed temporary name, renamed over) goes through the link
    tmp = ws.kernels_dir / ".k.cu.cudagent-tmp"
    tmp.unlink()
    tmp.symlink_to(victim)
    tmp.write_text("overwritten through the link\n")
    assert victim.read_text() == "overwritten through the link\n"


def test_a_kernels_folder_linked_elsewhere_is_not_built_or_sent(tmp_path):
    elsewhere = tmp_path / "other-project" / "kernels"
    elsewhere.mkdir(parents=True)
    (elsewhere / "secret.cu").write_text("// another project's kernel\n")
    ws, box = toolbox(tmp_path)
    shutil.rmtree(ws.kernels_dir)
    call(box, "bash", command=f"ln -s {elsewhere} kernels && ln -s {elsewhere}/secret.cu model_new.py")
    assert ws.kernels_dir.is_symlink()
    snapshot = snapshot_of(ws)  # what compile, verify and profile send (and --evaluator ships to a GPU host)
    assert snapshot == {}, snapshot
    # defence off: walking the folder as before (rglob, following the link at its top) finds the file
    assert [p.name for p in ws.kernels_dir.rglob("*") if p.is_file()] == ["secret.cu"]


# ----- 3. what the shell can read ---------------------------------------------------------------------------------


@needs_bwrap
def test_the_shell_sees_the_system_and_the_toolchain_not_the_user(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    other_run = tmp_path / "cudagent-home" / "runs" / "other-run"
    other_run.mkdir(parents=True)
    (other_run / "trajectory.jsonl").write_text("another run's history\n")
    token = tmp_path / "cudagent-home" / "serve-token"
    token.write_text("service-token\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DATABASE_URL", "postgres://user:hunter2@db/prod")
    monkeypatch.setenv("GH_PAT", "ghp_secretsecret")
    sock_path = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.listen()
    ws, box = toolbox(tmp_path, "bwrap")
    reads = [home / ".ssh" / "id_ed25519", other_run / "trajectory.jsonl", token, Path("/etc/shadow")]
    probe = "; ".join(f"cat {p}" for p in reads)
    probe += "; env; " + f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{sock_path}')\""
    probe += "; ls /run /var/run /root/.ssh 2>&1; nvcc --version >/dev/null 2>&1 || true; python3 -c 'import torch'"
    probe += " && echo toolchain-ok"
    try:
        obs = call(box, "bash", command=probe, timeout=120)
        connect = "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('%s'); print('connected')\""
        connect %= sock_path
        off = shell.Sandbox("limits", SMALL).run(f"cat {reads[0]}; cat {token}; {connect}", ws.root, [], 30)
    finally:
        server.close()
    for secret in ("PRIVATE KEY", "another run's history", "service-token", "hunter2", "ghp_secret", "root:"):
        assert secret not in obs.text, (secret, obs.text)
    assert "toolchain-ok" in obs.text, obs.text  # Python and torch are there
    assert "No such file or directory" in obs.text  # the socket's folder does not exist in the view
    # defence off: without the view (limits), the same reads get the secrets
    assert "PRIVATE KEY" in off.output and "service-token" in off.output and "connected" in off.output


def test_the_environment_is_an_allow_list_in_every_mode(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://user:hunter2@db/prod")
    monkeypatch.setenv("GH_PAT", "ghp_secretsecret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("HOME", str(tmp_path / "the-users-home"))
    for mode in ["limits", "none"] + ([] if BWRAP_SKIPPED else ["bwrap"]):
        ws, box = toolbox(tmp_path / mode, mode)
        obs = call(box, "bash", command="env")
        assert "hunter2" not in obs.text and "ghp_" not in obs.text and "sk-secret" not in obs.text, (mode, obs.text)
        assert "OMP_NUM_THREADS=3" in obs.text and "the-users-home" not in obs.text, (mode, obs.text)
    # defence off: filtering by name markers (KEY, TOKEN, SECRET...) as before lets both through
    markers = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
    passed = {k for k in os.environ if not any(m in k for m in markers)}
    assert {"DATABASE_URL", "GH_PAT"} <= passed


# ----- 4. nothing outlives a command ------------------------------------------------------------------------------


def _left(tag: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.split()


@pytest.mark.parametrize("mode", ["bwrap", "limits", "none"])
def test_nothing_a_command_starts_outlives_it(tmp_path, mode):
    if mode == "bwrap" and BWRAP_SKIPPED:
        pytest.skip(f"bubblewrap cannot run here: {shell.bwrap_problem()}")
    tag = f"{301 + ['bwrap', 'limits', 'none'].index(mode)}.25"  # a duration no other test sleeps
    ws, box = toolbox(tmp_path, mode)
    obs = call(box, "bash", command=f"setsid nohup sleep {tag} >/dev/null 2>&1 & (setsid sleep {tag} &); echo left")
    assert "left" in obs.text, obs.text
    deadline = time.monotonic() + 5
    while _left(f"sleep {tag}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _left(f"sleep {tag}") == []
    timed_out = call(box, "bash", command=f"(setsid sleep {tag} &); sleep 60", timeout=1)
    assert "killed with everything it started" in timed_out.text
    assert _left(f"sleep {tag}") == []


def test_without_the_reaper_a_setsid_child_survives(tmp_path):
    """The defence off for the test above: bash run plainly leaves its setsid child behind."""
    tag = "304.25"
    subprocess.run(["bash", "-c", f"(setsid sleep {tag} >/dev/null 2>&1 &)"], timeout=30)
    try:
        assert _left(f"sleep {tag}") != []
    finally:
        subprocess.run(["pkill", "-f", f"sleep {tag}"])


# ----- 5. a tool call can fail, the run cannot --------------------------------------------------------------------

MALFORMED = [
    ("read_file", {"path": "model.py\0/etc/passwd"}, "NUL"),
    ("read_file", {"path": "model.py", "start_line": "abc"}, "whole number"),
    ("read_file", {"path": "model.py", "start_line": 0}, "at least 1"),
    ("read_file", {"path": "model.py", "end_line": True}, "whole number"),
    ("read_file", {"path": ["model.py"]}, "must be a string"),
    ("read_file", {"path": "x/" * 600}, "characters long"),
    ("bash", {"command": "echo hi", "timeout": "abc"}, "whole number"),
    ("bash", {"command": "echo hi", "timeout": float("inf")}, "whole number"),
    ("bash", {"command": "echo hi", "timeout": 1e300}, "from 1 to 1800"),
    ("bash", {"command": "echo hi", "timeout": -5}, "from 1 to 1800"),
    ("bash", {"command": "echo \0"}, "NUL"),
    ("bash", {}, "needs command"),
    ("write_file", {"path": "kernels/a.cu", "content": 42}, "must be a string"),
    ("write_file", {"path": "kernels/" + "n" * 300 + ".cu", "content": "x"}, "longer than 255 bytes"),
    ("edit_file", {"path": "model_new.py", "old_str": None, "new_str": "x"}, "needs old_str"),
    ("edit_file", {"path": "model_new.py", "old_str": 3, "new_str": "x"}, "must be a string"),
    ("finish", {"summary": {"nested": "object"}}, "must be a string"),
]


@pytest.mark.parametrize(("tool", "args", "said"), MALFORMED, ids=[f"{t}-{s}" for t, _, s in MALFORMED])
def test_malformed_arguments_are_one_sentence_back(tmp_path, tool, args, said):
    ws, box = toolbox(tmp_path, "limits")
    obs = call(box, tool, **args)
    assert not obs.ok and said in obs.text, obs.text
    assert "Traceback" not in obs.text and len(obs.text.splitlines()) == 1


def test_an_error_inside_a_tool_is_that_calls_observation(tmp_path):
    """A fault of cudagent's own inside a tool (here the evaluator port is missing altogether, so compile meets an
    AttributeError): the call fails with a sentence and the traceback is kept for the run's folder."""
    ws, box = toolbox(tmp_path, "limits")
    obs = call(box, "compile")
    assert not obs.ok and "failed inside cudagent (AttributeError" in obs.text, obs.text
    assert "Traceback" in obs.data["traceback"] and obs.data["evaluator_failed"]


@pytest.mark.slow
def test_a_run_survives_git_attacks_malformed_calls_and_shows_escapes_as_text(tmp_path):
    """One whole `cudagent optimize` run on the CPU, a scripted model doing all of it in turn: a nested repository
    with fsmonitor and hooks and a .gitmodules (every later turn commits), malformed calls of every kind, a reply
    and an output full of terminal escapes; then `--resume` over the same workspace, and `cudagent show`."""
    marker = tmp_path / "marker"
    task = write_task(tmp_path / "t")
    plant = (
        "set -e\nmkdir -p kernels/vendor && cd kernels/vendor && git init -q && echo v > v.cu && git add v.cu\n"
        "git -c user.name=m -c user.email=m@x commit -qm v\n"
        f"printf '#!/bin/sh\\necho \"$OPENAI_API_KEY\" >> {marker}\\n' > ../fsm.sh && chmod +x ../fsm.sh\n"
        'git config core.fsmonitor "$PWD/../fsm.sh"\n'
        "for h in pre-commit post-commit reference-transaction post-index-change; do cp ../fsm.sh .git/hooks/$h; done\n"
        'cd ../.. && printf \'[submodule "v"]\\n\\tpath = kernels/vendor\\n\\turl = ./kernels/vendor\\n'
        "\\tupdate = !sh kernels/fsm.sh\\n' > .gitmodules\necho planted\n"
    )  # the marker's folder is outside the shell's view: only cudagent's own git could write it
    escapes = "\x1b]0;pwned-title\x07\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\x1b[2J"
    printed = "printf 'out \\033]0;pwned-title\\007 \\033[2J end'"
    steps = [
        {"tool": "bash", "arguments": {"command": plant}},
        {"raw_arguments": '{"path": "model.py", "start_line": "abc"}', "tool": "read_file"},
        {"raw_arguments": '{"command": "echo hi", "timeout": 1e999}', "tool": "bash"},
        {"raw_arguments": '{"path": "model.py\\u0000x"}', "tool": "read_file"},
        {"raw_arguments": '{"command": "echo hi", "timeout": "abc"}', "tool": "bash"},
        {"content": f"thinking {escapes}", "tool": "bash", "arguments": {"command": printed}},
        {"tool": "write_file", "arguments": {"path": "model_new.py", "content": MODEL_NEW}},
    ]
    env = cli_env(tmp_path / "home", None)
    with ScriptedServer(from_list(steps)) as server:
        env.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-user-secret")
        proc = cudagent(["optimize", str(task), "--device", "cpu", "--json", "--no-final-check"], env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        s = summary(proc.stdout)
        assert s["exit_reason"] == "finished" and s["turns"] == len(steps) + 1, s
        resumed = cudagent(["optimize", "--resume", s["run_id"], "--json", "--max-turns", "9"], env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not marker.exists(), marker.read_text()
    msgs = [m["content"] for m in server.chat_requests[len(steps)]["messages"] if m["role"] == "tool"]
    for text, said in zip(msgs[1:5], ["whole number", "whole number", "NUL", "whole number"]):
        assert "bad arguments" in text and said in text, text
    subjects = git(s["repo"], "log", "--format=%s", s["branch"]).splitlines()
    assert "turn 7: write_file" in subjects[0], subjects
    tree = git(s["repo"], "ls-tree", "-r", "--name-only", s["branch"]).split()
    assert "kernels/vendor/v.cu" in tree and not [f for f in tree if "/.git/" in f]
    shown = cudagent(["show", s["run_id"], "6"], env)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "\\x1b]0;pwned-title\\x07" in shown.stdout, shown.stdout
    assert [e for e in events(proc.stdout) if e.get("event") == "turn"][5]["summary"].startswith("bash printf")


# ----- 7. the ast race of CPython 3.11 ----------------------------------------------------------------------------


def _parse_beside_each_other(ws: Workspace, rounds: int) -> list[str]:
    """The agent's thread reading the candidate's format while the evaluator's build thread audits it, as a compile
    right after a write does, with a garbage collection handing the interpreter over inside each parse (what a
    loaded machine does at random)."""
    from cudagent.evaluator.audit.static_audit import audit_model_new

    source = ws.model_new_py.read_text()
    errors: list[str] = []

    def hand_over(phase, info):
        if phase == "start":
            time.sleep(0.0005)

    def agent():
        for _ in range(rounds):
            try:
                ws.candidate_format()
            except SystemError as exc:
                errors.append(str(exc))

    def build(depth=8):
        if depth:
            return build(depth - 1)  # another stack depth, as the build thread's is
        for _ in range(rounds):
            try:
                audit_model_new(source)
            except SystemError as exc:
                errors.append(str(exc))

    threshold = gc.get_threshold()
    gc.callbacks.append(hand_over)
    gc.set_threshold(300)
    try:
        threads = [threading.Thread(target=agent), threading.Thread(target=build)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        gc.callbacks.remove(hand_over)
        gc.set_threshold(*threshold)
    return errors


def test_the_agents_and_the_builds_threads_parse_at_once_without_failing(tmp_path, monkeypatch):
    import contextlib

    import cudagent.syntax as syntax

    ws = Workspace.create(tmp_path / "ws", TASK)
    ws.model_new_py.write_text(MODEL_NEW * 20)
    assert _parse_beside_each_other(ws, 40) == []
    # defence off (no lock): on CPython 3.11 the same threads fail; later versions fixed the interpreter
    monkeypatch.setattr(syntax, "_LOCK", contextlib.nullcontext())
    errors = _parse_beside_each_other(ws, 40)
    import sys

    if sys.version_info[:2] == (3, 11) and sys.version_info[2] < 8:
        assert errors and "recursion depth mismatch" in errors[0], "the race did not show without the lock"


def test_the_malformed_cases_cover_every_tool_that_takes_arguments():
    from cudagent.agent.tools import TOOL_SPECS

    with_args = {t["name"] for t in TOOL_SPECS if t["parameters"].get("properties")}
    assert with_args <= {tool for tool, _, _ in MALFORMED}, with_args
