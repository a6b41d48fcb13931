"""KernelBench's load_inline candidates built by the trusted build: the calls read without running model_new.py, the
files torch would write, and a handed-in module used only for the arguments it was built from: the candidate's
process compiles nothing."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
import torch.utils.cpp_extension as cpp_extension

from cudagent.evaluator.toolchain.inline import InlineSpec, NotBuilt, extract, folder_for, install, module_path

REPO = Path(__file__).resolve().parent.parent
CONTROL = REPO / "tests" / "adversarial" / "cases" / "control_inline_cpu" / "model_new.py"


def test_calls_with_literal_arguments_are_read_without_running_anything():
    source = '''
import torch.utils.cpp_extension as ce
from torch.utils.cpp_extension import load_inline as li
HEADER = "#include <cstdint>"
body = f"""{HEADER}
int64_t twice(int64_t x) {{ return 2 * x; }}
"""
decl = "\\n".join(["int64_t twice(int64_t x);", "// done"])
a = li(name="first", cpp_sources=[HEADER + "\\n" + body], functions=["twice"], extra_cflags=["-O3"])
b = ce.load_inline("second", decl, cuda_sources=body, functions={"twice": "doubles"},
                   extra_cuda_cflags=["--use_fast_math"])
'''
    specs, left = extract(source)
    assert left == 0 and [s.name for s in specs] == ["first", "second"]
    first, second = specs
    assert first.cpp_sources == (
        "#include <cstdint>\n#include <cstdint>\nint64_t twice(int64_t x) { return 2 * x; }\n",
    )
    assert first.functions == (("twice", "twice"),) and first.extra_cflags == ("-O3",) and not first.with_cuda
    assert second.cpp_sources == ("int64_t twice(int64_t x);\n// done",) and second.with_cuda
    assert second.functions == (("twice", "doubles"),)


@pytest.mark.parametrize(
    "call",
    [
        'load_inline(name=make_name(), cpp_sources="x")',  # computed when model_new.py runs
        'load_inline(name="n", cpp_sources=src)',  # src assigned twice
        'load_inline(name="n", cpp_sources="x", extra_cflags=["-fplugin=/tmp/evil.so"])',  # runs code in the build
        'load_inline(name="n", cpp_sources="x", extra_ldflags=["-Wl,--wrap=malloc"])',
        'load_inline(name="n", cpp_sources="x", extra_cuda_cflags=["-ccbin", "/tmp/cc"])',
        "load_inline(**options)",
        'load_inline(name="n", cpp_sources="x", is_python_module=False)',
    ],
)
def test_calls_that_cannot_be_read_or_trusted_are_not_built_from_the_text(call):
    """Counted, not built: the evaluator finds them by importing model_new.py in the jail (and refuses the flags)."""
    source = f"from torch.utils.cpp_extension import load_inline\nsrc = 'a'\nsrc = 'b'\n{call}\n"
    assert extract(source) == ([], 1)


def test_the_files_are_those_torch_writes(tmp_path, monkeypatch):
    """main.cpp and cuda.cu compared with what torch's own load_inline writes (its compile step stubbed out)."""
    monkeypatch.setattr(cpp_extension, "_jit_compile", lambda *a, **k: None)
    kwargs = dict(
        name="probe",
        cpp_sources=["int f();", "int g();"],
        cuda_sources="__global__ void k() {}\nint f() { return 1; }",
        functions={"f": "the f", "g": "g"},
        build_directory=str(tmp_path),
    )
    spec = InlineSpec.of_call((), kwargs)  # first: torch's load_inline extends the caller's lists in place
    cpp_extension.load_inline(**{**kwargs, "cpp_sources": list(kwargs["cpp_sources"])})
    assert (tmp_path / "main.cpp").read_text() == spec.main_cpp()
    assert (tmp_path / "cuda.cu").read_text() == spec.cuda_cu()
    plain = InlineSpec.of_call((), {**kwargs, "with_pytorch_error_handling": False, "no_implicit_headers": True})
    cpp_extension.load_inline(
        **{**kwargs, "cpp_sources": list(kwargs["cpp_sources"])},
        with_pytorch_error_handling=False,
        no_implicit_headers=True,
    )
    assert (tmp_path / "main.cpp").read_text() == plain.main_cpp() and plain.key() != spec.key()


def test_a_handed_in_module_serves_only_the_arguments_it_was_built_from(tmp_path, monkeypatch):
    """Any other call is refused (nothing is compiled in the candidate's process), and so is torch's `load`; while
    the evaluator finds the calls (record=True), an unbuilt call is noted and raises NotBuilt."""
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)  # restored after the test
    monkeypatch.setattr(cpp_extension, "load", cpp_extension.load)
    built = InlineSpec.of_call((), {"name": "m", "cpp_sources": "int f();", "functions": ["f"]})
    path = module_path(tmp_path, built)
    path.parent.mkdir(parents=True)
    path.write_text("")  # any file: the other sources must never get this far
    served = install(str(tmp_path))
    for changed in ({"cpp_sources": "int f(); // changed"}, {"extra_cflags": ["-O0"]}):
        with pytest.raises(RuntimeError, match="were not built before the candidate ran"):
            cpp_extension.load_inline(**{"name": "m", "cpp_sources": "int f();", "functions": ["f"], **changed})
    with pytest.raises(RuntimeError, match="is not supported"):
        cpp_extension.load(name="m", sources=["m.cpp"])
    assert served == {"prebuilt": [], "wanted": []}

    recorded = install(str(tmp_path), record=True)
    with pytest.raises(NotBuilt):
        cpp_extension.load_inline(name="other", cpp_sources="int g();", functions=["g"])
    assert [w["name"] for w in recorded["wanted"]] == ["other"]


@pytest.mark.slow
def test_a_load_inline_candidate_is_built_here_and_its_process_imports_the_module(tmp_path):
    """No compile in the candidate's process: the verdict's build names main.cpp, the module sits at its key, and
    the verification notes nothing built by torch."""
    from cudagent.device.info import resolve_device
    from cudagent.evaluator import EvalOptions, Evaluator
    from cudagent.task import load_task
    from cudagent.workspace import resolve_candidate, workspace_for

    task = load_task(REPO / "tests" / "adversarial" / "tasks" / "vadd.py")
    folder = tmp_path / "candidate"
    folder.mkdir()
    name = f"vadd_inline_{secrets.token_hex(4)}"  # a call this machine has never built
    (folder / "model_new.py").write_text(CONTROL.read_text().replace("vadd_inline_cpu", name))
    ws = workspace_for(resolve_candidate(folder / "model_new.py"), task.source)
    with Evaluator(task, resolve_device("cpu"), EvalOptions(timing=False)) as evaluator:
        v = evaluator.evaluate(ws)
    assert v.correct, json.dumps(v.to_dict())[:2000]
    (spec,), left = extract((folder / "model_new.py").read_text())
    assert left == 0 and (folder_for(spec, resolve_device("cpu")) / f"{name}.so").is_file()
    assert v.build["recompiled"] == [f"{name}/main.cpp"]


def _cuda_spec(cuda_source: str) -> InlineSpec:
    (spec,), _ = extract(
        f"from torch.utils.cpp_extension import load_inline\nsrc = {cuda_source!r}\n"
        'm = load_inline(name="k", cpp_sources="void f();", cuda_sources=src, functions=["f"])\n'
    )
    return spec


def test_the_whole_cpp_frontend_is_read_as_torch_types_where_nothing_needs_more():
    """A KernelBench cuda_sources starts with torch/extension.h, which nvcc parses twice (device and host); the
    lean unit reads torch/types.h in its place, line for line (the audit's line numbers stay), and only where the
    sources name nothing that only the frontend or the Python bindings declare."""
    public = (
        extract((REPO / ".carry" / "public" / "kb_fuse_gelu" / "model_new.py").read_text())[0]
        if (REPO / ".carry" / "public" / "kb_fuse_gelu").is_dir()
        else []
    )
    kernel = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n__global__ void k(float* x) { x[0] = 1; }\n"
    spec = _cuda_spec(kernel)
    full, lean = spec.cuda_cu(), spec.lean_cuda_cu()
    assert "#include <torch/extension.h>" in full and "torch/extension.h" not in lean
    assert lean.count("#include <torch/types.h>") == 2 and len(lean.splitlines()) == len(full.splitlines())
    for needs in ("py::object o;", "torch::nn::Linear l(1, 1);", "PYBIND11_MODULE(m, n) {}", "torch::autograd::grad"):
        assert _cuda_spec(kernel + needs).lean_cuda_cu() is None, needs
    assert _cuda_spec("#include <cuda_runtime.h>\n__global__ void k() {}\n").lean_cuda_cu() is None  # nothing to drop
    assert _cuda_spec(kernel.replace("torch/extension.h", "torch/torch.h")).lean_cuda_cu() is not None
    for spec in public:
        assert spec.lean_cuda_cu() is not None  # KernelBench's own example qualifies
