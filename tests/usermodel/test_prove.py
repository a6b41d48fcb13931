"""Putting kernels back and proving it: which spots go in, the comparison of a whole model's output
(cudagent/usermodel/prove.py), the report's reading of the timings."""

import pytest


def test_a_transformers_output_with_its_cache_is_compared_tensor_by_tensor():
    """The proof compares a whole model's output: a GPT-2's ModelOutput holds a DynamicCache object, whose key and
    value tensors must be compared too (found on the H100: the cache made the comparison raise)."""
    import torch
    from transformers import GPT2Config, GPT2Model

    from cudagent.evaluator.compare import Tolerance, compare
    from cudagent.usermodel.prove import comparable

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, bos_token_id=0, eos_token_id=0))
    x = torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        first, again = model.eval()(x), model(x)
        assert compare(comparable(first), comparable(again), Tolerance()).ok
        model.h[0].attn.c_attn.bias[40] += 1.0  # a key of layer 0 only: the last hidden state moves, and the cache
        changed = model(x)
    messages = [v.message for v in compare(comparable(first), comparable(changed), Tolerance()).violations]
    # transformers names the output's cache past_key_values (to 5.1x) or cache (later): its keys are compared either way
    names = ("past_key_values", "cache")
    assert any(m.startswith(f"output['{n}']['layers'][0]['keys']") for m in messages for n in names), messages


def test_the_report_says_when_a_speedup_lies_within_the_rounds_spread():
    """The H100's GPT-2 proof (benchmarks/results/gpu-usermodel.txt): 1.13x over eager, rounds far apart; 1.01x over
    torch.compile, rounds overlapping: that one is no measurable difference, and the report must say so."""
    from cudagent.usermodel.report import markdown

    record = {"model": "hf:gpt2-class", "device": "cuda", "inputs": "input_ids=int64[8,512]<50257", "wall_ms": 4.768}
    record |= {"run_id": "gpt2-class-x", "spots": []}
    timing = {
        "ms": {"eager": 3.8598, "patched": 3.4229, "compile": 3.4692, "patched_compile": 3.9659},
        "round_spread_ms": {
            "eager": [3.8595, 3.8644],
            "patched": [3.4220, 3.4257],
            "compile": [3.3845, 3.5309],
            "patched_compile": [3.9487, 3.9870],
        },
        "rounds": 3,
        "errors": {},
        "speedup_vs_eager": 1.1276,
        "speedup_vs_compile": 1.0135,
    }
    proof = {"correct": True, "applied": ["a"], "verification": {"inputs": 3, "max_abs_error": 1.6e-05}}
    proof |= {"timing": timing, "predicted_speedup_vs_eager": 1.0975, "package": "/x/gpt2_class_kernels"}
    text = markdown(record, proof)
    eager, compiled = text.split("over torch.compile:")
    assert "1.13x measured" in eager and "within the rounds' spread" not in eager, text
    assert compiled.lstrip().startswith("1.01x") and "within the rounds' spread" in compiled, text


@pytest.mark.parametrize(
    ("best", "keep_slower", "said"),
    [
        ({"commit": "c", "tier": 3, "speedup_vs_eager": 7.9}, False, "kernel"),
        ({"commit": "c", "tier": 2, "speedup_vs_eager": 1.02}, False, "kernel"),
        ({"commit": "c", "tier": 1, "speedup_vs_eager": 0.92}, False, "not faster than the module (0.92x"),
        ({"commit": "c", "tier": 1, "speedup_vs_eager": None}, False, "its speed was not measured"),
        ({"commit": "c", "tier": 1, "speedup_vs_eager": 0.92}, True, "kernel"),
        ({"commit": None, "tier": None}, True, "no verified kernel"),
        ({"commit": "c", "tier": -1}, True, "no verified kernel"),
        ({}, False, "no verified kernel"),
    ],
)
def test_only_kernels_faster_than_their_module_go_back_unless_asked(best, keep_slower, said):
    """The H100's GPT-2 run put back cuBLAS SGEMM spots at 0.92x: a kernel slower than the module it replaces makes
    the model slower, so by default it stays out, and says why."""
    from cudagent.usermodel.modelrun import spot_outcome

    outcome = spot_outcome(best, keep_slower)
    assert outcome == said if said in ("kernel", "no verified kernel") else said in outcome, outcome


class _Chain:
    """A bf16 model of many small steps, each rounded to bf16 as eager does: its output drifts from a float32 run,
    as a deep model's does (the GPT-2 put-back found it on the H100: a kernel keeping fp32 between steps moved 183 of
    3.1 million outputs past bf16's tolerance)."""

    def __init__(self, steps: int = 30):
        self.steps = steps
        self.inputs = self

    def make_inputs(self, seed: int, device: str, dtype=None):
        import torch

        x = torch.randn(64, 256, generator=torch.Generator().manual_seed(seed))
        return [x.to(getattr(torch, dtype)) if dtype else x], {}

    def model(self, precision):
        """precision: 'rounded' (each step in the input's dtype), 'wide' (fp32 inside, one rounding at the end) or
        'noisy' (rounded, and a small error added: a kernel less accurate than the model)."""
        import torch

        def forward(x):
            y = x.float() if precision == "wide" else x
            for i in range(self.steps):
                y = y * 0.98 + 0.3 * torch.sin(2.0 * y + 0.1 * i)
            if precision == "noisy":
                y = y + 0.5 * torch.sin(1000 * x.float()).to(y.dtype)
            return y.to(x.dtype)

        return forward


def test_a_bf16_model_is_judged_against_a_float32_run_when_a_kernel_keeps_more_precision():
    import torch

    from cudagent.usermodel.prove import _verify

    chain = _Chain()
    original, wide = chain.model("rounded"), chain.model("wide")
    plain = _verify(original, wide, chain, "cpu", "bfloat16")  # bf16's tolerance alone refuses the better kernel
    assert plain["correct"] is False, plain
    fair = _verify(original, wide, chain, "cpu", "bfloat16", wide=lambda x: chain.model("wide")(x.float()))
    assert fair["correct"] is True and fair["inputs"] == 3, fair
    errors = fair["against_float32"]
    assert errors["patched"]["rel_l2"] < errors["original"]["rel_l2"], errors
    worse = _verify(original, chain.model("noisy"), chain, "cpu", "bfloat16", wide=chain.model("wide"))
    assert worse["correct"] is False and "less accurate than the original" in worse["why"], worse
    assert torch.bfloat16  # the chain runs in bf16


@pytest.mark.parametrize(
    ("modes_ms", "held_to"),
    [
        # the H100 Llama run's picking rounds: reduce-overhead 0.2% ahead, then 3% behind the default in the final ones
        ({"default": 6.0294, "reduce-overhead": 6.0178, "max-autotune": 6.1154}, "default"),
        ({"default": 6.0, "reduce-overhead": 5.7, "max-autotune": 5.8}, "reduce-overhead"),
        ({"default": 6.0, "reduce-overhead": 6.2, "max-autotune": 5.9}, "max-autotune"),
        ({"default": 6.0}, "default"),
    ],
)
def test_the_kernels_are_held_to_another_mode_only_where_it_beats_the_default_by_the_margin(modes_ms, held_to):
    from cudagent.usermodel.alternatives import strongest_mode

    assert strongest_mode(modes_ms) == held_to
