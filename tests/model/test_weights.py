"""Compact weights: every format decodes exactly like plain decoding with the same weights, rows do not
depend on the batch, the packed cache is trusted only when whole, and bad choices are refused clearly."""

from __future__ import annotations

import logging

import pytest
import safetensors.torch
import torch
from conftest import make_tiny_model, tile_groups
from gguf import GGMLQuantizationType
from torch import nn

from assistant.config import settings
from assistant.decoding.drafters import NgramDraft, NoDraft
from assistant.decoding.loop import decode
from assistant.model import gguf_blocks, loading, weights
from assistant.errors import ModelError

CPU = torch.device("cpu")
COMPACT_HERE = [w for w in weights.COMPACT if w in weights.available(CPU)]


def compact_layer(kind: str, linear: nn.Linear) -> nn.Module:
    holder = nn.Module()
    holder.layer = linear
    weights.pack(holder, kind)
    return holder.layer


@pytest.mark.parametrize("kind", COMPACT_HERE)
def test_a_row_is_computed_the_same_whatever_the_batch(kind):
    torch.manual_seed(0)
    layer = compact_layer(kind, nn.Linear(256, 96))
    x = torch.randn(weights.PROBED_ROWS, 256)
    with torch.inference_mode():
        batch = layer(x)
        mismatched = [m for m in range(1, 41) if not torch.equal(layer(x[:m]), batch[:m])]
    assert mismatched == []


@pytest.mark.parametrize("kind", COMPACT_HERE)
def test_layers_multiplied_together_get_each_layers_own_bits(kind):
    """`weights.products` takes a decoder layer's q, k and v (or its gate and up) in one kernel call where
    the kernel multiplies several matrices: each output has its layer's bits alone, the bias added as torch
    adds it, blocks of different types in one call, for steps, verifications and a prefill."""
    layers = [compact_layer(kind, nn.Linear(256, 48, bias=bias)) for bias in (True, False)]
    if kind in weights.KERNELS and kind != "gguf":  # and the K-quants' blocks beside Q8_0's
        for kind_of_blocks in (GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K):
            groups, _ = tile_groups(kind_of_blocks, 32, 256)
            layers.append(weights.QUANTIZED[kind]({"groups": groups, "kind": torch.tensor([kind_of_blocks.value])},
                                                  torch.randn(32), 256))
    with torch.inference_mode():
        for rows in (1, 3, 16, 70):
            x = torch.randn(1, rows, 256)
            together = weights.products(x, tuple(layers))
            for layer, out in zip(layers, together):
                alone = layer(x)
                if isinstance(layer, weights.GgufLinear) and layer.bias is not None:
                    alone = layer.KERNEL.linear(layer.library, x[0], layer.groups, layer.kind, 256)[None] + layer.bias
                assert torch.equal(out, alone)


@pytest.mark.parametrize("kind", COMPACT_HERE)
def test_drafting_is_token_identical_to_plain_decoding_with_the_same_weights(kind):
    model = make_tiny_model()
    weights.pack(model, kind)
    assert weights.linears(model) == []  # the output head too: no float32 matrix is left
    prompt = [3, 5, 7, 9, 11, 3, 5, 7, 9, 11, 3, 5, 7] * 4

    def tokens(drafter, draft):
        return [t for step in decode(model, prompt, drafter, max_new_tokens=40, draft_tokens=draft) for t in step.tokens]

    assert tokens(NgramDraft(), 6) == tokens(NoDraft(), 0)


@pytest.mark.parametrize("kind", COMPACT_HERE)
def test_compact_layers_stay_close_to_float32(kind):
    torch.manual_seed(1)
    reference = nn.Linear(256, 96)
    layer_copy = nn.Linear(256, 96)
    layer_copy.load_state_dict(reference.state_dict())
    layer = compact_layer(kind, layer_copy)
    x = torch.randn(8, 256)
    with torch.inference_mode():
        error = (layer(x) - reference(x)).abs().max() / reference(x).abs().max()
    assert error < {"float16": 1e-3, "int8": 0.03, "int4": 0.15, "gguf": 0.03, "gguf-bf16": 0.03, "gguf-q8": 0.03}[kind]


def test_unknown_weights_and_formats_the_device_lacks_name_the_choices():
    with pytest.raises(weights.WeightsError, match="use one of auto, float32, bfloat16, float16, int8, int4"):
        weights.check("q4_k", CPU)
    with pytest.raises(weights.WeightsError, match="'int4' do not run on cuda here: use one of auto, float32"):
        weights.check("int4", torch.device("cuda"))


def test_auto_measures_once_per_machine_and_keeps_the_choice(tmp_path, monkeypatch):
    calls = []

    def timed(device, in_features, out_features):
        calls.append((in_features, out_features))
        return {"float32": 2.0, "int8": 1.0}

    monkeypatch.setattr(weights, "timed_formats", timed)
    config = make_tiny_model().config
    assert weights.choose(config, CPU, tmp_path) == "int8"
    assert weights.choose(config, CPU, tmp_path) == "int8"
    assert calls == [(32, 64)]
    [saved] = (tmp_path / "weights").iterdir()
    saved.write_text("{not json")  # an unreadable choice is measured again, never a traceback
    assert weights.choose(config, CPU, tmp_path) == "int8" and len(calls) == 2


def test_auto_on_a_gpu_takes_no_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "timed_formats", lambda *a: pytest.fail("measured on a GPU"))
    assert weights.choose(make_tiny_model().config, torch.device("meta"), tmp_path) == "float32"


@pytest.mark.parametrize("kind", [w for w in weights.QUANTIZED if w in COMPACT_HERE])
def test_the_packed_cache_is_read_when_whole_and_rebuilt_when_not(kind, tmp_path, monkeypatch):
    path = tmp_path / "packed.safetensors"
    first = make_tiny_model()
    weights.pack_cached(first, kind, path)
    assert path.is_file() and not list(tmp_path.glob(".tmp-*"))

    quantized = []
    real = weights.QUANTIZED[kind].quantize
    monkeypatch.setattr(weights.QUANTIZED[kind], "quantize", staticmethod(lambda w: quantized.append(1) or real(w)))
    second = make_tiny_model()
    weights.pack_cached(second, kind, path)
    assert quantized == []  # read back, not quantized again
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        assert torch.equal(first(x).logits, second(x).logits)

    path.write_bytes(path.read_bytes()[:-100])  # truncated: a crash or a full disk elsewhere
    third = make_tiny_model()
    weights.pack_cached(third, kind, path)
    assert quantized  # rebuilt rather than loaded
    with torch.inference_mode():
        assert torch.equal(first(x).logits, third(x).logits)
    stored = weights.read_stored(make_tiny_model(), kind, path)
    assert stored is not None  # and the file is whole again
    assert all(t.data_ptr() % 64 == 0 for t in stored.values())  # torch's kernels use aligned loads


@pytest.mark.parametrize("kind", [w for w in weights.KERNELS if w in COMPACT_HERE])
def test_a_packed_file_of_another_layout_is_rebuilt(kind, tmp_path):
    """A kernel may lay its blocks out anew with every size the same: only the file's word tells."""
    path = tmp_path / "packed.safetensors"
    weights.pack_cached(make_tiny_model(), kind, path)
    assert weights.read_stored(make_tiny_model(), kind, path) is not None
    safetensors.torch.save_file(safetensors.torch.load_file(str(path)), str(path), metadata={"layout": "0"})
    assert weights.read_stored(make_tiny_model(), kind, path) is None


def meta_copy(model: nn.Module) -> nn.Module:
    """A model of `model`'s config on the meta device, holding no tensor, as `loading.skeleton` builds one."""
    with torch.device("meta"):
        copy = type(model)(model.config)
    copy.set_attn_implementation(model.config._attn_implementation)
    return copy.eval()


@pytest.mark.parametrize("kind", [w for w in weights.QUANTIZED if w in COMPACT_HERE])
def test_a_model_stored_whole_loads_from_its_file_alone_and_never_from_a_damaged_one(kind, tmp_path):
    """What `pack_stored` writes (the packed layers and every other tensor, the rotary frequencies too) gives a
    model built on the meta device the packed model's logits bit for bit; a truncated file, one short of a
    tensor or one of another shape fills nothing that is used."""
    model = make_tiny_model()
    path = tmp_path / "stored.safetensors"
    tensors = weights.pack(model, kind) | weights.rest_of(model, {})
    weights.save(path, safetensors.torch.save(tensors, metadata=weights.layout(kind)))
    loaded = meta_copy(model)
    assert weights.load_packed(loaded, kind, path)
    x = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        assert torch.equal(loaded(x).logits, model(x).logits)
    short = {k: t for k, t in tensors.items() if k != "rest.model.norm.weight"}
    wide = tensors | {"rest.model.norm.weight": torch.ones(33)}
    for damaged in (safetensors.torch.save(short, metadata=weights.layout(kind)),
                    safetensors.torch.save(wide, metadata=weights.layout(kind)), path.read_bytes()[:-100]):
        path.write_bytes(damaged)
        assert not weights.load_packed(meta_copy(model), kind, path)


@pytest.mark.parametrize("tied", [False, True])
def test_an_embedding_is_looked_up_in_its_blocks_unless_a_layer_still_shares_its_table(tied):
    """Given its GGUF blocks, the input embedding is looked up in them; where the output head still shares the
    float32 table (not packed), both keep that table, made of the blocks. Either way the logits are the same."""
    model = make_tiny_model()
    rows = torch.randint(0, 256, (model.config.vocab_size, 34), dtype=torch.uint8)
    rows[:, :2] = torch.tensor([0x3C00], dtype=torch.int16).view(torch.uint8)  # each block's scale: 1.0
    blocks = {"rows": rows, "kind": torch.tensor([GGMLQuantizationType.Q8_0.value])}
    table = model.get_input_embeddings().weight
    with torch.no_grad():
        table.copy_(gguf_blocks.embedding(blocks, *table.shape).table())
    if tied:
        model.lm_head.weight = table
    x = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.inference_mode():
        expected = model(x).logits
    assert weights.hold_embedding(model, blocks)
    held = model.get_input_embeddings()
    assert isinstance(held, gguf_blocks.BlockEmbedding) != tied
    assert not tied or (model.lm_head.weight is held.weight and torch.equal(held.weight, table))
    with torch.inference_mode():
        assert torch.equal(model(x).logits, expected)
    assert not weights.hold_embedding(make_tiny_model(), blocks | {"rows": rows[:, :17]})


def test_a_read_only_cache_still_packs(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder should be: nothing can be written below it
    model = make_tiny_model()
    weights.pack_cached(model, COMPACT_HERE[-1], blocked / "packed.safetensors")
    assert weights.linears(model) == []


def test_a_family_the_compact_path_does_not_know_falls_back_to_float32_and_says_so(tmp_path, caplog):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    folder = tmp_path / "gpt2-tiny"
    GPT2LMHeadModel(GPT2Config(vocab_size=49152, n_embd=32, n_layer=1, n_head=2, n_positions=64)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(loading.resolve("smollm2-135m", settings().cache)[0]).save_pretrained(folder)
    with caplog.at_level(logging.WARNING, logger="assistant"):
        loaded = loading.load(str(folder), COMPACT_HERE[-1], tmp_path / "cache", "cpu")
    assert loaded.weights == "float32"
    assert caplog.text.count("a gpt2 model, which the") == 1 and "running it in float32" in caplog.text


def test_an_unknown_weights_value_is_refused_before_anything_loads(monkeypatch, tmp_path):
    monkeypatch.setattr(loading, "from_anywhere", lambda *args: pytest.fail("loaded a model for a bad --weights"))
    with pytest.raises(ModelError, match="unknown weights"):
        loading.load("smollm2-135m", "fp8", tmp_path)


def test_two_model_folders_of_the_same_name_never_share_packed_weights(tmp_path):
    first, second = tmp_path / "a" / "model", tmp_path / "b" / "model"
    for folder, seed in ((first, 1), (second, 2)):
        make_tiny_model(seed=seed).save_pretrained(folder)
    assert loading.packed_path(first, "int8", tmp_path) != loading.packed_path(second, "int8", tmp_path)
    assert loading.packed_path(first, "int8", tmp_path) == loading.packed_path(first, "int8", tmp_path)


@pytest.mark.parametrize("kind", list(weights.KERNELS))
def test_a_format_whose_kernel_cannot_run_here_is_refused_with_the_reason(kind, monkeypatch):
    monkeypatch.setattr(weights.KERNELS[kind], "usable", lambda: False)
    monkeypatch.setattr(weights.KERNELS[kind], "failure", lambda: "kernel.cpp needs a CPU with avx512_vnni")
    assert kind not in weights.available(CPU)
    with pytest.raises(weights.WeightsError, match=rf"'{kind}' do not run on cpu here \(kernel.cpp needs a CPU with "
                                                   r"avx512_vnni\): use one of auto, float32"):
        weights.check(kind, CPU)
