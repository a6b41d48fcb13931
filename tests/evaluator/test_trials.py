"""Trial inputs: stress keeps each input's range but changes its statistics; sparse mutation changes a small block."""

import torch

from cudagent.evaluator.trials import sparse_mutation, stress_inputs


def test_stress_keeps_ranges_and_integers():
    unit, nonneg, free = torch.rand(4096), torch.rand(4096) * 5, torch.randn(4096)
    index = torch.randint(0, 10, (64,))
    s_unit, s_nonneg, s_free, s_index = stress_inputs([unit, nonneg, free, index], seed=3)
    assert 0 <= s_unit.min() and s_unit.max() <= 1
    assert s_nonneg.min() >= 0
    assert torch.equal(s_index, index)
    assert s_free.dtype == free.dtype and s_free.shape == free.shape
    assert torch.isfinite(s_free).all()
    assert s_free.abs().max() > 5 * free.abs().max() / 2  # spikes and heavy tails


def test_stress_comb_defeats_strided_subsampling():
    x = torch.rand(1, 65536)
    (s,) = stress_inputs([x], seed=11)
    true_mean = s.mean()
    assert abs(s[0, ::8].mean() - true_mean) > 0.1 and abs(s[0, 1::8].mean() - true_mean) > 0.1


def test_stress_is_seeded():
    x = torch.randn(100)
    assert torch.equal(stress_inputs([x], 5)[0], stress_inputs([x], 5)[0])
    assert not torch.equal(stress_inputs([x], 5)[0], stress_inputs([x], 6)[0])


def test_sparse_mutation_changes_a_small_block():
    x = torch.randn(10000)
    (y,), changed = sparse_mutation([x], seed=2)
    diff = (y != x).nonzero().flatten()
    assert changed and 1 <= len(diff) <= 10
    assert diff.max() - diff.min() == len(diff) - 1  # contiguous
    (_,), changed = sparse_mutation([torch.arange(10)], seed=2)
    assert not changed


def test_inputs_far_larger_than_the_flush_buffer_are_timed_as_one_set():
    """Three rotated sets, unless a set takes ONE_SET_FLUSH_MULTIPLE flush buffers (KernelBench's 6.4 GB ReLU input):
    the candidate and the baselines of a task then get one set each, and the task a third of the device memory."""
    from cudagent.evaluator.timing.measure import (
        INPUT_SETS,
        ONE_SET_FLUSH_MULTIPLE,
        default_flush_bytes,
        draw_input_sets,
    )

    cpu = torch.device("cpu")
    limit = ONE_SET_FLUSH_MULTIPLE * default_flush_bytes(cpu)
    drawn = []

    def draw(size):
        def one(i):
            drawn.append(i)
            return [torch.empty(size // 4, dtype=torch.float32), 3]  # untouched pages: no memory is used

        return one

    assert len(draw_input_sets(draw(limit - 4), cpu)) == INPUT_SETS == 3 and drawn == [0, 1, 2]
    drawn.clear()
    assert len(draw_input_sets(draw(limit), cpu)) == 1 and drawn == [0]
