"""Shared fixtures: a tiny random Llama for the decode loop, and the real embedded model for the engine."""

from __future__ import annotations

import os

# Every command and Assistant() in the suite runs on the small embedded model unless a test names
# another: its skill does not matter to most tests, and it loads in a second.
os.environ["ASSISTANT_MODEL"] = "smollm2-135m"
os.environ["ASSISTANT_WEIGHTS"] = "float32"  # outputs the same on every machine, whatever `auto` measures

import logging  # noqa: E402

import pytest  # noqa: E402
import torch

from assistant import attention  # noqa: E402

TINY_VOCAB = 64


def make_tiny_model(seed: int = 1234, initializer_range: float = 0.02):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         initializer_range=initializer_range, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.set_attn_implementation(attention.NAME)  # as models.load does on CPU
    return model


def packed_smollm2(kind: str, caplog):
    """SmolLM2-135M in float32, and a copy whose linear layers are packed as `kind` from its own Q4_1
    GGUF, logging what was carried over into `caplog`."""
    from transformers import AutoModelForCausalLM

    from assistant import models, weights

    folder, _, _ = models.resolve("smollm2-135m")
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with caplog.at_level(logging.INFO, logger="assistant"):
        weights.pack(model, kind, gguf=models.gguf_file("smollm2-135m"))
    return reference, model


@pytest.fixture(scope="session")
def tiny_model():
    """Randomly initialised: near-uniform next-token distributions, cheap forward passes."""
    return make_tiny_model()


@pytest.fixture(scope="session")
def peaky_model():
    """The same architecture with larger weights, so sampled distributions are far from uniform and a
    biased sampler shows up in a few hundred samples."""
    return make_tiny_model(seed=99, initializer_range=0.5)


@pytest.fixture(scope="session")
def embedded():
    from assistant.engine import Assistant

    return Assistant(weights="float32")


@pytest.fixture(scope="session")
def embedded_tokenizer(embedded):
    return embedded.loaded.tokenizer
