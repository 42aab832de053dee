"""The CUDA path of the decode loop, where a GPU is present (skipped elsewhere; CI has none): on a tiny random
Llama, every drafter's greedy tokens are plain decoding's, in float32 and bfloat16 (both padded to fixed
shapes there), with token trees and reused prefixes."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from assistant.decoding.drafters import HiddenDraft, NgramDraft, NoDraft
from assistant.decoding.loop import decode
from assistant.decoding.prefix_cache import PrefixCache
from assistant.model import exactness

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def peaky(dtype: torch.dtype) -> LlamaForCausalLM:
    """A tiny Llama whose large weights make it repeat itself, so that drafts get accepted."""
    torch.manual_seed(99)
    config = LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         initializer_range=0.5, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                         tie_word_embeddings=False)
    return LlamaForCausalLM(config).to("cuda", dtype).eval()


def tokens(model, prompt: list[int], drafter, k: int, **options) -> tuple[list[int], int]:
    steps = list(decode(model, list(prompt), drafter, max_new_tokens=60, draft_tokens=k, **options))
    return [t for s in steps for t in s.tokens], sum(s.accepted for s in steps)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_drafter_gives_plain_decodings_tokens_on_cuda(dtype):
    model = peaky(dtype)
    assert exactness.fixed_shapes(model)
    rng = random.Random(5)
    prompts = [[rng.randrange(64) for _ in range(rng.randrange(5, 120))] for _ in range(6)]
    prompts += [p + p[:len(p) // 2] for p in prompts[:3]] + [[3, 9] * 40]
    accepted = 0
    for prompt in prompts:
        expected, _ = tokens(model, prompt, NoDraft(), 0)
        prefixes = PrefixCache(64 << 20)
        variants = [(NgramDraft(), k, {}) for k in (3, 8, 16)] + [(HiddenDraft(1), k, {}) for k in (3, 8)]
        variants += [(NgramDraft(), 8, {"branches": 2}), (HiddenDraft(1), 8, {"prefixes": prefixes}),
                     (HiddenDraft(1), 8, {"prefixes": prefixes})]
        for drafter, k, options in variants:
            got, taken = tokens(model, prompt, drafter, k, **options)
            assert got == expected, (drafter, k, options)
            accepted += taken
    assert accepted > 0  # drafts were verified, not only refused
