"""Attention of a few query rows over a KV cache, each row alone over exactly the keys it sees
(`attention_avx2.cpp`): what `model.attention` runs for decode steps, verifications and prefill
pieces on a CPU. Two builds of the one source: `FLOAT32`, FMAs on AVX2 over a float32 cache; `BFLOAT16`,
where the CPU has AVX512-BF16, the queries, keys, probabilities and values rounded to bfloat16 and
multiplied in pairs by VDPBF16PS into float32 sums (the precision a bfloat16 model's attention has on a
GPU), about twice the products a cycle, over a bfloat16 cache (keys and values rounded once, where they
are stored) or a float32 one (rounded as they are read: the same bits).

Invariant: a row's result is one fixed sequence of operations whatever the number of queries and
keys that come with it, so verifying a draft reproduces one-token steps bit for bit.
"""

from __future__ import annotations

import ctypes

from assistant.kernels.build import Kernel, cpu_flags, flags

DIMS = (8, 16, 32, 64, 128, 256)  # the head sizes the source takes
PRECISIONS = ("auto", "float32", "bfloat16")
_p, _i64 = ctypes.c_void_p, ctypes.c_int64
_SIGNATURES = {
    "attend": ([_p, _i64, _i64, _i64, _i64, _p, _p, _i64, _i64, _i64, _i64, ctypes.c_float, _p, _i64], ctypes.c_int),
    "attend_projected": ([_p, _p, _p, _p, _p, _i64, _i64, _i64, _p, _p, _i64, _i64, _i64, ctypes.c_float, _p, _i64],
                         ctypes.c_int)}
FLOAT32 = Kernel("attention_avx2.cpp", flags("-mavx2", "-mfma"), {"avx2", "fma"}, _SIGNATURES)
BFLOAT16 = Kernel("attention_avx2.cpp", flags("-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl",
                                              "-mavx512bf16"),
                  {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"}, _SIGNATURES)


def kernel(precision: str = "auto") -> Kernel:
    """The build for `precision`: "auto" takes bfloat16 where the CPU has AVX512-BF16, else float32."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown attention precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        return BFLOAT16 if BFLOAT16.needs <= cpu_flags() else FLOAT32
    return BFLOAT16 if precision == "bfloat16" else FLOAT32
