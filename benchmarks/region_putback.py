"""A model's fusion regions, and what putting them back as custom ops costs under torch.compile.

    python benchmarks/region_putback.py --model gpt2|llama|resnet18 [--dtype bfloat16] [--device cuda] [--out F]

For one model (GPT-2 small's widths with 2 layers, a Llama-shaped config with GQA, RMSNorm, SwiGLU and rotary with
2 layers, torchvision's ResNet-18), built from a config with random weights: its fusion regions by kind (share of
the regions' time, each measured alone, and the bytes fusing saves); then every GEMM, convolution, normalization and
attention region replaced by a `torch.library` custom op that runs the region's own operators (no kernel yet:
this is the floor a kernel starts from, the cost of an op inductor cannot see into), and four timings: the original
and the patched model, eager and compiled (median of `--calls` calls, CUDA events), with the graph breaks dynamo
finds in the patched model. One JSON object per model.
"""

from __future__ import annotations

import argparse
import json
import time


def build(name: str, device: str, dtype):
    import torch

    if name == "gpt2":
        from transformers import GPT2Config, GPT2Model

        model = GPT2Model(GPT2Config(n_layer=2, use_cache=False))
        args = (torch.randint(0, 50257, (8, 512), device=device),)
    elif name == "llama":
        from transformers import LlamaConfig, LlamaModel

        config = LlamaConfig(
            hidden_size=2048,
            intermediate_size=5632,
            num_attention_heads=16,
            num_key_value_heads=4,
            num_hidden_layers=2,
            vocab_size=32000,
            use_cache=False,
        )
        model = LlamaModel(config)
        args = (torch.randint(0, 32000, (4, 512), device=device),)
    elif name == "resnet18":
        import torchvision

        model = torchvision.models.resnet18()
        args = (torch.randn(32, 3, 224, 224, device=device, dtype=dtype),)
    else:
        raise SystemExit(f"unknown model {name}")
    return model.to(device=device, dtype=dtype).eval(), args


def main() -> None:
    import torch

    from cudagent.usermodel.fusion import region_report
    from cudagent.usermodel.putback import register, rewrite
    from cudagent.usermodel.region_proof import timed

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--out")
    a = parser.parse_args()
    cuda = a.device.startswith("cuda")
    torch.manual_seed(0)
    model, args = build(a.model, a.device, getattr(torch, a.dtype))
    t0 = time.monotonic()
    report = region_report(model, args, {}, a.device, a.model, calls=10)
    found = {
        "model": a.model,
        "dtype": a.dtype,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "regions_s": round(time.monotonic() - t0, 1),
        "kinds": [k.to_dict() for k in report.kinds],
    }
    chosen = [r for k in report.kinds for r in k.regions if r.anchor in ("gemm", "conv", "norm", "attention")]
    patched = rewrite(report.program, {r.name + r.kind + r.nodes[0]: (r, register(r, report.program)) for r in chosen})
    with torch.no_grad():
        explained = torch._dynamo.explain(patched)(*args)
    torch._dynamo.reset()
    found["patched_regions"] = len(chosen)
    found["graph_breaks"] = explained.graph_break_count
    found["graphs"] = explained.graph_count
    ms = {}
    ms["original_eager"] = timed(model, args, {}, a.calls, cuda)
    ms["patched_eager"] = timed(patched, args, {}, a.calls, cuda)
    ms["original_compiled"] = timed(torch.compile(model), args, {}, a.calls, cuda)
    ms["patched_compiled"] = timed(torch.compile(patched), args, {}, a.calls, cuda)
    found["ms"] = {k: round(v, 4) for k, v in ms.items()}
    found["seconds"] = round(time.monotonic() - t0, 1)
    text = json.dumps(found)
    print(text, flush=True)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
