"""Attention: the kernel for CPU inference, and the attention of chosen heads that PLD+(a) reads.

The kernel is registered with transformers as "assistant". A model's precision (`use`) picks the
kernel's build: float32 FMAs, or VDPBF16PS's products of bfloat16s summed in float32 where the CPU has
AVX512-BF16 (the default there). The KV cache (`kv_cache.preallocated_cache`) holds what the build reads,
whatever the model's dtype (`cache_dtype`): float32, or bfloat16 rounded once where it is stored, the bits
the bfloat16 build would round them to, in half the bytes.

Invariant: a query row's result does not depend on how many queries come with it, nor on how many
keys lie past the ones it sees, so a verified draft sees the numbers plain decoding would. Steps of
up to `exactness.FEW` queries (every decode step and verification) therefore take a row-exact path:
on CPU `kernels.attention_avx2` (`kernel_queries`; `projected` also rotates the queries and keys and
writes the cache, reading the projections as they come), each row alone over exactly the keys it
sees; elsewhere `few_queries`, two matrix products and a softmax over the keys a query sees rounded
up to a multiple of `KEYS`, read from the cache's buffer past its end (zeros, masked). A prefill's
rows are computed once, whatever the strategy, so they take the fused kernel (in bfloat16 where the
CPU has AMX tiles, else float32). The measurements that chose this: docs/kernels.md.

`head_attention` recomputes the attention probabilities of a few (layer, head) pairs for a few
query positions from their hidden states and the cached keys, without a forward pass: PLD+(a)
drafting (drafters.AttentionDraft) and calibration (which finds the induction heads) share it.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from assistant.kernels import attention_avx2
from assistant.kernels.attention_avx2 import DIMS
from assistant.kernels.build import Kernel
from assistant.model.exactness import FEW

NAME = "assistant"
KEYS = 256  # a row-exact path's products run over a multiple of this many keys (see few_queries)
FEWEST_ROWS = 4  # the fewest rows `rows_product` multiplies
PREFILL = torch.bfloat16 if torch.cpu._is_amx_tile_supported() else torch.float32  # more queries, on CPU


def attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask, scaling: float,
              dropout: float = 0.0, **kwargs) -> tuple[torch.Tensor, None]:
    """Causal attention of queries [batch, heads, q, dim] that are the last q positions of one unpadded
    sequence's keys [batch, kv_heads, k, dim]; returns [batch, q, heads, dim] in the queries' dtype."""
    queries, keys = query.shape[2], key.shape[2]
    if queries <= FEW and kernel_takes(key, value, kernel_of(module)):
        out = kernel_queries(query.float(), key, value, scaling, kernel_of(module))
    elif queries <= FEW:
        out = few_queries(query.to(key.dtype), key, value, scaling)
    else:
        # Queries after cached positions see all of them: the causal mask is aligned bottom-right.
        mask = None if queries == keys else torch.ones(queries, keys, dtype=torch.bool,
                                                       device=query.device).tril(keys - queries)
        dtype = PREFILL if key.device.type == "cpu" else key.dtype
        out = F.scaled_dot_product_attention(query.to(dtype), key.to(dtype), value.to(dtype), attn_mask=mask,
                                             is_causal=mask is None, scale=scaling, enable_gqa=True).transpose(1, 2)
    return out.to(query.dtype), None


def use(model, precision: str = "auto") -> str:
    """Set the precision of `model`'s attention kernel (attention_avx2.PRECISIONS: "auto" is bfloat16 where
    the CPU has AVX512-BF16); returns the one its rows take: "bfloat16", "float32", or off the CPU (where
    no kernel runs) the model's dtype."""
    kernel = attention_avx2.kernel(precision)
    for module in modules_of(model):
        module.kernel = kernel
    if model.device.type != "cpu":
        return str(model.dtype).removeprefix("torch.")
    return "bfloat16" if cache_dtype(model) == torch.bfloat16 else "float32"


def modules_of(model) -> list:
    """`model`'s attention modules."""
    return [layer.self_attn for layer in getattr(getattr(model, "model", None), "layers", ())]


def cache_dtype(model) -> torch.dtype:
    """The dtype of a KV cache that `model`'s attention kernel reads (`stored`): bfloat16 where every layer's
    rows take the bfloat16 build and it runs here, else float32."""
    modules = modules_of(model)
    halves = modules and all(stored(kernel_of(module), module.head_dim) == torch.bfloat16 for module in modules)
    return torch.bfloat16 if halves and kernel_of(modules[0]).usable() else torch.float32


def stored(kernel: Kernel, dim: int) -> torch.dtype:
    """The dtype of the cache `kernel` reads best, of heads of `dim` values: bfloat16 in the bfloat16 build where a
    head is whole chunks of 32 (`attention_avx2.cpp`, `Halves`, which reads a float32 cache too, rounding it),
    else float32."""
    return torch.bfloat16 if kernel is attention_avx2.BFLOAT16 and dim % 32 == 0 else torch.float32


def kernel_of(module) -> Kernel:
    """The build an attention module's rows take: the one `use` set, else float32."""
    return getattr(module, "kernel", attention_avx2.FLOAT32)


def kernel_takes(key: torch.Tensor, value: torch.Tensor, kernel: Kernel) -> bool:
    """Whether `kernel_queries` takes this cache: on a CPU with the kernel, in float32 or the dtype it reads
    best (`stored`), positions side by side."""
    return (key.device.type == "cpu" and key.dtype == value.dtype in (torch.float32, stored(kernel, key.shape[-1]))
            and key.shape[-1] in DIMS
            and key.stride() == value.stride() and key.stride(-1) == 1 and key.stride(-2) == key.shape[-1]
            and kernel.usable())


def kernel_queries(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float,
                   kernel: Kernel) -> torch.Tensor:
    """`few_queries` by `attention_avx2.cpp`, each query row over exactly the keys it sees, computed alone:
    query float32, key and value float32 or in the dtype the kernel reads best (`stored`)."""
    batch, heads, queries, dim = query.shape
    query = query.contiguous()
    out = query.new_empty(batch, queries, heads, dim)
    if query.dtype != torch.float32 or kernel.library().attend(
            query.data_ptr(), batch, heads, queries, dim, key.data_ptr(), value.data_ptr(), key.shape[1], key.shape[2],
            key.stride(0), key.stride(1), scaling, out.data_ptr(), key.element_size()):
        raise ValueError(f"attention_avx2.cpp takes float32 queries over heads of {', '.join(map(str, DIMS))} float32 "
                         f"values (or {stored(kernel, dim)}), not {query.dtype} over {dim} {key.dtype}")
    return out


def projected(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              layer, scaling: float, kernel: Kernel) -> torch.Tensor | None:
    """A decoder layer's attention straight from its projections, by `attention_avx2.cpp`: query
    [1, q, heads x dim], key and value [1, q, kv_heads x dim] as the products leave them, rotated there by
    cos and sin [1, q, dim] as transformers' apply_rotary_pos_emb does, the key and value written into
    `layer` (a `kv_cache.PreallocatedLayer`) by the `kernel` build; returns [1, q, heads, dim], the bits of
    rotating, updating the cache and `attention`. None, with nothing done, where the kernel does not take
    them (more than FEW queries, another device or dtype, a cache without room). Rotating in torch, writing
    the cache and making the queries contiguous took about 25 small operators a layer, 1.5 to 2 ms of a 1.5B
    step (`weights.products` has the measurement of both)."""
    queries, dim = query.shape[1], cos.shape[-1]
    if not (query.shape[0] == 1 and queries <= FEW and query.dtype == key.dtype == value.dtype == torch.float32
            and getattr(layer, "is_initialized", False) and kernel_takes(layer.key_buffer, layer.value_buffer, kernel)
            and layer.key_buffer.shape[-1] == dim and layer.length + queries <= layer.capacity):
        return None
    heads, kv_heads = query.shape[-1] // dim, key.shape[-1] // dim
    out = query.new_empty(1, queries, heads, dim)
    query, key, value, cos, sin = (t.contiguous() for t in (query, key, value, cos, sin))
    kernel.library().attend_projected(query.data_ptr(), key.data_ptr(), value.data_ptr(), cos.data_ptr(),
                                      sin.data_ptr(), heads, queries, dim, layer.key_buffer.data_ptr(),
                                      layer.value_buffer.data_ptr(), kv_heads, layer.length, layer.capacity, scaling,
                                      out.data_ptr(), layer.key_buffer.element_size())
    layer.advance(queries)
    return out


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache,
           index: int, module) -> torch.Tensor:
    """Decoder layer `index`'s attention of n new rows after the positions in `cache`, from its projections
    (query [1, n, heads x dim], key and value [1, n, kv_heads x dim]) and their rotations cos and sin [1, n, dim]:
    `projected` where the kernel takes them, else rotated, written to the cache and attended here, the same
    bits; returns [1, n, heads, dim] and leaves the n rows' keys and values in the cache."""
    out = projected(query, key, value, cos, sin, cache.layers[index], module.scaling, kernel_of(module))
    if out is not None:
        return out
    shape = (1, query.shape[1], -1, module.head_dim)
    query, key = apply_rotary_pos_emb(query.view(shape).transpose(1, 2), key.view(shape).transpose(1, 2), cos, sin)
    key, value = cache.update(key, value.view(shape).transpose(1, 2), index)
    return attention(module, query, key, value, None, module.scaling)[0]


def few_queries(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """softmax(q k^T * scaling + causal mask) v, each query row computed as a step of that query alone
    computes it: query [b, h, q, d], key and value [b, kv_h, k, d] (h a multiple of kv_h, q <= k);
    returns [b, q, h, d]. Query i sees the first k - q + 1 + i keys; its products run over those
    rounded up to a multiple of KEYS (the rest masked: zero probabilities), read from the cache's
    buffer past k where it has room (`widened`)."""
    batch, heads, queries, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    group = heads // kv_heads
    first = keys - queries + 1  # keys the first query sees
    low, high = -(-first // KEYS) * KEYS, -(-keys // KEYS) * KEYS  # its span and the last query's
    wide_key, wide_value = widened(key, high), widened(value, high)
    if wide_key is None or wide_value is None:  # a cache without room past k: over the k keys, not exact
        low = high = keys
    else:
        key, value = wide_key, wide_value
    # Rows query-major ([b, kv_h, q, group, d] as [b, kv_h, q group, d]): a span's queries are a block.
    rows = query.new_empty(batch, kv_heads, queries, group, dim)
    torch.mul(query.view(batch, kv_heads, group, queries, dim).transpose(2, 3), scaling, out=rows)
    scores = rows_product(rows.view(batch, kv_heads, queries * group, dim), key.transpose(-1, -2))
    if first < high:  # query i sees keys up to first + i - 1
        scores.view(batch, kv_heads, queries, group, high)[..., first:].masked_fill_(
            future(queries, high - first, query.device), float("-inf"))
    probabilities = torch.softmax(scores, dim=-1)
    if low == high:
        out = rows_product(probabilities, value)
    else:  # a draft crossing a multiple of KEYS: the queries before it, then those after
        split = (low - first + 1) * group
        out = torch.cat([rows_product(probabilities[:, :, :split, :low], value[:, :, :low]),
                         rows_product(probabilities[:, :, split:], value)], dim=2)
    return out.view(batch, kv_heads, queries, group, dim).transpose(1, 2).reshape(batch, queries, heads, dim)


def rows_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b (batched), each row of a multiplied as it is among `FEWEST_ROWS` or more: MKL takes fewer rows by
    another kernel on some CPUs, whose bits differ (1 to 3 rows on the Zen 4 EPYC), so fewer are padded."""
    short = FEWEST_ROWS - a.shape[-2]
    if short <= 0:
        return torch.matmul(a, b)
    return torch.matmul(torch.cat([a, a.new_zeros(*a.shape[:-2], short, a.shape[-1])], -2), b)[..., :a.shape[-2], :]


@functools.lru_cache(maxsize=256)
def future(queries: int, width: int, device: torch.device) -> torch.Tensor:
    """[queries, 1, width]: key first + c is masked for query i where c >= i."""
    return torch.ones(queries, width, dtype=torch.bool, device=device).triu()[:, None]


def widened(cached: torch.Tensor, length: int) -> torch.Tensor | None:
    """`cached` [b, h, n, d], a view of a longer buffer, over its first `length` >= n positions (those
    past n hold keys or values of rejected drafts, or zeros: finite, and met only by zero
    probabilities); None where the buffer ends before."""
    if length == cached.shape[2]:
        return cached
    size = (*cached.shape[:2], length, cached.shape[3])
    end = cached.storage_offset() + sum((n - 1) * stride for n, stride in zip(size, cached.stride())) + 1
    if end * cached.element_size() > cached.untyped_storage().nbytes():
        return None
    return cached.as_strided(size, cached.stride(), cached.storage_offset())


def fits(config) -> bool:
    """Whether `attention` computes what the model's own attention would: every layer attends to all
    earlier positions (no sliding window) and the scores are not soft-capped."""
    config = config.get_text_config()
    windowed = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return (not windowed and all(kind == "full_attention" for kind in layer_types)
            and getattr(config, "attn_logit_softcapping", None) is None)


AttentionInterface.register(NAME, attention)


@torch.inference_mode()
def head_attention(model, cache, heads_by_layer: dict[int, list[int]], hidden: dict[int, torch.Tensor],
                   positions: torch.Tensor) -> torch.Tensor:
    """Attention probabilities [heads, queries, keys] of the given heads for the query `positions`.

    `hidden[L]` holds the inputs of decoder layer L at those positions ([queries, width]); the
    keys come from the cache, already rotated, so only the queries need projecting and rotating.
    """
    span = int(positions.max()) + 1
    future = torch.arange(span, device=positions.device)[None, :] > positions[:, None]
    rows = []
    for layer, heads in heads_by_layer.items():
        block = model.model.layers[layer]
        attn = block.self_attn
        normed = block.input_layernorm(hidden[layer][None])
        query = attn.q_proj(normed).view(1, len(positions), -1, attn.head_dim).transpose(1, 2)[:, heads]
        cos, sin = model.model.rotary_emb(normed, positions[None])
        query, _ = apply_rotary_pos_emb(query, query, cos, sin)
        kv_heads = torch.tensor(heads, device=query.device) // attn.num_key_value_groups
        keys = cache.layers[layer].keys[0, :, :span][kv_heads]  # [heads, keys, head_dim]
        logits = (query[0].float() @ keys.float().transpose(-1, -2)) * attn.scaling
        rows.append(torch.softmax(logits.masked_fill(future, float("-inf")), dim=-1))
    return torch.cat(rows)

