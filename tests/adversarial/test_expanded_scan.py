"""The preprocessed source and the Python C API limit (issue 36, point 3), from the attacker's side: a candidate
that runs NumPy through the builtins' exec, every Python C API name pasted together by a macro (its own, and
torch's C10_CONCATENATE) and every symbol one that pybind11's binding code links anyway. The scan of the written
source and the link audit let it through; the scan of what the preprocessor made of it does not."""

from __future__ import annotations

import pytest
from harness import Runner, load_cases

import cudagent.evaluator.audit.attribution as attribution
import cudagent.evaluator.audit.expanded_scan as expanded_scan
import cudagent.evaluator.audit.link_audit as link_audit

CASES = {c.name: c for c in load_cases("cpu")}


def expanded_scan_off(monkeypatch) -> None:
    """The defences of point 3 off: no scan of the preprocessed source, every Python symbol allowed at link time."""
    monkeypatch.setattr(expanded_scan, "scan", lambda expansion, machinery: [])
    judge = link_audit.judge_symbol
    monkeypatch.setattr(link_audit, "judge_symbol", lambda s: None if s.startswith(("Py", "_Py", "THP")) else judge(s))


@pytest.mark.slow
def test_python_api_names_pasted_by_macros_are_seen_after_preprocessing(monkeypatch, tmp_path_factory):
    case = CASES["foreign_numpy_by_pasted_baseline_api"]
    v = _run(case, tmp_path_factory.mktemp("on"))
    assert not v.correct and set(v.codes) == {"KERNEL_EMBEDS_PYTHON"}, v.summary()
    said = "\n".join(x.message for x in v.violations)
    assert "kernels/matmul.cpp:14" in said and "PyEval_GetBuiltins" in said, said  # torch's C10_CONCATENATE
    assert "kernels/matmul.cpp:25" in said and "PyObject_CallFunctionObjArgs" in said, said  # the case's own macro

    expanded_scan_off(monkeypatch)
    caught_later = _run(case, tmp_path_factory.mktemp("scan-off"))
    monkeypatch.setattr(attribution, "judge", lambda split, work: None)
    loose = _run(case, tmp_path_factory.mktemp("all-off"))
    assert caught_later.codes == ["WORK_NOT_OWN"], caught_later.summary()  # the CPU time attribution, point 1
    assert loose.correct and loose.codes == [], f"the attack is caught elsewhere:\n{loose.summary()}"


def _run(case, folder):
    runner = Runner("cpu", folder)
    try:
        return runner.run(case)
    finally:
        runner.close()


@pytest.mark.slow
def test_python_symbols_no_binding_needs_are_refused_at_link_time(monkeypatch, tmp_path):
    """The NumPy route through PyRun_String and memoryviews, with the preprocessed scan off: the link audit alone."""
    monkeypatch.setattr(expanded_scan, "scan", lambda expansion, machinery: [])
    v = _run(CASES["foreign_numpy_by_capi"], tmp_path)
    assert v.codes == ["KERNEL_EMBEDS_PYTHON"], v.summary()
    assert "links against" in v.violations[0].message and "PyRun_StringFlags" in v.violations[0].message, v.summary()
