"""`--weights gguf-q8`: the GGUF's own blocks (`gguf_bf16`'s groups) times activations quantized to 8
bits per row and 32 inputs (256 for the K-quants), on AVX512-VNNI: a row's result is the exact product of its quantized x with
the exact weights, whatever the batch, a prefill's too where the CPU has no AMX (with AMX a prefill takes the tiles'
bfloat16 product); a real GGUF's layers run on their own blocks."""

from __future__ import annotations

import pytest
import torch
from conftest import SCALES, carried_smollm2_logits, tile_groups
from gguf import GGMLQuantizationType

from assistant.kernels import gguf_bf16, gguf_vnni

pytestmark = pytest.mark.skipif(not gguf_vnni.usable(), reason=f"no gguf-q8 kernel here: {gguf_vnni.failure()}")


def quantized(x: torch.Tensor, inputs: int) -> torch.Tensor:
    """x as the kernel rounds it: per row and `inputs` inputs, a scale of the largest |x| / 127 and
    codes rounded to the nearest (ties to even)."""
    blocks = x.reshape(x.shape[0], -1, inputs)
    scale = blocks.abs().amax(-1, keepdim=True) / 127
    codes = torch.where(scale > 0, torch.round(blocks / torch.where(scale > 0, scale, 1)), 0)
    return (codes * scale).reshape(x.shape)


@pytest.mark.parametrize("name", list(SCALES))
def test_a_row_is_its_quantized_x_times_the_exact_weights_whatever_the_batch(name):
    """Up to 8 rows and past them (a verification's 64, a prefill's 70 where it is alike) a row takes the same operations."""
    kind = GGMLQuantizationType[name]
    groups, reference = tile_groups(kind, 48, 512)
    library = gguf_vnni.library()
    x = torch.randn(70 if gguf_vnni.prefill_alike() else gguf_vnni.ROWS, 512, generator=torch.Generator().manual_seed(0))
    batch = gguf_vnni.linear(library, x, groups, kind.value, 512)
    mismatched = [(start, m) for m in (1, 2, 3, 4, 5, 8, 9, 17, 33, 64) for start in (0, 6)
                  if not torch.equal(gguf_vnni.linear(library, x[start:start + m], groups, kind.value, 512),
                                     batch[start:start + m])]
    assert mismatched == []
    exact = quantized(x, 256 if name.endswith("_K") else 32).double() @ reference.double().T
    assert (batch.double() - exact).abs().max() <= 1e-6 * exact.abs().max()


@pytest.mark.skipif(gguf_vnni.prefill_alike(), reason="no AMX here: a prefill's rows are a step's")
def test_with_amx_a_prefill_takes_the_tiles_bfloat16_product():
    """Past ROWS rows the AMX build multiplies as gguf-bf16's prefill does (three times VPDPBUSD's speed
    there), the same bits; up to ROWS, x quantized to 8 bits as everywhere."""
    kind = GGMLQuantizationType.Q4_K
    groups, _ = tile_groups(kind, 48, 512)
    library = gguf_vnni.library()
    x = torch.randn(gguf_vnni.ROWS + 6, 512, generator=torch.Generator().manual_seed(0))
    assert torch.equal(gguf_vnni.linear(library, x, groups, kind.value, 512),
                       gguf_bf16.linear(library, x, groups, kind.value, 512))
    assert not torch.equal(gguf_vnni.linear(library, x[:8], groups, kind.value, 512),
                           gguf_bf16.linear(library, x[:8], groups, kind.value, 512))


def test_a_row_of_zeros_gives_zeros():
    groups, _ = tile_groups(GGMLQuantizationType.Q4_K, 16, 256)
    assert torch.equal(gguf_vnni.linear(gguf_vnni.library(), torch.zeros(3, 256), groups, 12, 256), torch.zeros(3, 16))


def test_a_real_ggufs_layers_run_on_their_own_blocks(caplog):
    """SmolLM2's Q4_1 GGUF: every layer carried over, the weights the float32 model's bit for bit; only
    the activations are rounded, to 8 bits a block, so the logits stay near the float32 model's: 4.7%
    of the largest at most, 3.4% root mean square (gguf-bf16's bfloat16: 0.9% and 0.7%)."""
    ours, theirs = carried_smollm2_logits("gguf-q8", gguf_vnni, caplog, (
        "model.layers.0.self_attn.q_proj", "model.layers.29.mlp.down_proj", "lm_head"))
    assert (ours - theirs).abs().max() <= 0.06 * theirs.abs().max()
    assert (ours - theirs).pow(2).mean().sqrt() <= 0.05 * theirs.pow(2).mean().sqrt()
    assert (ours.argmax(-1) == theirs.argmax(-1)).float().mean() >= 0.9
