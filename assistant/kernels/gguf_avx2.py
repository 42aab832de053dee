"""A matrix product straight on a GGUF's own quantized blocks, with float32 activations, for AVX2 CPUs
(`--weights gguf`).

torch's int4 and int8 kernels read few bytes but are vectorised for bfloat16 activations only, which
AVX2 CPUs emulate. So the blocks are kept as shipped (Q4_K, Q6_K, Q5_0, Q8_0, ...) and
`gguf_avx2.cpp` dequantizes them on the way to float32 FMAs. `repack` regroups them once, when a
model is packed: each 8 outputs' blocks over the same inputs side by side, their codes input by
input, so that one AVX2 vector holds 8 outputs' weights at one input and each output's sum is one
chain of FMAs in its own lane. Scales stay as the GGUF stores them; Q6_K's 6-bit codes become bytes.

Invariant: up to `ROWS` rows every row's result is the same sequence of operations whatever the
number of rows (tiles of up to 4 rows keep their sums in registers, larger ones read a panel
dequantized into L1; both add the same products in the same order), so verification reproduces
one-token steps bit for bit. Past `ROWS` rows (a prefill) the blocks are dequantized exactly, as
the converted float32 model holds them, and multiplied by MKL in float32.

Built once per machine (`kernels.build`; with no compiler or no AVX2 the format is not offered and
`auto` picks another); it runs on torch's own OpenMP threads. Measurements: docs/kernels.md.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import torch

from assistant.kernels.build import Kernel, flags

ROWS = 64  # more rows than any verification: larger batches go through MKL
DEQUANTIZED = 4096  # outputs dequantized at a time for MKL: at most 147 MB of float32 (8960 inputs), kept
KINDS = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 12: (256, 144), 14: (256, 210)}
# the GGML block types it takes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K): weights and bytes per block
GROUP_BYTES = {2: 144, 3: 160, 6: 176, 7: 192, 8: 272, 12: 1184, 14: 2192}  # per 8 outputs' blocks, regrouped
OUTPUTS = MULTIPLE = 8  # outputs a group holds; a layer's outputs must be a multiple
LAYOUT = 1  # of `repack`'s groups: packed files of another are rebuilt

_scratch = threading.local()


_p, _i64, _i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
AVX2 = Kernel("gguf_avx2.cpp", flags("-mavx2", "-mfma", "-mf16c"), {"avx2", "fma", "f16c"},
              {"block_linear": ([_p, _i64, _i64, _p, _i64, _i32, _p], None),
               "block_dequantize": ([_p, _i64, _i64, _i32, _p], None)})
library, usable, failure, stamp = AVX2.library, AVX2.usable, AVX2.failure, AVX2.stamp


def repack(blocks: torch.Tensor, kind: int) -> torch.Tensor:
    """GGUF blocks [out, bytes per row] of GGML type `kind` (out a multiple of 8) regrouped for the
    kernel: [out / 8, blocks per row x GROUP_BYTES[kind]]. Per group of 8 outputs and per block,
    the block's fields, each 8 outputs' values side by side (float16 scales as they are, Q4_K's 6-bit
    scales and minima unpacked to bytes, Q5's fifth bits as 8 words), then the codes, input by input,
    8 outputs each: nibbles (input i of a 32-input sub-block in the low half, i + 16 in the high) or,
    for Q8_0 and Q6_K, signed bytes (Q6_K's q - 32)."""
    out, per = blocks.shape[0], KINDS[kind][0]
    raw = blocks.numpy().reshape(out, -1, KINDS[kind][1])
    fields, codes = block_fields(kind, raw)
    parts = [np.ascontiguousarray(f.reshape(out // 8, 8, raw.shape[1], -1).transpose(0, 2, 3, 1)).view(np.uint8)
             .reshape(out // 8, raw.shape[1], -1) for f in fields]
    codes = codes.reshape(out // 8, 8, raw.shape[1], per).transpose(0, 2, 3, 1)  # [groups, blocks, inputs, 8]
    if kind not in (8, 14):
        codes = codes.reshape(out // 8, raw.shape[1], per // 32, 2, 16, 8)
        codes = codes[:, :, :, 0] | (codes[:, :, :, 1] << 4)
    parts.append(np.ascontiguousarray(codes).reshape(out // 8, raw.shape[1], -1))
    return torch.from_numpy(np.concatenate(parts, axis=-1).reshape(out // 8, -1))


def block_fields(kind: int, raw: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """A block type's fields [out, blocks, count] in the kernel's order, and its codes [out, blocks,
    inputs] as uint8 (Q8_0's and Q6_K's signed), input by input (gguf-py's `quants` lays them out)."""
    half = lambda at: raw[..., at:at + 2].copy().view(np.uint16)
    nibbles = lambda q: np.concatenate([q & 15, q >> 4], axis=-1)
    if kind == 2:  # Q4_0: d, 16 bytes of codes
        return [half(0)], nibbles(raw[..., 2:18])
    if kind == 3:  # Q4_1: d, m
        return [half(0), half(2)], nibbles(raw[..., 4:20])
    if kind == 6:  # Q5_0: d, 32 fifth bits
        return [half(0), raw[..., 2:6].copy().view(np.uint32)], nibbles(raw[..., 6:22])
    if kind == 7:  # Q5_1: d, m, fifth bits
        return [half(0), half(2), raw[..., 4:8].copy().view(np.uint32)], nibbles(raw[..., 8:24])
    if kind == 8:  # Q8_0: d, 32 signed bytes
        return [half(0)], raw[..., 2:34]
    if kind == 12:  # Q4_K: d, dmin, 12 bytes of 6-bit scales and minima, 4 x 32 bytes of two sub-blocks each
        s = raw[..., 4:16]
        scales = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], axis=-1)
        minima = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], axis=-1)
        q = raw[..., 16:144].reshape(*raw.shape[:2], 4, 1, 32)
        return [half(0), half(2), scales, minima], np.concatenate([q & 15, q >> 4], axis=-2).reshape(*raw.shape[:2], 256)
    # Q6_K: 128 bytes of low nibbles, 64 of high bit pairs, 16 signed scales, d
    low, high = raw[..., 0:128].reshape(*raw.shape[:2], 2, 64), raw[..., 128:192].reshape(*raw.shape[:2], 2, 32)
    low = np.concatenate([low[..., :32] & 15, low[..., 32:] & 15, low[..., :32] >> 4, low[..., 32:] >> 4], axis=-1)
    high = np.concatenate([(high >> shift) & 3 for shift in (0, 2, 4, 6)], axis=-1)
    q = ((low | (high << 4)).reshape(*raw.shape[:2], 256) - np.uint8(32))  # q - 32 as a signed byte
    return [half(208), raw[..., 192:208]], q


def linear(lib: ctypes.CDLL, x: torch.Tensor, groups: torch.Tensor, kind: int, in_features: int) -> torch.Tensor:
    """x [m, in] float32 times the weights that `repack`'s groups of GGML type `kind` hold, transposed:
    [m, out].

    Up to `ROWS` rows (one-token steps, verifications, the warm buffer's chunks) through the kernel,
    each row alone; more (a prefill) through MKL on the weights dequantized `DEQUANTIZED` at a time.
    The groups must pass `check` (done once per layer, off the decoding loop)."""
    x = x.contiguous()
    if x.shape[0] > ROWS:
        products = []
        for i in range(0, groups.shape[0], DEQUANTIZED // OUTPUTS):
            part = groups[i:i + DEQUANTIZED // OUTPUTS]
            w = scratch(part.shape[0] * OUTPUTS * in_features).view(part.shape[0] * OUTPUTS, in_features)
            lib.block_dequantize(part.data_ptr(), w.shape[0], in_features, kind, w.data_ptr())
            products.append(x @ w.T)
        return torch.cat(products, dim=1)
    y = torch.empty(x.shape[0], groups.shape[0] * OUTPUTS)
    lib.block_linear(x.data_ptr(), x.shape[0], in_features, groups.data_ptr(), y.shape[1], kind, y.data_ptr())
    return y


def scratch(size: int) -> torch.Tensor:
    """`size` float32s kept per thread for the weights a prefill dequantizes: allocated afresh for
    every 4,096 outputs, their page faults took 1.0 s of the 1.3 s that dequantizing all of
    Qwen2.5-Coder-1.5B's matrices took (EPYC, 2 threads); reused, 0.3 s."""
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.numel() < size:
        buffer = _scratch.buffer = torch.empty(size)
    return buffer[:size]


def dequantize(lib: ctypes.CDLL, groups: torch.Tensor, kind: int, in_features: int) -> torch.Tensor:
    """The float32 matrix [out, in] that `repack`'s groups hold."""
    check(groups, kind, in_features)
    w = torch.empty(groups.shape[0] * 8, in_features)
    lib.block_dequantize(groups.data_ptr(), w.shape[0], in_features, kind, w.data_ptr())
    return w


def holds(groups: torch.Tensor, kind: int, in_features: int) -> bool:
    """Whether `groups` are `repack`'s groups of `in_features` inputs in GGML type `kind`."""
    if kind not in KINDS or groups.dtype != torch.uint8 or groups.dim() != 2 or not groups.is_contiguous():
        return False
    per = KINDS[kind][0]
    return in_features % per == 0 and groups.shape[1] == in_features // per * GROUP_BYTES[kind]


def check(groups: torch.Tensor, kind: int, in_features: int) -> None:
    """Refuse what would make the kernel read or write outside its buffers."""
    if not holds(groups, kind, in_features):
        raise ValueError(f"groups of type {kind} [{', '.join(map(str, groups.shape))}] do not hold {in_features} inputs")
