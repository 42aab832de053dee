"""A forward pass of our own for the families we ship (Llama, Qwen2): transformers' decoder layers
called without its generic machinery (masks our attention never reads, hooks, four levels of
keyword wrappers per layer), which every step of every strategy saves.

Invariant: it calls the model's own modules (norms, projections with their biases, rotary
embedding, MLP) in transformers' order, so its logits and hidden states are transformers' bit for
bit (`tests/model/test_transformer.py`); a model of another family, or on another attention, goes
through transformers. Where our kernels take them, a layer's q, k and v, and its gate and up, are
multiplied in one call (`weights.products`), a step's attention rotates, caches and attends in
one (`attention.projected`), and a float32 norm is torch's own `rms_norm` (`normed`): the same bits.
Measurements: docs/kernels.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from assistant.model import attention, side_by_side, tree_attention, weights

FAMILIES = ("llama", "qwen2")


@dataclass
class Output:
    logits: torch.Tensor | None  # [1, logits_to_keep, vocab]; None without the head
    hidden_states: tuple[torch.Tensor, ...] | None  # each layer's input [1, n, width], then the final norm's output


def fits(model) -> bool:
    """Whether `forward` computes what transformers' forward of `model` computes."""
    config = model.config
    return config.model_type in FAMILIES and config._attn_implementation == attention.NAME and attention.fits(config)


def forward(model, ids: torch.Tensor, cache, hidden: bool, logits_to_keep: int,
            tree: tree_attention.Tree | None = None, head: bool = True) -> Output:
    """The logits of the last `logits_to_keep` of `ids` [1, n], which follow the positions in `cache`
    (updated in place), and with `hidden` the hidden states that transformers returns; without `head`, no
    logits (a prefill reads none). With `tree`, ids are a token tree's rows, each at the position of its
    depth, attended as the chain to it would be; the cache is left as it was, for `tree_attention.keep` to
    add the accepted rows. With `cache` a
    `side_by_side.Sequences`, ids are several sequences' rows, each sequence's after its own cache."""
    inner = model.model
    x = inner.embed_tokens(ids)
    n = ids.shape[1]
    cos, sin = inner.rotary_emb(x, positions(ids, cache, tree)[None])
    states = []
    for i, layer in enumerate(inner.layers):
        if hidden:
            states.append(x)
        attn = layer.self_attn
        h = normed(layer.input_layernorm, x)
        q, k, v = weights.products(h, (attn.q_proj, attn.k_proj, attn.v_proj))
        if isinstance(cache, side_by_side.Sequences):
            out = cache.attend(q, k, v, cos, sin, i, attn)
        elif tree is None:
            out = attention.attend(q, k, v, cos, sin, cache, i, attn)
        else:
            out = tree_attention.attend(tree, q, k, v, cos, sin, cache, i, attn)
        x = x + attn.o_proj(out.reshape(1, n, -1))
        mlp = layer.mlp
        gate, up = weights.products(normed(layer.post_attention_layernorm, x), (mlp.gate_proj, mlp.up_proj))
        x = x + mlp.down_proj(mlp.act_fn(gate) * up)
    x = normed(inner.norm, x)
    return Output(model.lm_head(x[:, -logits_to_keep:]) if head else None, (*states, x) if hidden else None)


def normed(norm, x: torch.Tensor) -> torch.Tensor:
    """`norm(x)` for an RMS norm (Llama's, Qwen2's): in float32 by torch's `rms_norm`, the operations the module
    runs (x * rsqrt(mean(x^2) + eps), times the weight) without its call, 12 to 20 us less a norm, 57 norms a
    step of the 1.5B."""
    if x.dtype == norm.weight.dtype == torch.float32:
        return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
    return norm(x)


def positions(ids: torch.Tensor, cache, tree: tree_attention.Tree | None) -> torch.Tensor:
    """The position of each of `ids`' rows: the next ones after the cache's, a tree's row at its depth, each
    sequence's rows after their own cache's."""
    if isinstance(cache, side_by_side.Sequences):
        return cache.positions(ids.device)
    offsets = torch.arange(ids.shape[1], device=ids.device) if tree is None else tree.depths.to(ids.device)
    return cache.get_seq_length() + offsets
