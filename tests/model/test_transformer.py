"""The engine's own forward pass (`model.transformer`) gives transformers' logits and hidden states bit for bit,
for every shape of pass the decode loop makes, on both families it takes."""

from __future__ import annotations

import pytest
import torch
from conftest import TINY_VOCAB

from assistant.model import attention, transformer
from assistant.model.kv_cache import preallocated_cache


def tiny(family: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(5)
    shape = dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2, tie_word_embeddings=False)
    config, kind = ((Qwen2Config(use_sliding_window=False, **shape), Qwen2ForCausalLM) if family == "qwen2"
                    else (LlamaConfig(attention_bias=True, **shape), LlamaForCausalLM))
    model = kind(config).eval()
    model.set_attn_implementation(attention.NAME)
    return model


@pytest.mark.parametrize("family", transformer.FAMILIES)
def test_logits_and_hidden_states_are_transformers_own(family):
    model = tiny(family)
    assert transformer.fits(model)
    prompt = torch.randint(0, TINY_VOCAB, (1, 120), generator=torch.Generator().manual_seed(2))
    # a prefill past FEW queries, one-token steps, drafts, and a prefill after cached positions
    passes = [(0, 80), (80, 81), (81, 87), (87, 88), (88, 120)]
    ours, theirs = preallocated_cache(model, 128), preallocated_cache(model, 128)
    with torch.inference_mode():
        for start, end in passes:
            ids = prompt[:, start:end]
            got = transformer.forward(model, ids, ours, True, end - start)
            expected = model(input_ids=ids, cache=theirs, use_cache=True, output_hidden_states=True,
                             logits_to_keep=end - start)
            assert torch.equal(got.logits, expected.logits)
            assert len(got.hidden_states) == len(expected.hidden_states)
            assert all(torch.equal(a, b) for a, b in zip(got.hidden_states, expected.hidden_states))
            assert transformer.forward(model, ids[:, -1:], ours, False, 1).hidden_states is None
            ours.crop(-1)


@pytest.mark.parametrize("family", transformer.FAMILIES)
@pytest.mark.parametrize("width", [576, 896, 1536])  # SmolLM2-135M's, Qwen2.5-Coder 0.5B's and 1.5B's
def test_a_norm_is_the_modules_own(family, width):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    generator = torch.Generator().manual_seed(width)
    norm = (Qwen2RMSNorm if family == "qwen2" else LlamaRMSNorm)(width, eps=1e-6)
    norm.weight.data = torch.randn(width, generator=generator)
    with torch.inference_mode():
        for rows in (1, 2, 7, 16, 64, 65):
            for scale in (1e-3, 1.0, 300.0):
                x = torch.randn(1, rows, width, generator=generator) * scale
                assert torch.equal(transformer.normed(norm, x), norm(x))


def test_other_models_go_through_transformers():
    model = tiny("qwen2")
    model.config.use_sliding_window, model.config.sliding_window = True, 16
    assert not transformer.fits(model)
    model = tiny("llama")
    model.set_attn_implementation("sdpa")
    assert not transformer.fits(model)
