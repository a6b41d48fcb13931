"""Output comparison: NaN is never a wildcard, types and structure are exact, tolerances follow the dtype."""

import torch

from cudagent.evaluator.compare import Tolerance, compare
from cudagent.evaluator.wire import WireTensor


def codes(expected, got, **kw):
    return [v.code for v in compare(expected, got, Tolerance(**kw)).violations]


def test_close_values_pass_and_errors_are_measured():
    e = torch.randn(100)
    r = compare(e, e + 5e-3, Tolerance())
    assert r.ok and abs(r.max_abs_error - 5e-3) < 1e-6 and 0 < r.worst_tolerance_ratio < 1


def test_values_beyond_tolerance_fail_with_the_worst_index():
    e = torch.zeros(4, 4)
    g = e.clone()
    g[2, 3] = 0.5
    r = compare(e, g, Tolerance())
    assert [v.code for v in r.violations] == ["OUTPUT_MISMATCH"]
    assert "index (2, 3)" in r.violations[0].message and "1 of 16" in r.violations[0].message


def test_nan_is_never_a_wildcard():
    e = torch.tensor([1.0, float("nan"), float("inf")])
    assert codes(e, torch.tensor([1.0, float("nan"), float("inf")])) == []
    assert codes(e, torch.tensor([float("nan"), float("nan"), float("inf")])) == ["OUTPUT_NOT_FINITE"]
    assert codes(e, torch.tensor([1.0, 0.0, float("inf")])) == ["OUTPUT_NOT_FINITE"]
    assert codes(e, torch.tensor([1.0, float("nan"), float("-inf")])) == ["OUTPUT_NOT_FINITE"]


def test_type_shape_dtype_device_structure():
    e = torch.ones(3)
    assert codes(e, torch.ones(4)) == ["OUTPUT_SHAPE"]
    assert codes(e, torch.ones(3, dtype=torch.float64)) == ["OUTPUT_DTYPE"]
    assert codes(e, WireTensor("evil.Lazy", "float32", [3], "cpu")) == ["OUTPUT_TYPE"]
    assert codes((e, e), [e, e]) == ["OUTPUT_TYPE"]
    assert codes((e, e), (e,)) == ["OUTPUT_TYPE"]
    g = torch.ones(3)
    g.wire_device = "cuda:0"
    assert codes(e, g) == ["OUTPUT_DEVICE"]
    assert compare(e, g, Tolerance(), check_device=False).ok


def test_integers_must_match_exactly():
    assert codes(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4])) == ["OUTPUT_MISMATCH"]


def test_tolerance_by_dtype_and_override():
    e = torch.full((8,), 1.0, dtype=torch.bfloat16)
    assert codes(e, e + 0.03) == []  # bf16 defaults to 2e-2 each: 0.02 + 0.02 * 1
    assert codes(torch.ones(8), torch.ones(8) + 0.03) == ["OUTPUT_MISMATCH"]  # fp32: 0.01 + 0.01
    assert codes(torch.ones(8), torch.ones(8) + 0.03, atol=0.1) == []


def test_relative_l2_error():
    e = torch.ones(1000)
    r = compare(e, e * (1 + 1e-3), Tolerance())
    assert abs(r.rel_l2 - 1e-3) < 1e-5


def test_dict_like_outputs_compare_key_by_key():
    """A whole model's output is often a dict (transformers' ModelOutput): its tensors are compared one by one."""
    from collections import OrderedDict

    class Output(OrderedDict):
        pass

    e = Output(last_hidden_state=torch.ones(2, 3), past=(torch.zeros(2),))
    assert codes(e, Output(last_hidden_state=torch.ones(2, 3) + 1e-4, past=(torch.zeros(2),))) == []
    bad = compare(e, Output(last_hidden_state=torch.ones(2, 3) + 1, past=(torch.zeros(2),)), Tolerance())
    assert [v.code for v in bad.violations] == ["OUTPUT_MISMATCH"]
    assert "['last_hidden_state']" in bad.violations[0].message
    assert codes(e, Output(past=(torch.zeros(2),), last_hidden_state=torch.ones(2, 3))) == ["OUTPUT_TYPE"]
    assert codes(e, dict(e)) == ["OUTPUT_TYPE"]


def _sequential_bf16_sum(x: torch.Tensor) -> torch.Tensor:
    acc = x[0]
    for row in x[1:]:
        acc = acc + row  # rounded to bf16 at every step: far from the sum on long columns
    return acc


def test_a_half_precision_output_is_judged_against_the_answer_its_reference_approximates():
    from cudagent.evaluator.compare import within_reference_error

    x = torch.rand(256, 4096).to(torch.bfloat16)
    reference = _sequential_bf16_sum(x)
    answer = x.float().sum(0)
    exact = answer.to(torch.bfloat16)  # the sum, rounded once
    assert codes(reference, exact) == ["OUTPUT_MISMATCH"]  # the reference itself is beyond tolerance of the answer
    assert within_reference_error(reference, answer, exact, Tolerance()).ok
    assert within_reference_error(reference, answer, reference, Tolerance()).ok  # the reference passes its own rule
    # An attacker reflects the reference about the answer: as far from the reference as the reference is from the
    # answer (a rule widened around the reference would take it), twice as far from the answer as the reference.
    reflected = (2 * reference.float() - answer).to(torch.bfloat16)
    judged = within_reference_error(reference, answer, reflected, Tolerance())
    assert [v.code for v in judged.violations] == ["OUTPUT_MISMATCH"]
    assert "farther from the fp32 answer" in judged.violations[0].message
    noisy = (answer + 3 * 0.02 * (1 + answer.abs()) * torch.sign(torch.randn(4096))).to(torch.bfloat16)
    assert not within_reference_error(reference, answer, noisy, Tolerance()).ok  # plain errors still fail


def test_the_wider_answer_keeps_non_finite_values_exact():
    from cudagent.evaluator.compare import within_reference_error

    e = torch.tensor([1.0, float("inf"), float("nan")], dtype=torch.bfloat16)
    x = torch.tensor([1.0, float("inf"), float("nan")])
    assert within_reference_error(e, x, e.clone(), Tolerance()).ok
    assert not within_reference_error(
        e, x, torch.tensor([1.0, 5.0, float("nan")], dtype=torch.bfloat16), Tolerance()
    ).ok
    assert not within_reference_error(
        e, x, torch.tensor([1.0, float("inf"), 0.0], dtype=torch.bfloat16), Tolerance()
    ).ok


def test_the_answer_widens_the_plain_rule_and_never_narrows_it():
    """Where the reference lands far from the answer (a stressed causal attention whose rounded logits pick another
    key: H200, the Llama region's stress trial, reference 10.125 against the answer 0.1245), a candidate one bf16 step
    from the reference there, and closer to the answer than the reference elsewhere, passes; the rule at the answer's
    magnitude alone failed it, while the plain rule passes that element."""
    from cudagent.evaluator.compare import within_reference_error
    from cudagent.evaluator.exact import judged

    answer = torch.tensor([0.124505, 1.0, -2.0, 3.0])
    reference = torch.tensor([10.125, 1.25, -2.25, 3.0], dtype=torch.bfloat16)  # beyond tolerance but at the last
    candidate = torch.tensor([10.1875, 1.0, -2.0, 3.0], dtype=torch.bfloat16)  # one step off, then the answer
    assert not compare(reference, candidate, Tolerance()).ok  # the plain rule fails it (the answer is asked for)
    verdict = judged(reference, candidate, Tolerance(), lambda: answer)
    assert verdict.ok, [v.message for v in verdict.violations]
    # From the other side: farther from the reference than the plain rule allows and farther from the answer than the
    # reference is, it fails as before, and so does a candidate wrong where the reference is right
    for wrong in ([10.5, 1.0, -2.0, 3.0], [10.125, 1.0, -2.0, 3.5]):
        verdict = within_reference_error(reference, answer, torch.tensor(wrong, dtype=torch.bfloat16), Tolerance())
        assert [v.code for v in verdict.violations] == ["OUTPUT_MISMATCH"], wrong
