"""A matrix product on a GGUF's own blocks with activations quantized to 8 bits: `--weights gguf-q8`.

VPDPBUSD makes 64 products an instruction, of unsigned bytes by signed ones into int32 lanes, where
`gguf_bf16`'s VDPBF16PS makes 32. So x is quantized per row to a float32 scale and codes of
-127..127, as llama.cpp quantizes activations, and multiplied by the weights' own codes. The weights
are the GGUF's exactly; only x is rounded, to 8 bits. For blocks of 32 inputs (Q4_0 to Q8_0) x has
a scale per 32 inputs (llama.cpp's Q8_0) and each block's integer sum is scaled in float32; for the
K-quants' blocks of 256 (Q4_K, Q6_K) x has a scale per 256 (llama.cpp's Q8_K), a block's sub-block
sums are scaled and added in int32, exactly, and the block is scaled once in float32.

It reads `gguf_bf16`'s groups as they are (`gguf_bf16.cpp`, `q8_rows`). Invariant: up to `ROWS`
rows every row is computed alike whatever the number of rows, so verifying a draft reproduces
one-token steps bit for bit; without AMX a prefill's rows too. With AMX, a prefill (more rows) takes
`gguf_bf16`'s product on the tiles, x and the weights rounded to bfloat16, three times faster than
VPDPBUSD there: its rows are alike among themselves (`prefill_alike`). Built into `gguf_bf16`'s
libraries, on CPUs with AVX512-VNNI and AVX512-BF16. Measurements: docs/kernels.md.
"""

from __future__ import annotations

import functools

from assistant.kernels.gguf_bf16 import (AVX512, GROUP_BYTES, KINDS, LAYOUT, MULTIPLE, OUTPUTS, ROWS, check,
                                         dequantize, entry, failure, holds, kernel, library, linears, repack, stamp,
                                         usable)
from assistant.kernels.gguf_bf16 import linear as bf16_linear

__all__ = ["GROUP_BYTES", "KINDS", "LAYOUT", "MULTIPLE", "OUTPUTS", "ROWS", "check", "dequantize", "entry", "holds",
           "linear", "linears", "repack", "library", "usable", "failure", "stamp", "FUNCTION", "prefill_alike"]
FUNCTION = "q8_linears"  # gguf_bf16.linears's function here: x quantized to 8 bits per row and 32 or 256 inputs

linear = functools.partial(bf16_linear, function=FUNCTION)


def prefill_alike() -> bool:
    """Whether a prefill's rows are computed as a step's: without AMX (VPDPBUSD for every row count)."""
    return kernel() is AVX512
