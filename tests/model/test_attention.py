"""The engine's CPU attention (float32 KV cache, float32 attention for steps and drafts, bottom-right
causal mask) computes what transformers' own attention computes, for every shape of forward pass the
decode loop makes; a prefill's, in bfloat16 on AMX, within bfloat16's rounding; the kernel's bfloat16
build, over a bfloat16 cache, within the rounding of what it rounds, each row as exact as the float32
build's, its cache written by the kernel as the fallback writes it."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_VOCAB, make_tiny_model

from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from assistant.kernels import attention_avx2
from assistant.model import attention, exactness
from assistant.model.kv_cache import PreallocatedLayer, preallocated_cache


def logits_per_pass(model, passes: list[list[int]], cache) -> list[torch.Tensor]:
    with torch.inference_mode():
        return [model(input_ids=torch.tensor([ids]), cache=cache, logits_to_keep=len(ids)).logits[0]
                for ids in passes]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 0.1)])
def test_attention_matches_transformers_sdpa(dtype, tolerance, monkeypatch):
    monkeypatch.setattr(attention, "PREFILL", torch.float32)  # bfloat16 prefills on AMX: the test below
    torch.manual_seed(0)
    prompt = torch.randint(0, TINY_VOCAB, (100,)).tolist()
    # A prefill from empty (longer than FEW queries: the fused kernel), one-token steps, drafts of several
    # tokens, and prefills after cached positions (as prefix reuse makes), short and long: every query
    # count against every cache length the loop produces, on both paths.
    passes = [prompt[:70], prompt[70:71], prompt[71:76], prompt[76:77], prompt[77:80],
              prompt[80:100]]
    ours = make_tiny_model(seed=7, initializer_range=0.2).to(dtype)
    reference = make_tiny_model(seed=7, initializer_range=0.2).to(dtype)
    reference.set_attn_implementation("sdpa")
    assert ours.config._attn_implementation == attention.NAME
    cache = preallocated_cache(ours, 128)
    got = logits_per_pass(ours, passes, cache)
    assert cache.layers[0].keys.dtype == torch.float32  # kept in float32 whatever the model's dtype
    expected = logits_per_pass(reference, passes, preallocated_cache(reference, 128))
    for g, e in zip(got, expected):
        assert torch.allclose(g.float(), e.float(), atol=tolerance, rtol=0)


def test_a_prefill_in_bfloat16_stays_within_its_rounding(monkeypatch):
    prompt = torch.randint(0, TINY_VOCAB, (100,), generator=torch.Generator().manual_seed(1)).tolist()
    model = make_tiny_model(seed=7, initializer_range=0.2)
    logits = {}
    for dtype in (torch.float32, torch.bfloat16):
        monkeypatch.setattr(attention, "PREFILL", dtype)
        logits[dtype] = logits_per_pass(model, [prompt[:90], prompt[90:]], preallocated_cache(model, 128))
    for exact, rounded in zip(logits[torch.float32], logits[torch.bfloat16]):
        assert not torch.equal(exact, rounded)  # the prefill's attention did run in bfloat16
        assert torch.allclose(exact, rounded, atol=0.02 * exact.abs().max().item(), rtol=0)


def test_fits_only_full_attention_without_softcapping():
    from transformers import LlamaConfig, Qwen2Config

    assert attention.fits(LlamaConfig())
    assert attention.fits(Qwen2Config(use_sliding_window=False))
    assert not attention.fits(Qwen2Config(use_sliding_window=True, sliding_window=16, max_window_layers=0))


SHAPES = [(12, 2, 128), (14, 2, 64)]  # Qwen2.5-Coder 1.5B and 0.5B
BUILDS = [pytest.param(build, id=name, marks=pytest.mark.skipif(not build.usable(), reason=f"no {name} kernel here"))
          for name, build in (("float32", attention_avx2.FLOAT32), ("bfloat16", attention_avx2.BFLOAT16))]


def on(build, float32: bool = False):
    """The kernel's path over the cache it reads best, or over a float32 one (which it rounds as it reads)."""
    path = functools.partial(attention.kernel_queries, kernel=build.values[0])
    path.float32 = float32
    return path


def cached(path, dim: int) -> torch.dtype:
    """The dtype of the cache `path` reads."""
    kernel = getattr(path, "keywords", {}).get("kernel")
    return attention.stored(kernel, dim) if kernel and not path.float32 else torch.float32


@pytest.mark.parametrize("path, heads, kv_heads, dim", [
    *(pytest.param(on(build), *shape, marks=build.marks, id=f"{build.id}-{shape}")
      for build in BUILDS for shape in [*SHAPES, (9, 3, 64)]),  # SmolLM2-135M's: MKL makes its rows unalike
    *(pytest.param(on(BUILDS[1], float32=True), *shape, marks=BUILDS[1].marks, id=f"bfloat16-float32-cache-{shape}")
      for shape in SHAPES),
    *(pytest.param(attention.few_queries, *shape) for shape in SHAPES)])
@pytest.mark.parametrize("keys", [70, 256, 300, 1500])
def test_each_row_of_a_verification_is_its_one_token_step(path, heads, kv_heads, dim, keys):
    """What makes verification exact: query i of q, the last of keys - q + 1 + i cached positions,
    gives the bits that a step of that query alone gives there, whatever the cache's buffer holds past
    the positions it sees (a rejected draft's keys, zeros), drafts crossing a multiple of KEYS too."""
    generator = torch.Generator().manual_seed(keys)
    capacity = -(-keys // attention.KEYS) * attention.KEYS  # as preallocated_cache rounds it
    buffers = [torch.randn(1, kv_heads, capacity, dim, generator=generator).to(cached(path, dim)) for _ in range(2)]
    query = torch.randn(1, heads, exactness.FEW, dim, generator=generator)
    for q in (1, 2, 7, 25, exactness.FEW):
        rows = path(query[:, :, :q], *(b[:, :, :keys] for b in buffers), dim ** -0.5)
        for i in range(q):
            seen = keys - q + 1 + i
            other = [b.clone() for b in buffers]
            for b in other:
                b[:, :, seen:] = torch.randn(b[:, :, seen:].shape, generator=generator).to(b.dtype)
            step = path(query[:, :, i:i + 1], *(b[:, :, :seen] for b in other), dim ** -0.5)
            assert torch.equal(rows[:, i], step[:, 0]), (q, i)


@pytest.mark.parametrize("build", BUILDS)
def test_the_kernel_computes_the_products_and_softmax_of_the_fallback(build):
    """The float32 build within float32's rounding; the bfloat16 build, where a head is whole chunks of 32,
    within what rounding the scaled queries, keys, values and probabilities to bfloat16 costs."""
    generator = torch.Generator().manual_seed(3)
    halves = lambda t: t.to(torch.bfloat16).float()  # noqa: E731
    for heads, kv_heads, dim in SHAPES + [(4, 2, 8), (4, 2, 16), (6, 2, 32)]:  # dims under 4 chunks of 8 too
        key, value = (torch.randn(1, kv_heads, 700, dim, generator=generator) for _ in range(2))
        query = torch.randn(1, heads, 9, dim, generator=generator)
        dtype = attention.stored(build, dim)
        got = attention.kernel_queries(query, key.to(dtype), value.to(dtype), dim ** -0.5, build)
        # a float32 cache (transformers' own, in hf-pld) is rounded as it is read: the same bits
        assert torch.equal(got, attention.kernel_queries(query, key, value, dim ** -0.5, build))
        if dtype == torch.bfloat16:
            expected = attention.few_queries(halves(query * dim ** -0.5), halves(key), halves(value), 1.0)
            assert not torch.equal(got, attention.few_queries(query, key, value, dim ** -0.5))
            assert torch.allclose(got, expected, atol=4e-3, rtol=0)
        else:
            assert torch.allclose(got, attention.few_queries(query, key, value, dim ** -0.5), atol=2e-6, rtol=0)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("heads, kv_heads, dim", SHAPES)
def test_the_kernel_writes_the_cache_as_the_fallback_does(build, heads, kv_heads, dim):
    """`projected` stores the keys (rotated) and values of a step in the cache's dtype with the bits that
    transformers' rotation stored by `cache.update` has, and its rows are `kernel_queries`' over that cache."""
    kernel, dtype = build, attention.stored(build, dim)
    generator = torch.Generator().manual_seed(dim)
    before, queries = 300, 9
    query, key, value = (torch.randn(1, queries, n * dim, generator=generator) for n in (heads, kv_heads, kv_heads))
    angles = torch.arange(before, before + queries)[:, None] * 10000.0 ** (-torch.arange(0, dim, 2) / dim)
    cos, sin = torch.cat([angles, angles], -1).cos()[None], torch.cat([angles, angles], -1).sin()[None]
    past = [torch.randn(1, kv_heads, before, dim, generator=generator) for _ in range(2)]
    layers = [PreallocatedLayer(attention.KEYS * 2, dtype) for _ in range(2)]
    for layer in layers:
        layer.update(*past)
    out = attention.projected(query, key, value, cos, sin, layers[0], dim ** -0.5, kernel)
    shape = (1, queries, -1, dim)
    query, key = apply_rotary_pos_emb(query.view(shape).transpose(1, 2), key.view(shape).transpose(1, 2), cos, sin)
    keys, values = layers[1].update(key, value.view(shape).transpose(1, 2))
    assert layers[0].keys.dtype == dtype
    assert torch.equal(layers[0].keys, keys) and torch.equal(layers[0].values, values)
    assert torch.equal(out, attention.kernel_queries(query.contiguous(), keys, values, dim ** -0.5, kernel))


def test_the_cache_holds_what_the_kernel_reads():
    """Heads of whole chunks of 32 under the bfloat16 build, where it runs: a bfloat16 cache; else float32."""
    model = make_tiny_model(seed=5, hidden_size=128, heads=4)
    halves = attention_avx2.BFLOAT16.usable()
    assert attention.use(model, "bfloat16") == ("bfloat16" if halves else "float32")
    assert preallocated_cache(model, 64).layers[0].keys is None  # made at the first update, in that dtype
    assert attention.cache_dtype(model) == (torch.bfloat16 if halves else torch.float32)
    attention.use(model, "float32")
    assert attention.cache_dtype(model) == torch.float32
    with pytest.raises(ValueError, match="not torch.float32 over 32 torch.bfloat16"):
        attention.kernel_queries(torch.zeros(1, 4, 1, 32), *(torch.zeros(1, 2, 8, 32, dtype=torch.bfloat16),) * 2,
                                 1.0, attention_avx2.FLOAT32)


def test_a_model_takes_the_precision_it_is_set_to():
    model = make_tiny_model(seed=5)
    assert attention.use(model, "float32") == "float32"
    assert all(layer.self_attn.kernel is attention_avx2.FLOAT32 for layer in model.model.layers)
    assert attention.use(model, "bfloat16") == "float32"  # heads of 8: not whole chunks of 32
    assert attention.use(model, "auto") in ("float32", "bfloat16")
    with pytest.raises(ValueError, match="unknown attention precision"):
        attention.use(model, "float16")


def test_without_room_past_the_keys_the_rows_are_the_same_up_to_rounding():
    """A cache of exactly its keys (transformers' own, as hf-pld runs it) gets products over those."""
    generator = torch.Generator().manual_seed(0)
    key, value = (torch.randn(1, 2, 300, 64, generator=generator) for _ in range(2))
    query = torch.randn(1, 14, 9, 64, generator=generator)
    exact_size = attention.few_queries(query, key, value, 0.125)
    roomy = attention.few_queries(query, *(F.pad(t, (0, 0, 0, 212))[:, :, :300] for t in (key, value)), 0.125)
    assert torch.allclose(exact_size, roomy, atol=1e-5, rtol=0)
