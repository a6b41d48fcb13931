"""How much an attention kernel that knows its mask is causal could give a traced Llama under torch.compile.

    python benchmarks/attention_ceiling.py [--rounds 5] [--out F]

A traced transformers Llama materializes its causal mask, so torch.compile runs attention with an explicit mask
(no causal skipping). This measures, on issue 47's Llama shape (2 layers, hidden 2048, GQA 16/4, input_ids
[16,1024], bf16, random weights): one layer's attention alone, SDPA with the traced mask against SDPA told
`is_causal` (PyTorch's own flash path: the best a kernel could reach, not a kernel cudagent may submit), and then the
whole model compiled, as traced, against the same graph with its attention regions put back (putback.py, the mask's
construction folded in) as an op that runs the causal path. The second pair bounds what the attention kind alone can
give the model over torch.compile. Timings: CUDA events, medians of interleaved rounds. One JSON object.
"""

import argparse
import statistics

from alternatives import emit  # benchmarks/ is on the path when a script in it runs


def main() -> None:
    import torch
    import torch.nn.functional as F
    import transformers

    from cudagent.usermodel.putback import bind, rewrite
    from cudagent.usermodel.region_proof import timed
    from cudagent.usermodel.regions import capture, group

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out")
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU: the script runs, no figure")
    a = parser.parse_args()
    torch.manual_seed(0)
    width, heads, batch, tokens = (64, 4, 2, 16) if a.smoke else (2048, 16, 16, 1024)
    config = transformers.LlamaConfig(
        hidden_size=width,
        intermediate_size=width * 11 // 4,
        num_attention_heads=heads,
        num_key_value_heads=heads // 4,
        num_hidden_layers=2,
        vocab_size=32000,
        use_cache=False,
    )
    device, dtype = ("cpu", torch.float32) if a.smoke else ("cuda", torch.bfloat16)
    model = transformers.LlamaModel(config).to(device, dtype).eval()
    ids = torch.randint(0, 32000, (batch, tokens), device=device)
    program = capture(model, (ids,))
    attention = [r for r in group(program) if r.anchor == "attention"]
    sdpa = next(n for n in program.graph.nodes if "scaled_dot_product_attention" in str(n.target))
    scale = sdpa.kwargs.get("scale")

    tensor = torch.Tensor

    @torch.library.custom_op("attention_ceiling::causal", mutates_args=())
    def causal(q: tensor, k: tensor, v: tensor) -> tensor:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        b, h, t, d = out.shape
        return out.transpose(1, 2).reshape(b, t, h * d).contiguous()

    @causal.register_fake
    def _(q, k, v):
        return q.new_empty(q.shape[0], q.shape[2], q.shape[1] * v.shape[-1])

    class Kernel(torch.nn.Module):
        def forward(self, q, k, v):
            return causal(q, k, v)

    binding = bind(attention[0], program, Kernel())
    patched = rewrite(program, {r.name: (r, binding.target) for r in attention})

    q = torch.randn(batch, heads, tokens, width // heads, device=device, dtype=dtype)
    k, v = torch.randn_like(q), torch.randn_like(q)
    mask = torch.ones(tokens, tokens, device=device, dtype=torch.bool).tril().expand(batch, 1, tokens, tokens)
    with torch.no_grad():
        wanted = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        got = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        layer_error = float((wanted.float() - got.float()).abs().max())
        expected = model(ids).last_hidden_state
        model_error = float((patched(ids)[0].float() - expected.float()).abs().max())
    compiled, compiled_patched = torch.compile(model), torch.compile(patched)
    targets = {
        "layer_sdpa_traced_mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale),
        "layer_sdpa_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale),
        "model_compiled": lambda: compiled(ids),
        "model_compiled_causal_attention": lambda: compiled_patched(ids),
    }
    rounds: dict[str, list[float]] = {n: [] for n in targets}
    for _ in range(1 if a.smoke else a.rounds):
        for name, fn in targets.items():
            rounds[name].append(timed(lambda fn=fn: fn(), (), calls=3 if a.smoke else 20, cuda=device == "cuda"))
    ms = {n: round(statistics.median(v), 4) for n, v in rounds.items()}
    found = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "attention_regions": len(attention),
        "bound": binding.how,
        "ms": ms,
        "round_range_ms": {n: [round(min(v), 4), round(max(v), 4)] for n, v in rounds.items()},
        "layer_max_abs_difference": layer_error,
        "model_max_abs_difference": model_error,
        "ceiling_over_compile": round(ms["model_compiled"] / ms["model_compiled_causal_attention"], 4),
    }
    emit(found, a.out)


if __name__ == "__main__":
    main()
