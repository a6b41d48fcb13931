"""The proof's comparison of a whole model's output (cudagent/usermodel/prove.py)."""


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
    assert any(m.startswith("output['past_key_values']['layers'][0]['keys']") for m in messages), messages
