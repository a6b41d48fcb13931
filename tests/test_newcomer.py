"""What a newcomer hits, point by point (issue 19): fail fast, show progress, keep the README's promises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.agent.episodes import FINISH, SOLVE, cli_env, cudagent, git, summary, write_task
from tests.agent.script_server import ScriptedServer, from_list

ROOT = Path(__file__).resolve().parent.parent
CPU = ["--device", "cpu", "--json", "--no-final-check"]


@pytest.mark.slow
def test_1_a_refused_connection_fails_at_once_and_a_missing_scheme_is_named(tmp_path):
    task = write_task(tmp_path / "t")
    env = cli_env(tmp_path / "home", None)
    start = time.monotonic()
    refused = cudagent(["optimize", str(task), *CPU, "--base-url", "http://127.0.0.1:9/v1"], env)
    assert refused.returncode == 3 and time.monotonic() - start < 30
    assert "nothing is listening at http://127.0.0.1:9/v1" in refused.stderr
    bare = cudagent(["optimize", str(task), *CPU, "--base-url", "localhost:9/v1"], env)
    assert bare.returncode == 2 and "write http://localhost:9/v1" in bare.stderr


@pytest.mark.slow
def test_1_retries_are_shown_as_they_happen(tmp_path):
    task = write_task(tmp_path / "t")
    steps = [{"times": 1, "status": 503, "body": {"error": {"message": "busy"}}, "then": FINISH}]
    with ScriptedServer(from_list(steps)) as server:
        proc = cudagent(["optimize", str(task), *CPU], cli_env(tmp_path / "home", server.url))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "answered 503" in proc.stderr and "retrying in" in proc.stderr and "(attempt 2 of" in proc.stderr


def test_2_the_security_section_the_messages_point_to_exists():
    security = (ROOT / "docs" / "security.md").read_text()
    assert security.startswith("# Security\n") and "(docs/security.md)" in (ROOT / "README.md").read_text()
    mentions = subprocess.run(["grep", "-rl", "docs/security.md", str(ROOT / "cudagent")], capture_output=True)
    assert mentions.stdout  # the messages still refer to it, and it is there


def test_3_doctor_without_a_server_says_none_was_configured(tmp_path):
    env = {k: v for k, v in cli_env(tmp_path / "home", None).items() if k != "OPENAI_BASE_URL"}
    proc = cudagent(["doctor", "--device", "cpu", "--json"], env)
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert proc.returncode == 3 and "no model server configured" in checks["model server"]["detail"]


@pytest.mark.slow
def test_4_and_9_run_ids_are_never_cut_and_runs_can_be_pruned(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    task = write_task(repo)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "mine")
    env = cli_env(tmp_path / "home", None)
    with ScriptedServer(from_list([FINISH])) as server:
        s = summary(cudagent(["optimize", str(task), *CPU], cli_env(tmp_path / "home", server.url)).stdout)
    listed = cudagent(["runs"], {**env, "COLUMNS": "80"})
    assert s["run_id"] in listed.stdout, listed.stdout
    assert s["branch"] in git(repo, "branch", "--list")
    refused = cudagent(["prune", "--all"], env)  # no terminal, no --yes: nothing is removed
    assert refused.returncode == 2 and "--yes" in refused.stderr and Path(s["run_dir"]).exists()
    pruned = cudagent(["prune", s["run_id"][:12], "--yes"], env)
    assert pruned.returncode == 0, pruned.stderr
    branches = git(repo, "branch", "--list")
    assert s["branch"] not in branches and "main" in branches  # the user's own branch is untouched
    assert not Path(s["run_dir"]).exists() and not Path(s["repo"]).exists()
    assert "worktree" not in git(repo, "worktree", "list").split("\n", 1)[-1]


@pytest.mark.slow  # converts SmolLM2 or builds an extension cold: the inner loop leaves it out
def test_5_check_tells_its_phases_and_bench_lines_are_whole(tmp_path):
    from cudagent.cli.bench import task_line
    from cudagent.device.info import resolve_device
    from cudagent.evaluator.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    phases: list[str] = []
    task = load_task(write_task(tmp_path / "task"))  # axpby on small vectors: the phases are the same
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False, on_phase=phases.append)) as ev:
        ev.evaluate(workspace_for(resolve_candidate(ROOT / "examples/solutions/cpu/axpby"), task.source))
    waited = [p for p in phases if p != "building the extension"]  # told only while the build, beside, is not done
    assert waited == [
        "auditing the sources",
        "checking the task with null candidates",
        "verifying on fresh inputs",
        "sampling where forward's CPU time goes",
    ]
    assert phases.index("building the extension") == 2 if len(phases) > len(waited) else True
    row = {"key": "-/axpby", "name": "axpby", "level": "-", "correct": False, "tier": -1}
    row["error"] = "[stock-1] the candidate hides a failing kernel behind a fallback path " * 3
    line = task_line(row)
    assert line.startswith("axpby: failed") and line.endswith(" the candidate...")  # cut between words
    assert task_line({**row, "level": "1", "key": "1/axpby"}).startswith("1/axpby:")


def test_6_tasks_without_a_solution_are_skipped_not_failed(tmp_path):
    from cudagent.bench.report import summarize
    from cudagent.bench.runner import Bench, BenchConfig
    from cudagent.bench.tasks import discover

    tasks = discover(ROOT / "examples" / "tasks", select="matmul")  # examples/solutions/cpu has no matmul
    rows = Bench(BenchConfig(tmp_path / "out", "cpu", solutions=ROOT / "examples/solutions/cpu")).run(tasks)
    assert rows[0]["skipped"] and summarize(rows)["tasks"] == 0 and summarize(rows)["skipped"] == 1


def test_7_check_json_on_bad_input_is_one_json_object(tmp_path):
    proc = cudagent(["check", str(tmp_path / "missing.py"), str(tmp_path), "--json"], cli_env(tmp_path, None))
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["exit_code"] == 2 and "does not exist" in doc["error"]


@pytest.mark.slow
def test_8_sigterm_ends_a_run_as_ctrl_c_does(tmp_path):
    task = write_task(tmp_path / "t")
    steps = [SOLVE[1], {"tool": "bash", "arguments": {"command": "sleep 30"}}, FINISH]
    home = tmp_path / "home"
    with ScriptedServer(from_list(steps)) as server:
        env = cli_env(home, server.url)
        proc = subprocess.Popen(
            [sys.executable, "-m", "cudagent", "optimize", str(task), *CPU],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in proc.stdout:
            if json.loads(line).get("event") == "turn":
                time.sleep(2.0)
                proc.send_signal(signal.SIGTERM)
                break
        start = time.monotonic()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143 and "--resume" in err, err[-2000:]
        assert time.monotonic() - start < 20  # the shell command was killed, not waited for
        ends = [json.loads(x) for x in next(home.glob("runs/*/trajectory.jsonl")).read_text().splitlines()]
        assert ends[-1]["kind"] == "end" and ends[-1]["exit_reason"] == "terminated"
        again = cudagent(["optimize", "--resume", "last", "--json"], env)
    assert again.returncode == 0 and summary(again.stdout)["exit_reason"] == "finished", again.stderr[-2000:]


def test_10_the_readme_says_what_the_test_install_costs():
    readme = (ROOT / "README.md").read_text()
    assert "prebuilt wheels only: about 5 minutes" in readme and "builds from source" not in readme


def test_11_report_notes_and_resumed_reports(tmp_path):
    from cudagent.bench.report import markdown
    from cudagent.bench.runner import RESULTS, Bench, BenchConfig
    from cudagent.evaluator.audit.static_audit import audit_model_new

    row = {"key": "1/relu", "name": "relu", "level": "1", "correct": False, "tier": -1, "error": "[stock-1] wrong"}
    row["null_candidates"] = ["passthrough"]
    text = markdown({"levels": {}, "overall": {"degenerate": ["1/relu"]}, "results": [row]})
    assert "[stock-1] wrong; degenerate (passthrough)" in text
    out = tmp_path / "out"
    out.mkdir()
    (out / RESULTS).write_text(json.dumps({"key": "1/other", "name": "other", "level": "1", "correct": True}) + "\n")
    rows = Bench(BenchConfig(out, "cpu", solutions=tmp_path, resume=True)).run([])
    assert [r["key"] for r in rows] == ["1/other"]  # the report covers everything in results.jsonl
    source = "import torch\nimport cuda_extension\nclass ModelNew:\n    def forward(self, a):\n"
    source += "        out = torch.empty_like(a)\n        cuda_extension.k(a.data_ptr(), out.data_ptr())\n"
    assert not audit_model_new(source + "        return out\n")


@pytest.mark.slow
def test_12_small_glitches(tmp_path):
    from cudagent.agent.ui import summary_text

    s = {"run_id": "r", "turns": 1, "exit_reason": "finished", "best": None, "branch": "b", "repo": "x"}
    assert "1 turn," in summary_text(s)
    env = {**os.environ, "COLUMNS": "120"}
    helps = cudagent(["optimize", "--help"], env).stdout + cudagent(["check", "--help"], env).stdout
    assert "<bool>" not in helps and "retrying it ." not in helps
    bad = cudagent(["check", "x.py", "y", "--device", "gpu"], env)
    assert bad.returncode == 2 and "Value error" not in bad.stderr and "use auto, cuda or cpu" in bad.stderr
    cuda_on_cpu = cudagent(
        ["check", str(ROOT / "examples/tasks/softmax.py"), str(ROOT / "examples/solutions/cuda/softmax")]
        + ["--device", "cpu", "--no-timing", "--json"],
        cli_env(tmp_path, None),
    )
    assert cuda_on_cpu.returncode == 1 and "this is a CPU build" in json.loads(cuda_on_cpu.stdout)["error"]


# ----- round two (issue 38): fail before the wait, show the wait, say what happened -------------------------------


def test_r2_an_input_spec_with_an_empty_dimension_is_refused_not_read_as_a_smaller_shape():
    from cudagent.usermodel.inputs import InputSpecError, parse

    with pytest.raises(InputSpecError, match=r"an empty dimension in \[8,,3\]; write every size"):
        parse("x=f32[8,,3]")
    assert dict(parse("x=f32[8,3]").kwargs)["x"].shape == (8, 3) and dict(parse("x=f32[]").kwargs)["x"].shape == ()


def test_r2_help_shows_its_placeholders_and_whole_variable_names_in_a_plain_log():
    """Typer's markdown help ate `<run-id>` ("the branch cudagent/;"), and at rich's 80 columns a panel cut
    `$CUDAGENT_EVALUATOR_TOKEN` to `$CUDAGENT_EVALUATO…` when help went to a pipe."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("TERMINAL_WIDTH", None)
    env.pop("COLUMNS", None)
    shown = {}
    for command in ("optimize", "prune"):
        argv = [sys.executable, "-m", "cudagent", command, "--help"]
        done = subprocess.run(argv, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        shown[command] = done.stdout
    assert "the branch cudagent/RUN-ID;" in shown["optimize"] and "cudagent/RUN-ID/best" in shown["optimize"]
    assert "cudagent/RUN-ID, never" in shown["prune"]
    assert "$CUDAGENT_EVALUATOR_TOKEN" in shown["optimize"] and "…" not in shown["optimize"]


def test_r2_help_at_an_80_column_terminal_folds_long_names_rather_than_cutting_them():
    """At 80 columns an option's help column is about 20 wide: rich cut `$CUDAGENT_EVALUATOR_TOKEN` with an
    ellipsis there. $COLUMNS stands for the terminal's width."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", COLUMNS="80")
    env.pop("TERMINAL_WIDTH", None)
    done = subprocess.run(
        [sys.executable, "-m", "cudagent", "optimize", "--help"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in done.stdout
    joined = "".join(line.strip("│ ").strip() for line in lines)
    assert "$CUDAGENT_EVALUATOR_TOKEN" in joined and "CUDAGENT_EVALUATOR_URL]" in joined


def test_r2_tables_at_80_columns_split_no_word_and_say_what_they_left_out(monkeypatch, capsys):
    """`hotspots --regions` at 80 columns printed `scaled_dot_pro` / `duct_attention`, `runs` split `block_f c2`."""
    from cudagent.cli.output import print_table

    rows = [
        ["#", "region", "operators", "alike", "share", "ms/call", "fusion saves"],
        ["1", "blocks.0.{fc1}", "linear + gelu", "2", "42.9%", "5.9925", "8.0 MB"],
        ["5", "blocks.0.attention_block", "scaled_dot_product_attention", "2", "6.8%", "0.9460", "2.0 MB"],
    ]
    monkeypatch.setenv("COLUMNS", "80")
    print_table(rows, "fusion regions", optional=("operators", "ms/call", "alike", "fusion saves"))
    out, err = capsys.readouterr()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "scaled_dot_product_attention" in out and "blocks.0.attention_block" in out, out
    assert "fusion saves" not in out and "fusion saves" in err.split("left out: ")[1] and "operators" in out
    monkeypatch.setenv("COLUMNS", "160")
    print_table(rows, "fusion regions", optional=("operators", "ms/call", "alike", "fusion saves"))
    out, err = capsys.readouterr()
    assert "fusion saves" in out and err == ""
    monkeypatch.setenv("COLUMNS", "30")  # nothing left to leave out: words are folded, never cut
    print_table([["run", "state"], ["softmax-20261126-101010-abcdef", "done"]])
    out, _ = capsys.readouterr()
    pieces = [line.strip("│ ").split(" │")[0] for line in out.splitlines()[3:5]]
    assert "…" not in out and "".join(pieces) == "softmax-20261126-101010-abcdef", out


def test_r2_log_and_show_write_values_as_a_person_reads_them():
    """`cudagent log` showed 0.0 s for turns whose model took two minutes (only the tools were counted), and
    `cudagent show` printed `share: 0.6022651625085429`."""
    from cudagent.cli.review import _duration, _readable, _turn_row

    assert [_duration(s) for s in (0.04, 109.6, 3725.0)] == ["0.0 s", "1 min 49 s", "1 h 02 min"]
    turn = {
        "turn": 3,
        "commit": None,
        "seconds": 0.02,
        "reply": {"seconds": 131.5, "usage": {"prompt_tokens": 900, "completion_tokens": 100}},
        "actions": [{"tool": "finish", "ok": True}],
    }
    row = _turn_row(turn)
    assert row["seconds"] == 131.52 and row["model_seconds"] == 131.5 and row["tokens"] == 1000
    assert _readable("share", 0.6022651625085429) == "60.2%" and _readable("speedup_vs_eager", 1.2345) == "1.23x"
    assert _readable("modules", ["blocks.0.fc1", "blocks.1.fc1"]) == "blocks.0.fc1, blocks.1.fc1"
    assert _readable("put_back", {"correct": True, "max_abs_error": 1.5e-05}) == "correct yes; max abs error 1.5e-05"


def test_r2_the_verdict_line_says_what_its_tier_means():
    from cudagent.evaluator.report import render
    from cudagent.evaluator.verdict import Verdict

    untimed = render(Verdict(correct=True, tier=1, max_abs_error=0.0))
    assert untimed.startswith("CORRECT (tier 1: correct; not timed)"), untimed
    timed = Verdict(correct=True, tier=2, max_abs_error=0.0, speedup_vs_eager=1.5, speedup_vs_compile=0.9)
    timed.time_ms = {"candidate": 1.0, "eager": 1.5, "compile": 0.9}
    assert render(timed).startswith("CORRECT (tier 2: correct and faster than eager)"), render(timed)
    assert render(Verdict()).startswith("REJECTED (tier -1: the reward for a wrong or cheating candidate)")


def _said_before_torch(argv: list[str], env: dict, code: int) -> list[str]:
    """Run `cudagent ARGV`; assert its exit code and that torch was never imported; return its `cudagent:` lines."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "cudagent", *argv], capture_output=True, text=True, env=env
    )
    assert done.returncode == code, (argv, done.stderr[-500:])
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "torch" not in imported, argv
    return [line for line in done.stderr.splitlines() if line.startswith("cudagent: ")]


def test_r2_a_mistyped_path_or_input_spec_is_refused_before_torch_is_imported():
    """A wrong file path cost 4-5 s before its sentence: torch was imported first. The time is the startup
    benchmark's (benchmarks/cli_startup.py); here, what makes it: torch is not imported at all."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    for argv in (
        ["optimize", "/nonexistent/task.py"],
        ["check", "/nonexistent/task.py", "/nonexistent/solution"],
        ["check", str(ROOT / "examples" / "tasks" / "axpby.py"), "/nonexistent/solution"],
        ["hotspots", "/nonexistent/model.py:Block"],
        ["hotspots", f"{ROOT / 'examples' / 'models' / 'block.py'}:Stack", "--inputs", "x=f32[8,,256]"],
    ):
        said = _said_before_torch(argv, env, 2)
        assert len(said) == 1 and ("does not exist" in said[0] or "an empty dimension" in said[0]), (argv, said)


def test_r2_no_model_server_configured_is_said_before_anything_is_loaded():
    """With no server configured, `optimize` loaded the model (torch: seconds) before saying so. Now the address
    is resolved first, for a task and for a model of one's own: one sentence, exit 3, torch never imported."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("OPENAI_BASE_URL", None)
    for argv in (
        ["optimize", str(ROOT / "examples" / "tasks" / "softmax.py"), "--device", "cpu"],
        ["optimize", f"{ROOT / 'examples' / 'models' / 'block.py'}:Stack", "--inputs", "x=f32[8,64,256]"],
    ):
        said = _said_before_torch(argv, env, 3)
        assert len(said) == 1 and said[0].startswith("cudagent: no model server configured"), said


def test_r2_check_tells_each_phase_in_a_plain_log_too(capsys):
    """`cudagent check` with timing printed nothing for 3.5 minutes when its stderr was not a terminal."""
    from cudagent.cli.check import _status

    with _status(enabled=True, spinner=False) as status:
        status("measuring eager and torch.compile (once per task and machine)")
        status("building the extension")
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("cudagent: measuring eager and torch.compile") and "s so far)" in said[0]
    assert said[1].startswith("cudagent: building the extension")


def test_r2_the_charts_name_their_bars(monkeypatch):
    """hotspots.png labelled its bars 1..4 (the font drew digits only): the spots are named now."""
    import string

    import cudagent.png as png
    from cudagent.usermodel.hotspots import Hotspots, Spot

    assert all(ch in png._FONT for ch in string.ascii_lowercase + string.digits + "._:-(){}%")
    drawn = []
    monkeypatch.setattr(png, "bar_plot", lambda bars, path, mark=None: drawn.extend(b[0] for b in bars))
    spots = [
        Spot(rank=1, spot="blocks.0.fc1", kind="Linear", ms=0.4, share=0.4, calls=1),
        Spot(rank=2, spot="blocks.1.act", kind="GELU", ms=0.2, share=0.2, calls=1),
    ]
    Hotspots(model="m", device="cpu", iterations=1, total_ms=1.0, wall_ms=1.0, spots=spots).chart("/dev/null")
    assert drawn == ["1 blocks.0.fc1", "2 blocks.1.act"], drawn


def test_r2_an_install_under_tmp_is_told_why_the_jail_cannot_hold(monkeypatch):
    """The walkthrough's clean clone lived under /tmp, which a candidate's own mount namespace replaces: the probe
    failed with `No module named 'cudagent.resources'`. Now the reason is one sentence that says what to do."""
    import cudagent.resources as resources
    from cudagent.evaluator.jail.level import _probe, under_scratch

    assert under_scratch() is None or "/tmp" in str(resources.PACKAGE_DIR)
    monkeypatch.setattr(resources, "PACKAGE_DIR", Path("/tmp/clone/cudagent"))
    said = _probe("cpu", "namespace", "best-effort", jailed=True)
    assert said.startswith("cudagent is installed under /tmp (/tmp/clone/cudagent)") and "install it elsewhere" in said


@pytest.mark.slow  # imports transformers
def test_r2_a_failed_gguf_conversion_leaves_nothing_half_made(tmp_path, monkeypatch):
    """The README's conversion failed on transformers 5.24 after writing the tokenizer, and left a half-made
    `smollm2/`: now it writes beside the destination and renames, so a failure at any step leaves nothing."""
    transformers = pytest.importorskip("transformers")
    from cudagent.agent.gguf import gguf_to_hf

    class Tokenizer:
        def save_pretrained(self, folder):
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / "tokenizer.json").write_text("{}")

    def refuse(*args, **kwargs):
        raise ValueError("The model is quantized with gguf and is not serializable")  # what 5.24 says, elsewhere

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Tokenizer())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="not serializable"):
        gguf_to_hf(gguf, tmp_path / "smollm2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]  # no smollm2/, no smollm2.partial/
    with pytest.raises(FileNotFoundError, match="give the path of a .gguf model file"):
        gguf_to_hf(tmp_path / "missing.gguf", tmp_path / "out")


def test_r2_a_cache_or_home_given_with_dots_or_relative_is_used_as_the_folder_it_names(tmp_path, monkeypatch):
    """The README's test command left CUDAGENT_CACHE_DIR to the tests' `tests/../.test-cache`: inside the build's
    jail, where only the scratch is mounted, `tests/..` does not exist, and every jailed build failed with bwrap's
    "Can't chdir". A relative path broke the same way after a chdir. Both are resolved where they are read."""
    from cudagent.resources import cache_dir
    from cudagent.settings import Settings

    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDAGENT_CACHE_DIR", "sub/../cache")
    assert cache_dir() == tmp_path.resolve() / "cache" and cache_dir().is_dir()
    home = Settings.from_env({"CUDAGENT_HOME": "sub/../home"}).home
    assert home == tmp_path.resolve() / "home"


def test_r2_counts_are_written_in_words_a_person_reads():
    """`2 place(s)`, `1 kernel(s) applied`: a count and its noun agree everywhere a person reads them."""
    import re

    from cudagent.text import counted

    assert [counted(n, "kernel") for n in (0, 1, 2)] == ["0 kernels", "1 kernel", "2 kernels"]
    assert counted(2, "graph break") == "2 graph breaks" and counted(3, "child", "children") == "3 children"
    placeholder_then_noun_s = re.compile(r"\{[^{}]+\} [\w ]+\(s\)")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "cudagent").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if placeholder_then_noun_s.search(line)
    ]
    assert not found, found


def test_r2_a_table_cell_that_looks_like_markup_is_printed_as_written(monkeypatch, capsys):
    """A spot, task or model named like a rich closing tag crashed the table (MarkupError): cells are data."""
    from rich.text import Text

    from cudagent.cli.output import print_table

    monkeypatch.setenv("COLUMNS", "80")
    print_table([["run", "state"], ["[/x] odd[name]", Text.from_markup("[green]ok[/green]")]], "runs of [/y]")
    out = capsys.readouterr().out
    assert "[/x] odd[name]" in out and "runs of [/y]" in out and "│ ok" in out, out


# ----- round three (issue 48) ---------------------------------------------------------------------------------------


def test_r3_a_missing_model_file_is_said_before_a_missing_server():
    """`optimize model.py:Block` with the file missing and no server configured exited 3 (no server) before 2 (no
    file): the README orders them the other way. The file is looked for first, still before torch."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("OPENAI_BASE_URL", None)
    for argv in (["optimize", "/nonexistent/model.py:Block"], ["optimize", "--hf", "/nonexistent/hf-dir"]):
        said = _said_before_torch(argv, env, 2)
        assert len(said) == 1 and ("does not exist" in said[0] or "is not a directory" in said[0]), (argv, said)


def test_r3_a_model_transformers_cannot_build_is_not_told_to_use_init(tmp_path):
    from cudagent.usermodel.inputs import parse
    from cudagent.usermodel.loading import UserModel, UserModelError

    def fails():
        raise ImportError("this model type needs the package `flash_attn`")

    hf = UserModel("hf:tiny", fails, parse("x=f32[2]"), remedy="transformers could not make this model type")
    with pytest.raises(UserModelError) as caught:
        hf.make(seed=0, device="cpu")
    assert "--init" not in caught.value.message and "flash_attn" in caught.value.message
    own = UserModel("model.py:Block", fails, parse("x=f32[2]"))
    with pytest.raises(UserModelError, match="--init"):
        own.make(seed=0, device="cpu")


def test_r3_inputs_are_titled_in_the_dtype_the_model_runs_in():
    from cudagent.usermodel.inputs import parse

    spec = parse("x=f32[8,64], ids=i64[8]<100, scale=0.5")
    assert spec.text("float16") == "x=float16[8,64], ids=int64[8]<100, scale=0.5"
    assert spec.text() == "x=float32[8,64], ids=int64[8]<100, scale=0.5"


def test_r3_show_and_export_say_what_a_run_has():
    from typer.testing import CliRunner

    from cudagent.cli import app
    from cudagent.cli.review import _turns_it_has

    assert [_turns_it_has(n) for n in (0, 1, 3)] == ["it has no turns yet", "it has turn 1", "it has turns 1 to 3"]
    help_text = CliRunner().invoke(app, ["export", "--help"], env={"COLUMNS": "200"}).output
    assert "patch(model, *example_inputs)" in help_text


def test_r3_the_test_extra_does_not_pin_transformers_below_a_users():
    """`pip install -e ".[test]"` moved an installed transformers 5.24 down to 5.10 (verl's pin came with it)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not [d for d in extras["test"] if d.startswith("verl")]
    assert [d for d in extras["train"] if d.startswith("verl")]
    readme = (ROOT / "README.md").read_text()
    assert (
        'pip install -e ".[test,train]"' in readme
        and 'pip install -e ".[test,train]"' in (ROOT / ".ci" / "run").read_text()
    )


OWN_FIRST = """import torch
import torch.nn as nn


class Mine(nn.Module):  # a class of this file: it cannot travel in a task
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(256, 256) / 16)

    def forward(self, x):
        # far more than fc's one Linear (about 40 ms a call on one core): at 64 rounds, fc once ranked first (50.7%)
        # on a loaded machine, a time slice lost inside its profiled calls
        for _ in range(512):
            x = torch.tanh(x @ self.w)
        return x


class Model(nn.Module):
    def __init__(self, only_mine: bool = False):
        super().__init__()
        self.mine = Mine()
        self.fc = nn.Identity() if only_mine else nn.Linear(256, 256)

    def forward(self, x):
        return self.fc(self.mine(x))
"""


@pytest.mark.slow
def test_r3_tasks_n_counts_spots_that_became_tasks_and_none_is_an_error(tmp_path):
    """`hotspots --tasks 1` tried only the top spot, which could not become a task, and exited 0 with tasks/ empty.
    Now N counts tasks written (the spots that cannot are listed and skipped), the count is said, and none is an
    error."""
    model = tmp_path / "model.py"
    model.write_text(OWN_FIRST)
    env = cli_env(tmp_path / "home", None)
    base = ["hotspots", "--inputs", "x=f32[64,256]", "--device", "cpu", "--iterations", "2", "--modules"]
    done = cudagent([*base[:1], f"{model}:Model", *base[1:], "--tasks", "1", "--out", str(tmp_path / "a")], env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "spot mine" in done.stderr and "defined in your own file" in done.stderr, done.stderr
    assert "wrote 1 task in" in done.stderr and [p.name for p in (tmp_path / "a" / "tasks").glob("*.py")] != []
    only = ["--init", "[True]", "--tasks", "2", "--out", str(tmp_path / "b")]
    none = cudagent([*base[:1], f"{model}:Model", *base[1:], *only], env)
    assert none.returncode == 2 and "could become a task" in none.stderr, none.stderr


@pytest.mark.slow
def test_r3_a_model_run_with_no_task_is_failed_with_its_report(tmp_path):
    """`optimize --top 1` on a model whose spots cannot become tasks ran no episode, exited 0 and was listed as done.
    Now it is failed (exit 2), with report.md saying why."""
    model = tmp_path / "model.py"
    model.write_text(OWN_FIRST)
    env = cli_env(tmp_path / "home", None)
    with ScriptedServer(from_list([FINISH])) as server:
        env.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="k")
        args = ["optimize", f"{model}:Model", "--init", "[True]", "--inputs", "x=f32[64,256]", "--device", "cpu"]
        done = cudagent([*args, "--by", "modules", "--top", "1", "--json"], env)
    assert done.returncode == 2, done.stderr[-2000:]
    record = json.loads(done.stdout.splitlines()[-1])
    assert record["state"] == "failed" and "no episode ran" in record["result"]["why"], record
    runs = cudagent(["runs", "--json"], env)
    assert any(json.loads(x).get("state") == "failed" for x in runs.stdout.splitlines()), runs.stdout
    report = next((tmp_path / "home" / "runs").glob("*/report.md")).read_text()
    assert "nothing put back" in report and "no episode ran" in report


@pytest.mark.slow
def test_r3_a_log_has_no_silent_stretch_within_a_turn(tmp_path):
    """With stderr a file or a pipe, a turn's line came only when the turn ended (the model's reply and the tools
    took 19-98 s with nothing said). Now each step says so as it starts."""
    task = write_task(tmp_path / "t")
    steps = [{"tool": "bash", "arguments": {"command": "echo hi"}}, FINISH]
    with ScriptedServer(from_list(steps)) as server:
        done = cudagent(
            ["optimize", str(task), "--device", "cpu", "--no-final-check"], cli_env(tmp_path / "h", server.url)
        )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    order = [i for i, ln in enumerate(lines) if ln in ("turn 1: the model...", "turn 1: bash...")]
    assert len(order) == 2 and order[0] < order[1] < lines.index(next(ln for ln in lines if ln.startswith("turn 1/")))


@pytest.mark.slow
def test_r3_a_model_run_that_puts_nothing_back_still_writes_its_report_and_branch(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(OWN_FIRST)
    env = cli_env(tmp_path / "home", None)
    with ScriptedServer(from_list([FINISH])) as server:  # every episode gives up at once: no kernel anywhere
        env.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="k")
        args = ["optimize", f"{model}:Model", "--inputs", "x=f32[64,256]", "--device", "cpu", "--by", "modules"]
        done = cudagent([*args, "--top", "1", "--json", "--no-final-check"], env)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout.splitlines()[-1])
    assert record["state"] == "done" and record["result"]["correct"] is None, record
    report = next((tmp_path / "home" / "runs").glob("*/report.md")).read_text()
    assert report.startswith(f"# {record['model']}: nothing put back") and "Apply it" not in report
    repo = record["repo"]["repo_dir"]
    assert git(repo, "log", "-1", "--format=%s").strip().endswith("nothing put back")
    assert "report.md" in git(repo, "show", "--name-only", "--format=", "HEAD").split()
