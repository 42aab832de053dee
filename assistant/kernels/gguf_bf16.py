"""A matrix product on a GGUF's own blocks laid out as AMX weight tiles: `--weights gguf-bf16`, on the
tiles or, without AMX, on AVX512-BF16; `gguf_vnni` (`--weights gguf-q8`) reads the same layout.

A weight of a GGUF block is an integer code times a scale plus an offset, per output and sub-block
of 16 or 32 inputs (Q4_K: d sc q - dmin m). So each sub-block's product is the codes' product times
the scale, plus the offset times the sum of the inputs. `gguf_bf16.cpp` multiplies x, rounded to
bfloat16, by the codes as bfloat16 integers with TDPBF16PS (or, without AMX, VDPBF16PS on one vector
of 16 outputs x 2 inputs: the same layout), one sub-block at a time from zero with float32 sums, and
applies the scales and offsets in float32 FMAs. A code q below 128 becomes the bfloat16 of 128 + q by
an OR of its exponent bits, exact in 7 mantissa bits, and 128 times the sum of the sub-block's inputs
is taken away again in float32. The weights are the GGUF's exactly; only the activations are rounded,
to bfloat16, at each product.

`repack` lays each 16 outputs' blocks out once, when a model is packed: the fields per output, then
each 32-input chunk's codes for the rows of a weight tile (two inputs of 16 outputs a row), nibbles
for 4-bit codes and bytes for Q8_0's 8; Q5's 5 bits and Q6_K's 6 as nibbles and, beside them, their
one or two high bits, 16 or 8 rows to a word.

Invariant: up to `ROWS` rows a row's result is the same sequence of operations whatever the number
of rows and whichever path computes it, so verifying a draft reproduces one-token steps bit for bit.
A prefill (more rows) multiplies the exact weights rounded to bfloat16, dequantized once per panel
and 256 rows; its rows too are computed alike whatever their number. Offered where the CPU has
AVX512-BF16 (and AMX-BF16, where Linux grants the process the tile state, for the tiles); built once
per machine (`kernels.build`). The measurements behind the design: docs/kernels.md.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch

from assistant.kernels import gguf_avx2
from assistant.kernels.build import Kernel, cpu_flags, flags

KINDS = gguf_avx2.KINDS  # the GGML block types it takes: all the block kernel's
OUTPUTS = 16  # outputs a group holds: one weight tile wide
ROWS = 64  # up to this many rows (more than any verification) the product is exact; more, a prefill's
MULTIPLE = 16  # a layer's outputs must be a multiple of a group's
GROUP_BYTES = {2: 288, 3: 320, 6: 352, 7: 384, 8: 544, 12: 2368, 14: 3360}  # per 16 outputs' blocks
NIBBLES = (2, 3, 6, 7, 12, 14)  # the block types whose codes are stored as nibbles
HIGH = {6: 1, 7: 1, 14: 2}  # and the bits of a code stored beside its nibble (Q5's fifth, Q6_K's fifth and sixth)
PART = 8192  # outputs `repack` lays out at a time
LAYOUT = 3  # of `repack`'s groups: packed files of another are rebuilt (1: a row's codes side by side; 2: Q5's and Q6_K's in bytes)


def _granted(library: ctypes.CDLL) -> str | None:
    return None if library.amx_request() == 0 else "Linux did not grant this process the AMX tile state"


_p, _i64, _i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
_FLAGS = flags("-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mavx512bf16")
_NEEDS = {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"}
# Both builds hold VPDPBUSD's product for `gguf_vnni` too (every CPU with AVX512-BF16 has VNNI).
_LINEAR = {name: ([_p, _i64, _i64, _i64, _p, _p], None) for name in ("tile_linears", "q8_linears")}
AMX = Kernel("gguf_bf16.cpp", _FLAGS + ["-mavx512vnni", "-mamx-tile", "-mamx-bf16", "-mamx-int8"],
             _NEEDS | {"avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"}, {"amx_request": ([], _i32)} | _LINEAR, _granted)
# The same source without tiles: VDPBF16PS.
AVX512 = Kernel("gguf_bf16.cpp", _FLAGS + ["-mavx512vnni"], _NEEDS | {"avx512_vnni"}, _LINEAR)


def kernel() -> Kernel:
    """AMX where the CPU has it and Linux grants it, else AVX512-BF16 (an AMD EPYC of the Zen 4 kind)."""
    return AMX if AMX.needs <= cpu_flags() and AMX.usable() else AVX512


def library() -> ctypes.CDLL:
    return kernel().library()


def usable() -> bool:
    return kernel().usable()


def failure() -> str | None:
    return kernel().failure()


def stamp() -> str:
    return kernel().stamp()


def repack(blocks: torch.Tensor, kind: int) -> torch.Tensor:
    """GGUF blocks [out, bytes per row] of GGML type `kind` (out a multiple of 16) laid out for the
    kernel in groups of 16 outputs: [out / 16, blocks per row x GROUP_BYTES[kind]]. Per group and
    block: each field's 16 values side by side (float16 scales as they are, sub-block scales and minima
    as bytes), then per 32-input chunk the 16 rows of a weight tile, row r's word 2j + p holding output
    j's code for input 2r + p: four rows' nibbles to a word (row 4g + t at bits 4t of word 2j + p of
    the chunk's g-th 64 bytes) or two rows' bytes (row 2g + t at bits 8t). Codes are unsigned (Q6_K's
    q, Q5's with their fifth bit), Q8_0's signed. Q5's and Q6_K's codes are nibbles followed by a word
    per high bit (`HIGH`), row r's at `high_bits_at` (gguf_bf16.cpp). Groups are laid out alone, so a
    matrix goes `PART` outputs at a time: the 1.5B's output head (151,936 x 1,536, Q6_K) at once held
    about 5 GB of intermediate arrays."""
    if blocks.shape[0] > PART:
        return torch.cat([repack(blocks[start:start + PART], kind) for start in range(0, blocks.shape[0], PART)])
    out, per = blocks.shape[0], gguf_avx2.KINDS[kind][0]
    raw = blocks.numpy().reshape(out, -1, gguf_avx2.KINDS[kind][1])
    fields, codes = gguf_avx2.block_fields(kind, raw)
    if kind in (6, 7):  # Q5: the fifth bits, a field of gguf_avx2's, join the codes
        high = fields.pop()
        codes = codes | (((high >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8) << 4)
    if kind == 14:
        codes = codes + np.uint8(32)  # q, not q - 32: the kernel adds the -32
    groups, count = out // 16, raw.shape[1]
    parts = [np.ascontiguousarray(f.reshape(groups, 16, count, -1).transpose(0, 2, 3, 1)).view(np.uint8)
             .reshape(groups, count, -1) for f in fields]

    def tile_rows(c: np.ndarray) -> np.ndarray:  # group, block, chunk, tile row, j, p
        return c.reshape(groups, 16, count, per // 32, 16, 2).transpose(0, 2, 3, 4, 1, 5).astype(np.uint16)

    each, bits = (4, 4) if kind in NIBBLES else (2, 8)  # rows a word holds, bits of a code
    rows = tile_rows(codes & 0x0F if kind in HIGH else codes)
    words = np.zeros(rows.shape[:3] + (16 // each,) + rows.shape[4:], np.uint16)  # group, block, chunk, g, j, p
    for r in range(16):  # row each g + t at bits t x bits of word 2j + p
        words[:, :, :, r // each] |= rows[:, :, :, r] << np.uint16(bits * (r % each))
    if kind in HIGH:  # then words of the high bits, row r's at high_bits_at (gguf_bf16.cpp) of word r x HIGH // 16
        per_code, high = HIGH[kind], tile_rows(codes >> 4)
        added = np.zeros(words.shape[:3] + (per_code,) + words.shape[4:], np.uint16)
        for r in range(16):
            at = 8 * (r % 4 // 2) + per_code * (2 * (r // 4 % (4 // per_code)) + r % 2)
            added[:, :, :, r * per_code // 16] |= high[:, :, :, r] << np.uint16(at)
        words = np.concatenate([words, added], axis=3)
    parts.append(np.ascontiguousarray(words.astype("<u2")).view(np.uint8).reshape(groups, count, -1))
    return torch.from_numpy(np.concatenate(parts, axis=-1).reshape(groups, -1))


def holds(groups: torch.Tensor, kind: int, in_features: int) -> bool:
    """Whether `groups` are `repack`'s groups of `in_features` inputs in GGML type `kind`."""
    if kind not in GROUP_BYTES or groups.dtype != torch.uint8 or groups.dim() != 2 or not groups.is_contiguous():
        return False
    per = gguf_avx2.KINDS[kind][0]
    return in_features % per == 0 and groups.shape[1] == in_features // per * GROUP_BYTES[kind]


def check(groups: torch.Tensor, kind: int, in_features: int) -> None:
    """Refuse what would make the kernel read or write outside its buffers."""
    if not holds(groups, kind, in_features):
        raise ValueError(f"groups of type {kind} [{', '.join(map(str, groups.shape))}] do not hold {in_features} inputs")


FUNCTION = "tile_linears"  # the library's product of x by several matrices


def entry(groups: torch.Tensor, kind: int, bias: torch.Tensor | None) -> list[int]:
    """A matrix's row of the table that `linears` takes: its groups (passed by `check`, done once per layer,
    off the decoding loop), outputs, GGML type and bias (float32, contiguous) or 0."""
    return [groups.data_ptr(), groups.shape[0] * OUTPUTS, kind, 0 if bias is None else bias.data_ptr()]


def linears(function, x: torch.Tensor, table: torch.Tensor, outputs: int) -> torch.Tensor:
    """x [m, in] float32, contiguous, times each matrix of `table` ([count, 4] int64, rows of `entry`)
    transposed, plus its bias, in one call of `function` (a library's FUNCTION): [m x outputs] float32,
    each matrix's [m, out] after the one before's. Up to `ROWS` rows x is rounded to bfloat16 and the
    weights are exact; more (a prefill), both are rounded to bfloat16."""
    y = torch.empty(x.shape[0] * outputs)
    function(x.data_ptr(), x.shape[0], x.shape[1], table.shape[0], table.data_ptr(), y.data_ptr())
    return y


def linear(lib: ctypes.CDLL, x: torch.Tensor, groups: torch.Tensor, kind: int, in_features: int,
           function: str = FUNCTION) -> torch.Tensor:
    """x [m, in] float32 times the weights that `repack`'s groups of GGML type `kind` hold, transposed:
    [m, out] float32 (`linears` of one matrix without bias)."""
    x, outputs = x.reshape(-1, in_features).contiguous(), groups.shape[0] * OUTPUTS
    return linears(getattr(lib, function), x, torch.tensor([entry(groups, kind, None)]), outputs).view(-1, outputs)


def dequantize(lib: ctypes.CDLL, groups: torch.Tensor, kind: int, in_features: int) -> torch.Tensor:
    """The float32 matrix [out, in] that `repack`'s groups hold: the product of the identity, in which
    each output is one code times its scale plus its offset, rounded once as the GGUF reference does."""
    check(groups, kind, in_features)
    w = torch.empty(groups.shape[0] * OUTPUTS, in_features)
    for start in range(0, in_features, ROWS):  # rows of the identity: at most ROWS take the exact path
        part = torch.zeros(min(ROWS, in_features - start), in_features)
        part[:, start:start + part.shape[0]].fill_diagonal_(1.0)
        w[:, start:start + part.shape[0]] = linear(lib, part, groups, kind, in_features).T
    return w
