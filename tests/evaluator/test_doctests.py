"""The doctest examples in the modules that carry them."""

import doctest

import pytest

import cudagent.evaluator.link_audit
import cudagent.evaluator.op_policy
import cudagent.evaluator.roofline
import cudagent.evaluator.static_audit
import cudagent.evaluator.transforms
import cudagent.evaluator.trees
import cudagent.evaluator.verdict
import cudagent.hardware


@pytest.mark.parametrize(
    "module",
    [
        cudagent.evaluator.verdict,
        cudagent.hardware,
        cudagent.evaluator.link_audit,
        cudagent.evaluator.op_policy,
        cudagent.evaluator.static_audit,
        cudagent.evaluator.transforms,
        cudagent.evaluator.roofline,
        cudagent.evaluator.trees,
    ],
)
def test_doctests(module):
    failures, tried = doctest.testmod(module)
    assert tried > 0 and failures == 0
