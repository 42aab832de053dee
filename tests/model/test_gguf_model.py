"""A GGUF's model built one tensor at a time is transformers' float32 model of it, tensor for tensor."""

from __future__ import annotations

import copy

import pytest
import torch

from assistant.config import settings
from assistant.model import gguf_model, loading, weights


@pytest.fixture(scope="module")
def smollm2():
    """SmolLM2's GGUF (a Llama: query and key rows permuted, the head tied to a Q8_0 embedding) and its config."""
    file = loading.gguf_file("smollm2-135m", settings().cache)
    return file, loading.gguf_config(file)


def test_every_tensor_is_the_one_transformers_makes_of_the_gguf(smollm2):
    file, config = smollm2
    model, reference = gguf_model.built(file, config), loading.dequantized(file)
    weight_of = gguf_model.weights(file, config)
    ours, theirs = model.state_dict(keep_vars=True), reference.state_dict()
    assert set(ours) == set(theirs)
    layers = {f"{name}.weight": name for name in weights.linears(model)}
    embedding = ours["model.embed_tokens.weight"]  # the tied head's weight too
    assert all(ours[name].is_meta or ours[name] is embedding for name in layers)
    assert not any(t.is_meta for name, t in ours.items() if name not in layers)
    assert all(torch.equal(ours[name], theirs[name]) for name in ours if name not in layers)
    assert all(torch.equal(weight_of(layer), theirs[name]) for name, layer in layers.items())
    assert torch.equal(model.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
    assert model.config.to_json_string() == reference.config.to_json_string()
    assert model.generation_config == reference.generation_config


def test_a_gguf_whose_tensors_do_not_fill_the_model_is_refused(smollm2):
    file, config = smollm2
    deeper = copy.deepcopy(config)
    deeper.num_hidden_layers += 1
    with pytest.raises(ValueError, match="do not fill"):
        gguf_model.built(file, deeper)
