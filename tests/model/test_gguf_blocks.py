"""int4 weights carry a GGUF's own 4-bit blocks over: the codes are the GGUF's, only their scale and
offset are rounded (to bfloat16), and a layer whose blocks have no 4-bit form is quantized as before."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import packed_smollm2
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

from assistant.model import gguf_blocks

Q = GGMLQuantizationType


def random_blocks(kind: GGMLQuantizationType, rows: int, columns: int, seed: int) -> np.ndarray:
    """Random bytes [rows, bytes per row] of `kind` whose float16 scales are ordinary numbers."""
    block, size = GGML_QUANT_SIZES[kind]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows, columns // block, size), dtype=np.uint8)
    start, count = {Q.Q4_0: (0, 1), Q.Q4_1: (0, 2), Q.Q4_K: (0, 2), Q.Q8_0: (0, 1), Q.Q6_K: (size - 2, 1)}[kind]
    scales = rng.uniform(0.001, 0.02, (rows, columns // block, count)).astype(np.float16)
    raw[..., start:start + 2 * count] = scales.view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory):
    """A GGUF with a tokenizer-like string array before its tensors, and one tensor of each block type."""
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_array("tokenizer.ggml.tokens", [f"token{i}" for i in range(1000)])
    writer.add_custom_alignment(64)
    tensors = {}
    for i, kind in enumerate((Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q8_0, Q.Q6_K)):
        tensors[f"t.{kind.name}"] = kind, random_blocks(kind, 8, 512, seed=i)
        writer.add_tensor(f"t.{kind.name}", tensors[f"t.{kind.name}"][1], raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, tensors


def test_the_header_walk_finds_what_gguf_reads(small_gguf):
    path, tensors = small_gguf
    found = gguf_blocks.blocks(path)
    assert set(found) == set(tensors) == {t.name for t in GGUFReader(path).tensors}
    for name, (kind, data) in tensors.items():
        assert found[name][0] == kind
        assert np.array_equal(found[name][1], data)


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1, Q.Q4_K])
def test_four_bit_blocks_decompose_into_codes_scales_and_offsets_exactly(kind, small_gguf):
    data = small_gguf[1][f"t.{kind.name}"][1]
    codes, scale, offset = gguf_blocks.int4_codes(kind, data)
    assert codes.min() >= 0 and codes.max() <= 15 and codes.shape == (8, 512) and scale.shape == (8, 16)
    rebuilt = (codes - 8).reshape(8, 16, 32) * scale[..., None] + offset[..., None]
    assert torch.equal(rebuilt.reshape(8, 512), torch.from_numpy(dequantize(data, kind).astype(np.float32)))


@pytest.mark.parametrize("kind", [Q.Q8_0, Q.Q6_K])
def test_blocks_without_a_four_bit_form_are_not_carried(kind, small_gguf):
    assert gguf_blocks.int4_codes(kind, small_gguf[1][f"t.{kind.name}"][1]) is None


def test_llamas_query_rows_are_put_back_in_transformers_order():
    rows = torch.arange(16)  # 2 heads of 8 rows: llama.cpp interleaves each head's rotary halves
    permuted = rows.reshape(2, 2, 4).transpose(1, 2).reshape(16)
    assert torch.equal(gguf_blocks.unpermute_rows(permuted, 2), rows)


def test_a_real_models_layers_are_carried_over_and_give_back_its_weights(caplog):
    """SmolLM2's Q4_1 GGUF (a Llama: its query and key rows are permuted) packed as int4: every layer
    but the output head (tied to a Q8_0 embedding) comes from the GGUF's blocks, within bfloat16
    rounding of the scales of the float32 weights transformers dequantized from the same blocks."""
    reference, model = packed_smollm2("int4", caplog)
    assert "int4: 210 of 211 layers carried over" in caplog.text
    for name in ("model.layers.0.self_attn.q_proj", "model.layers.7.self_attn.k_proj", "model.layers.29.mlp.down_proj"):
        layer, original = model.get_submodule(name), reference.get_submodule(name).weight.detach()
        got = layer.product(torch.eye(original.shape[1], dtype=torch.bfloat16)).float().T
        assert (got - original).abs().amax() <= 0.01 * original.abs().amax()


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q8_0, Q.Q6_K])
def test_an_embedding_held_as_blocks_looks_up_the_float32_rows_bit_for_bit(kind, small_gguf):
    """An embedding carried as its GGUF blocks gives each token's float32 row, any shape of ids; blocks that do
    not give the table back exactly, or that do not hold its shape, are not carried."""
    data = small_gguf[1][f"t.{kind.name}"][1]
    table = torch.from_numpy(dequantize(data, kind))
    carried = gguf_blocks.carried_embedding(table, {gguf_blocks.EMBEDDING: (kind, data)})
    held = gguf_blocks.embedding(carried, 8, 512)
    ids = torch.tensor([[3, 0, 7], [3, 3, 1]])
    assert held(ids).dtype == torch.float32 and torch.equal(held(ids), table[ids])
    changed = table.clone()
    changed[5, 100] += 1e-3
    assert gguf_blocks.carried_embedding(changed, {gguf_blocks.EMBEDDING: (kind, data)}) is None
    assert gguf_blocks.embedding(carried, 8, 256) is None and gguf_blocks.embedding(carried, 9, 512) is None
    assert gguf_blocks.embedding(carried | {"kind": torch.tensor([Q.F16.value])}, 8, 512) is None
