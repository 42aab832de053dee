"""`--weights gguf-bf16`: the kernel (on AMX tiles, or AVX512-BF16's VDPBF16PS where the CPU has no AMX)
holds every block type's weights exactly as GGUF's reference dequantizes them, computes each row alone
whatever the batch, and runs a real GGUF's layers on their own blocks."""

from __future__ import annotations

import pytest
import torch
from conftest import SCALES, carried_smollm2_logits
from conftest import tile_groups as groups_of
from gguf import GGMLQuantizationType

from assistant.kernels import gguf_bf16

needs_amx = pytest.mark.skipif(not gguf_bf16.usable(), reason=f"no gguf-bf16 kernel here: {gguf_bf16.failure()}")


@needs_amx
@pytest.mark.parametrize("name", list(SCALES))
def test_the_weights_are_the_ggufs_own_exactly(name):
    kind = GGMLQuantizationType[name]
    groups, reference = groups_of(kind, 48, 512)  # a panel of 32 outputs and half of one
    assert torch.equal(gguf_bf16.dequantize(gguf_bf16.library(), groups, kind.value, 512), reference)


@needs_amx
@pytest.mark.parametrize("name", list(SCALES))
def test_a_row_is_computed_alone_whatever_the_batch(name):
    """Up to 32 rows take one path and up to 64 another (a panel's tiles made once): a row's bits are
    the same in both, and the sums are float32's of x rounded to bfloat16 times the exact weights."""
    kind = GGMLQuantizationType[name]
    groups, reference = groups_of(kind, 48, 512)
    library = gguf_bf16.library()
    x = torch.randn(gguf_bf16.ROWS, 512, generator=torch.Generator().manual_seed(0))
    batch = gguf_bf16.linear(library, x, groups, kind.value, 512)
    mismatched = [(start, m) for m in (1, 2, 3, 5, 16, 17, 31, 32, 33, 57) for start in (0, 7)
                  if not torch.equal(gguf_bf16.linear(library, x[start:start + m], groups, kind.value, 512),
                                     batch[start:start + m])]
    assert mismatched == []
    exact = x.to(torch.bfloat16).double() @ reference.double().T
    assert (batch.double() - exact).abs().max() <= 1e-5 * exact.abs().max()


@needs_amx
def test_a_prefill_multiplies_bfloat16_weights_and_its_rows_do_not_depend_on_each_other():
    """Past ROWS rows (a prefill, which every strategy shares) the weights are rounded to bfloat16 once
    per panel, for all the rows, and the tiles sum over every input."""
    kind = GGMLQuantizationType.Q4_K
    groups, reference = groups_of(kind, 48, 512)
    library = gguf_bf16.library()
    x = torch.randn(200, 512, generator=torch.Generator().manual_seed(0))
    batch = gguf_bf16.linear(library, x, groups, kind.value, 512)
    assert torch.equal(gguf_bf16.linear(library, x[30:130], groups, kind.value, 512), batch[30:130])
    exact = x.to(torch.bfloat16).double() @ reference.to(torch.bfloat16).double().T
    assert (batch.double() - exact).abs().max() <= 1e-5 * exact.abs().max()


@needs_amx
def test_a_real_ggufs_layers_run_on_their_own_blocks(caplog):
    """SmolLM2's Q4_1 GGUF (the head tied to a Q8_0 embedding): every layer is carried over and holds
    the float32 model's weights bit for bit; only the activations are rounded, to bfloat16, so the
    logits stay within bfloat16's rounding of the float32 model's."""
    ours, theirs = carried_smollm2_logits("gguf-bf16", gguf_bf16, caplog, (
        "model.layers.0.self_attn.q_proj", "model.layers.29.mlp.down_proj", "lm_head"))
    assert (ours - theirs).abs().max() <= 0.02 * theirs.abs().max()
    assert (ours.argmax(-1) == theirs.argmax(-1)).float().mean() >= 0.9


def test_a_cpu_without_amx_takes_the_avx512_build_and_never_builds_the_tiles(monkeypatch):
    monkeypatch.setattr(gguf_bf16, "cpu_flags", lambda: {"avx512f", "avx512bw", "avx512_bf16", "avx512_vnni"})
    monkeypatch.setattr(gguf_bf16.AMX, "usable", lambda: pytest.fail("the AMX kernel was tried"))
    assert gguf_bf16.kernel() is gguf_bf16.AVX512
