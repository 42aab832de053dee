"""A forward pass of our own for the families we ship (Llama, Qwen2): transformers' decoder layers
called without its generic machinery.

transformers' forward builds attention masks our `attention` never reads, records hidden states through
hooks, and passes keyword arguments through four levels of wrappers per layer. On a model of the 1.5B's
depth (28 layers, the arithmetic made negligible: 64 wide), a one-token step after 1,500 tokens took
7.4 ms through transformers and 5.6 through this (16 rows: 11.3 and 9.8; best of 30, 2-core Zen 4
EPYC), what every step of every strategy saves. It calls the model's own modules (norms, projections
with their biases, rotary embedding, MLP) in transformers' order, so its logits and hidden states are
transformers' bit for bit (`tests/test_decoder.py`); a model of another family, or on another attention,
goes through transformers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from . import attention

FAMILIES = ("llama", "qwen2")


@dataclass
class Output:
    logits: torch.Tensor  # [1, logits_to_keep, vocab]
    hidden_states: tuple[torch.Tensor, ...] | None  # each layer's input [1, n, width], then the final norm's output


def fits(model) -> bool:
    """Whether `forward` computes what transformers' forward of `model` computes."""
    config = model.config
    return config.model_type in FAMILIES and config._attn_implementation == attention.NAME and attention.fits(config)


def forward(model, ids: torch.Tensor, cache, hidden: bool, logits_to_keep: int) -> Output:
    """The logits of the last `logits_to_keep` of `ids` [1, n], which follow the positions in `cache`
    (updated in place), and with `hidden` the hidden states that transformers returns."""
    inner = model.model
    x = inner.embed_tokens(ids)
    n, start = ids.shape[1], cache.get_seq_length()
    cos, sin = inner.rotary_emb(x, torch.arange(start, start + n, device=ids.device)[None])
    states = []
    for i, layer in enumerate(inner.layers):
        if hidden:
            states.append(x)
        attn = layer.self_attn
        h = layer.input_layernorm(x)
        shape = (1, n, -1, attn.head_dim)
        q, k = apply_rotary_pos_emb(attn.q_proj(h).view(shape).transpose(1, 2),
                                    attn.k_proj(h).view(shape).transpose(1, 2), cos, sin)
        k, v = cache.update(k, attn.v_proj(h).view(shape).transpose(1, 2), i)
        out, _ = attention.attention(attn, q, k, v, None, attn.scaling)
        x = x + attn.o_proj(out.reshape(1, n, -1))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    x = inner.norm(x)
    return Output(model.lm_head(x[:, -logits_to_keep:]), (*states, x) if hidden else None)
