"""`--weights gguf`: the block kernel dequantizes every block type it takes, regrouped, exactly as
GGUF's own reference does, computes each row alone whatever the batch, and a real GGUF's layers run
on their own blocks with the float32 model's very weights."""

from __future__ import annotations

import pytest
import safetensors.torch
import torch
from conftest import SCALES, carried_smollm2_logits, make_tiny_model, random_blocks
from gguf import GGMLQuantizationType, quants

from assistant.kernels import gguf_avx2
from assistant.model import weights

pytestmark = pytest.mark.skipif(not gguf_avx2.usable(), reason=f"no block kernel here: {gguf_avx2.failure()}")

@pytest.mark.parametrize("name", list(SCALES))
def test_blocks_dequantize_exactly_as_ggufs_reference_does(name):
    kind = GGMLQuantizationType[name]
    raw = random_blocks(kind, 24, 512)
    groups = gguf_avx2.repack(torch.from_numpy(raw), kind.value)
    ours = gguf_avx2.dequantize(gguf_avx2.library(), groups, kind.value, 512)
    assert torch.equal(ours, torch.from_numpy(quants.dequantize(raw, kind).reshape(24, 512)))


@pytest.mark.parametrize("name", list(SCALES))
def test_a_row_is_computed_alone_whatever_the_batch(name):
    kind = GGMLQuantizationType[name]
    groups = gguf_avx2.repack(torch.from_numpy(random_blocks(kind, 40, 512)), kind.value)
    library = gguf_avx2.library()
    x = torch.randn(gguf_avx2.ROWS, 512, generator=torch.Generator().manual_seed(0))
    batch = gguf_avx2.linear(library, x, groups, kind.value, 512)
    mismatched = [(start, m) for m in (1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 33) for start in (0, 5)
                  if not torch.equal(gguf_avx2.linear(library, x[start:start + m], groups, kind.value, 512),
                                     batch[start:start + m])]
    assert mismatched == []
    exact = x @ gguf_avx2.dequantize(library, groups, kind.value, 512).T
    assert (batch - exact).abs().max() <= 1e-5 * exact.abs().max()


def test_more_rows_than_a_verification_go_through_a_float32_product_of_the_same_weights():
    kind = GGMLQuantizationType.Q4_K
    groups = gguf_avx2.repack(torch.from_numpy(random_blocks(kind, 40, 512)), kind.value)
    library = gguf_avx2.library()
    x = torch.randn(gguf_avx2.ROWS + 30, 512)
    assert torch.equal(gguf_avx2.linear(library, x, groups, kind.value, 512),
                       x @ gguf_avx2.dequantize(library, groups, kind.value, 512).T)


def test_a_real_ggufs_layers_run_on_its_own_blocks(caplog):
    """SmolLM2's Q4_1 GGUF (a Llama: query and key rows permuted; the head tied to a Q8_0 embedding):
    every layer is carried over, holds the float32 model's weights bit for bit, and the logits stay
    within float32 summation order of the float32 model's."""
    ours, theirs = carried_smollm2_logits("gguf", gguf_avx2, caplog, (
        "model.layers.0.self_attn.q_proj", "model.layers.7.self_attn.k_proj", "model.layers.29.mlp.down_proj", "lm_head"))
    assert (ours - theirs).abs().max() <= 1e-3 * theirs.abs().max()
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_a_packed_file_with_blocks_the_kernel_cannot_take_is_rebuilt(tmp_path):
    """safetensors checks the file's structure, not what a layer's blocks say: a block type the kernel
    does not take, or rows of the wrong length, would make it read past them, so they are refused; so
    is a file of blocks as shipped, from before the kernel took them regrouped."""
    path = tmp_path / "packed.safetensors"
    weights.pack_cached(make_tiny_model(), "gguf", path)
    stored = safetensors.torch.load_file(str(path))
    assert weights.read_stored(make_tiny_model(), "gguf", path) is not None
    for name, bad in (("model.layers.0.mlp.up_proj.kind", torch.tensor([99])),
                      ("model.layers.1.self_attn.o_proj.groups", stored["model.layers.1.self_attn.o_proj.groups"][:, :-2])):
        safetensors.torch.save_file({**stored, name: bad.contiguous()}, str(path))
        assert weights.read_stored(make_tiny_model(), "gguf", path) is None
    before_groups = {key.replace(".groups", ".blocks"): value for key, value in stored.items()}  # the blocks as shipped
    safetensors.torch.save_file(before_groups, str(path))
    assert weights.read_stored(make_tiny_model(), "gguf", path) is None
