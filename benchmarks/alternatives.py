"""What a user could run instead of cudagent's kernels, side by side in one process: a model eager, compiled in each
torch.compile mode, and with Liger Kernel's patch (eager and compiled) where it applies.

    python benchmarks/alternatives.py --model llama|gpt2 [--rounds 5] [--out F]

The models are those of issue 47's targets, built from configs with random weights (seed 0), bf16 on the GPU:
a Llama-shaped model (2 layers, hidden 2048, GQA 16/4 heads, SwiGLU 5632, rotary) at input_ids [16,1024] and GPT-2
small's widths (2 layers) at [32,1024]. Each variant is made ready as the proof makes it
(cudagent/usermodel/alternatives.py: compiled and, for CUDA graphs, recorded before timing), checked against the
eager model (largest difference of the last hidden state), and timed by the evaluator's loop (the clock of every
verdict) in `rounds` interleaved rounds: medians and each variant's range of round medians. One JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

MODELS = {
    "llama": (
        "LlamaConfig",
        {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_hidden_layers": 2,
            "vocab_size": 32000,
            "use_cache": False,
        },
        (16, 1024),
    ),
    "gpt2": ("GPT2Config", {"n_layer": 2, "n_positions": 1024, "use_cache": False}, (32, 1024)),
}


def built_model(name: str):
    """(model, input_ids) of one of MODELS: random weights (seed 0), bf16, on the GPU, in eval mode."""
    import torch
    import transformers

    config_class, fields, shape = MODELS[name]
    torch.manual_seed(0)
    config = getattr(transformers, config_class)(**fields)
    model = getattr(transformers, config_class.replace("Config", "Model"))(config)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    return model, torch.randint(0, config.vocab_size, shape, device="cuda")


def emit(found: dict, out: str | None) -> None:
    """A benchmark's result as one JSON line: printed, and appended to `out` where given (the other scripts here use it
    too)."""
    line = json.dumps(found)
    print(line)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def main() -> None:
    import torch
    import transformers

    from cudagent.evaluator.timing.measure import Plan, measure
    from cudagent.usermodel.alternatives import compile_modes, key, liger, prepared

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out")
    a = parser.parse_args()
    device = "cuda"
    model, ids = built_model(a.model)
    shape = tuple(ids.shape)
    args, kwargs = (ids,), {}
    with torch.no_grad():
        expected = model(ids).last_hidden_state

    found = {"model": a.model, "inputs": list(shape), "device": torch.cuda.get_device_name()}
    found.update(torch=torch.__version__, transformers=transformers.__version__)
    targets, build_s, errors = {"eager": model}, {}, {}
    makers = {key(m): (lambda m=m: prepared(model, m, args, kwargs)) for m in compile_modes(device)}
    variant, why = liger(model)
    if variant is None:
        found["liger"] = why
    else:
        import liger_kernel

        found["liger"] = getattr(liger_kernel, "__version__", "installed")
        targets["liger"] = variant
        makers["liger_compile"] = lambda: variant.compiled(args, kwargs)
    for name, make in makers.items():
        t0 = time.monotonic()
        try:
            targets[name] = make()
        except Exception as exc:  # noqa: BLE001  (recorded: that variant is not timed)
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        build_s[name] = round(time.monotonic() - t0, 1)
    differs = {}
    with torch.no_grad():
        for name, fn in targets.items():
            out = fn(*args, **kwargs)
            hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
            differs[name] = float((hidden.float() - expected.float()).abs().max())
    plan = Plan(min_samples=20, min_seconds=0.2, max_seconds=5.0, warmup_calls=3)
    rounds: dict[str, list[float]] = {name: [] for name in targets}
    with torch.no_grad():
        for _ in range(a.rounds):
            for name, fn in targets.items():
                samples = measure(lambda k, fn=fn: fn(*args, **kwargs), 1, torch.device(device), plan)
                rounds[name].append(statistics.median(samples["ms"]))
    found["ms"] = {n: round(statistics.median(v), 4) for n, v in rounds.items()}
    found["round_range_ms"] = {n: [round(min(v), 4), round(max(v), 4)] for n, v in rounds.items()}
    found["max_abs_difference"] = differs
    found["build_s"], found["errors"], found["rounds"] = build_s, errors, a.rounds
    found["fastest"] = min(found["ms"], key=found["ms"].get)
    emit(found, a.out)


if __name__ == "__main__":
    main()
