"""The engine's CPU attention (float32 KV cache, float32 attention, bottom-right causal mask) computes
what transformers' own attention computes, for every shape of forward pass the decode loop makes."""

from __future__ import annotations

import pytest
import torch

from assistant import attention
from assistant.kv_cache import preallocated_cache

from conftest import TINY_VOCAB, make_tiny_model


def logits_per_pass(model, passes: list[list[int]], cache) -> list[torch.Tensor]:
    with torch.inference_mode():
        return [model(input_ids=torch.tensor([ids]), past_key_values=cache, logits_to_keep=len(ids)).logits[0]
                for ids in passes]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 0.1)])
def test_attention_matches_transformers_sdpa(dtype, tolerance):
    torch.manual_seed(0)
    prompt = torch.randint(0, TINY_VOCAB, (40,)).tolist()
    # A prefill from empty, one-token steps, drafts of several tokens, and a prefill after cached positions
    # (as prefix reuse makes): every query count against every cache length the loop produces.
    passes = [prompt[:30], prompt[30:31], prompt[31:36], prompt[36:37], prompt[37:40]]
    ours = make_tiny_model(seed=7, initializer_range=0.2).to(dtype)
    reference = make_tiny_model(seed=7, initializer_range=0.2).to(dtype)
    reference.set_attn_implementation("sdpa")
    assert ours.config._attn_implementation == attention.NAME
    cache = preallocated_cache(ours, 64)
    got = logits_per_pass(ours, passes, cache)
    assert cache.layers[0].keys.dtype == torch.float32  # kept in float32 whatever the model's dtype
    expected = logits_per_pass(reference, passes, preallocated_cache(reference, 64))
    for g, e in zip(got, expected):
        assert torch.allclose(g.float(), e.float(), atol=tolerance, rtol=0)


def test_fits_only_full_attention_without_softcapping():
    from transformers import LlamaConfig, Qwen2Config

    assert attention.fits(LlamaConfig())
    assert attention.fits(Qwen2Config(use_sliding_window=False))
    assert not attention.fits(Qwen2Config(use_sliding_window=True, sliding_window=16, max_window_layers=0))
