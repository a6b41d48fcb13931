"""The scan of the preprocessed source (cudagent/evaluator/audit/expanded_scan.py): what the candidate's lines
became, judged by the source scan's rules; a system header's macro's own tokens allowed only as far as the binding
and checking macros produce them."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from cudagent.device.info import resolve_device
from cudagent.evaluator.audit import expanded_scan
from cudagent.evaluator.audit.expanded_scan import read_lines, scan
from cudagent.evaluator.audit.link_audit import judge_symbol
from cudagent.evaluator.toolchain import expanded
from cudagent.evaluator.toolchain.expanded import Expansion, OwnFile
from cudagent.evaluator.toolchain.extension import toolchain_for, torch_flags

MACHINERY = frozenset({"PyErr_Format(", "PyInit_*("})


def _expansion(tmp_path: Path, text: str, own=None) -> Expansion:
    path = tmp_path / "unit.o.ii"
    path.write_text(text)
    return Expansion(str(path), "cxx", own or {"ws/kernels/k.cpp": OwnFile("kernels/k.cpp")}, unit="ws/kernels/k.cpp")


def test_a_name_a_macro_spelled_is_judged_and_a_headers_machinery_is_not(tmp_path):
    text = "\n".join(
        [
            '# 1 "ws/kernels/k.cpp"',
            "int a = 0;",
            'PyRun_SimpleStringFlags("x", 0);',  # line 2: the candidate's own macro spelled it
            '# 3 "ws/kernels/k.cpp" 3 4',
            "PyInit_ext(); PyErr_Format(e);",  # line 3: a header's binding machinery
            '# 4 "ws/kernels/k.cpp" 3 4',
            "PyRun_StringFlags(",  # line 4: a header's macro the candidate invoked (Python's PyRun_String)
            '# 4 "ws/kernels/k.cpp"',
            '"code"',
            '# 4 "ws/kernels/k.cpp" 3 4',
            ", 0)",
            '# 9 "/usr/include/torch/header.h" 3',
            "PyRun_SimpleStringFlags(0);",  # a header's own code: not the candidate's
        ]
    )
    found = scan(_expansion(tmp_path, text), lambda compiler: MACHINERY)
    assert [(v.code, v.message.split(":")[1]) for v in found] == [
        ("KERNEL_EMBEDS_PYTHON", "2"),
        ("KERNEL_EMBEDS_PYTHON", "4"),
    ], found
    assert "a header's macro used on this line" in found[1].message


def test_only_the_candidates_lines_of_load_inlines_main_cpp_are_judged(tmp_path):
    text = '# 1 "main.cpp"\n#include\nint f();\nPyErr_Format(e);\n'
    own = {"main.cpp": OwnFile("load_inline('m') cpp_sources", 2, 2)}
    assert scan(_expansion(tmp_path, text, own), lambda c: frozenset()) == []
    own = {"main.cpp": OwnFile("load_inline('m') cpp_sources", 2, 3)}
    (v,) = scan(_expansion(tmp_path, text, own), lambda c: frozenset())
    assert v.message.startswith("load_inline('m') cpp_sources:2:"), v.message


def test_a_unit_the_preprocessor_did_not_name_is_not_passed_unjudged(tmp_path):
    found = scan(_expansion(tmp_path, '# 1 "/tmp/elsewhere/k.cpp"\nPyRun_SimpleString("x");\n'), lambda c: frozenset())
    assert [v.code for v in found] == ["KERNEL_NOT_PREPROCESSED"]
    gone = Expansion(str(tmp_path / "missing.ii"), "cxx", {"k.cpp": OwnFile("k.cpp")}, unit="k.cpp")
    assert [v.code for v in scan(gone, lambda c: frozenset())] == ["KERNEL_NOT_PREPROCESSED"]


def test_the_build_keeps_only_what_relative_paths_name():
    text = '# 1 "ws/k.cpp"\nint a;\n# 1 "/usr/include/stdio.h" 1 3\nint printf();\n# 3 "ws/k.cpp" 2\nint b;\n'
    kept = expanded.own_text(text)
    assert "printf" not in kept and "int a;" in kept and "int b;" in kept
    assert {name for name, _ in read_lines(kept)} == {"ws/k.cpp"}


def test_the_link_audit_allows_only_the_python_api_a_binding_links():
    assert judge_symbol("PyRun_StringFlags")[0] == "KERNEL_EMBEDS_PYTHON"
    assert judge_symbol("PyMemoryView_FromMemory")[0] == "KERNEL_EMBEDS_PYTHON"
    assert judge_symbol("THPVariable_Wrap(at::TensorBase const&)")[0] == "KERNEL_EMBEDS_PYTHON"  # unless baseline


LEGIT = r"""#include <torch/extension.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#define CHECK_INPUT(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
torch::Tensor scale(torch::Tensor x, double s) {
  CHECK_INPUT(x);
  TORCH_CHECK_EQ(x.dim(), 2);
  auto out = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "scale", ([&] {
    auto* o = out.data_ptr<scalar_t>();
    const auto* i = x.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), 4096, [&](int64_t b, int64_t e) { for (auto k = b; k < e; ++k) o[k] = i[k] * s; });
  }));
  TORCH_INTERNAL_ASSERT(out.defined());
  return out;
}
TORCH_LIBRARY(legit_ops, m) { m.def("scale(Tensor x, float s) -> Tensor"); }
TORCH_LIBRARY_IMPL(legit_ops, CPU, m) { m.impl("scale", &scale); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", torch::wrap_pybind_function(scale), "scale"); }
"""
ATTACK = r"""#include <torch/extension.h>
#define PJ(a, b) a##b
#define RUN PyRun_SimpleString
void attack(pybind11::module& m) {
  PJ(PyRun_, SimpleString)("1");
  C10_CONCATENATE(PyEval_, GetBuiltins)();
  RUN("2");
  PYBIND11_CONCAT(get, env)("HOME");
  m.PYBIND11_CONCAT(at, tr)("__loader__");
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("attack", &attack); PJ(PyImport_, ImportModule)("os"); }
"""


@pytest.fixture(scope="module")
def preprocess(tmp_path_factory):
    tc = toolchain_for(resolve_device("cpu"))
    cflags, _, _ = torch_flags(tc, "probe", False, [])
    folder = tmp_path_factory.mktemp("pre")

    def run(name: str, source: str) -> list:
        (folder / name).write_text(source)
        argv = [tc.cxx, *[p for f in cflags for p in shlex.split(f)], "-E", name]
        proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True, check=True)
        expanded.write_beside(str(folder / f"{name}.o"), proc.stdout)
        expansion = Expansion(str(folder / f"{name}.o.ii"), "cxx", {name: OwnFile(name)}, unit=name)
        return scan(expansion, lambda compiler: expanded_scan.machinery_for_toolchain(tc, compiler))

    return run


@pytest.mark.slow
def test_an_honest_extensions_macros_are_machinery(preprocess):
    assert preprocess("legit.cpp", LEGIT) == []


@pytest.mark.slow
def test_every_way_a_macro_spells_a_forbidden_name_is_seen(preprocess):
    found = preprocess("attack.cpp", ATTACK)
    lines = {(v.code, int(v.message.split(":")[1])) for v in found}
    assert {
        ("KERNEL_EMBEDS_PYTHON", 5),  # pasted by the candidate's macro
        ("KERNEL_EMBEDS_PYTHON", 6),  # pasted by torch's C10_CONCATENATE
        ("KERNEL_EMBEDS_PYTHON", 7),  # a name the candidate's macro holds, itself a macro of Python's headers
        ("KERNEL_ENV", 8),  # pybind11's own pasting macro
        ("KERNEL_EMBEDS_PYTHON", 9),  # attribute access, pasted
        ("KERNEL_EMBEDS_PYTHON", 11),  # beside the binding macro's machinery, on its line
    } <= lines, found
