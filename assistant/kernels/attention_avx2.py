"""Attention of a few query rows over a float32 KV cache, each row alone over exactly the keys it
sees, on AVX2 and FMA (`attention_avx2.cpp`): what `model.attention` runs for decode steps and
verifications on a CPU.

Invariant: a row's result is one fixed sequence of operations whatever the number of queries and
keys that come with it, so verifying a draft reproduces one-token steps bit for bit.
"""

from __future__ import annotations

import ctypes

from assistant.kernels.build import Kernel, flags

DIMS = (8, 16, 32, 64, 128, 256)  # the head sizes the source takes
_p, _i64 = ctypes.c_void_p, ctypes.c_int64
KERNEL = Kernel("attention_avx2.cpp", flags("-mavx2", "-mfma"), {"avx2", "fma"},
                {"attend": ([_p, _i64, _i64, _i64, _i64, _p, _p, _i64, _i64, _i64, _i64, ctypes.c_float, _p],
                            ctypes.c_int),
                 "attend_projected": ([_p, _p, _p, _p, _p, _i64, _i64, _i64, _p, _p, _i64, _i64, _i64,
                                       ctypes.c_float, _p], ctypes.c_int)})
