"""A matrix product on a GGUF's own blocks with activations quantized to 8 bits: `--weights gguf-q8`.

On the 2-core AMD EPYC of the Zen 4 kind (AVX512-BF16 and VNNI, no AMX), `gguf-bf16`'s VDPBF16PS makes
32 products a vector instruction, and from 4 rows on its products are bound by them: 32 rows of the
1.5B's matrices took 322 ms, 256 rows 1.95 s (`tile_kernel`). VPDPBUSD makes 64, of unsigned bytes by
signed ones into int32 lanes. So x is quantized per row to a float32 scale and codes of -127..127, as
llama.cpp quantizes activations, and multiplied by the weights' own codes. The weights are the GGUF's
exactly; only x is rounded, to 8 bits, where `gguf-bf16` rounds it to bfloat16's 8-bit mantissa a value.

For blocks of 32 inputs (Q4_0 to Q8_0) x has a scale per 32 inputs (llama.cpp's Q8_0), and each
block's integer sum is scaled in float32. For the K-quants' blocks of 256 (Q4_K, Q6_K: the 1.5B's
every matrix) x has a scale per 256 (llama.cpp's Q8_K): their sub-blocks' scales are small integers,
so a block's sub-block sums are scaled and added in int32, exactly, and the block is scaled once in
float32. Scaling every sub-block in float32, with x scaled per 32, cost 4 float operations a row and
sub-block beside 8 VPDPBUSD: without them, 16 rows of a 8960 x 1536 Q4_K matrix took 0.55 ms against
0.75. Integer scaling, measured in one process taking turns (the 1.5B's matrices, 16 rows, best of
10): 1.39 against 1.57 ms (gate, Q4_K), 1.32 against 1.56 (down, Q4_K), 1.79 against 2.14 (down,
Q6_K); in the model after 1,500 tokens a 16-token verification 146 against 156 ms (median of 10) and a
step unchanged. HumanEvalFix's dev split (20 tasks, `pld+h`) fixed 11 with either; 17 of `ar`'s 20
answers were the same text.

It reads `tile_kernel`'s groups as they are: a 64-byte word of them holds, in output j's dword, four
of that output's byte codes (inputs 0, 2, 1, 3 of four) or eight nibbles (0, 4, 1, 5 of eight low, 2,
6, 3, 7 high), so one AND, and a shift for the high nibbles, makes an operand, and x's codes are
stored in the same order (`tile_kernel.cpp`, `q8_rows`). Every row is computed alike whatever the
number of rows, a prefill's too, so verifying a draft reproduces one-token steps bit for bit.
Built into `tile_kernel`'s AVX512 library, on CPUs with AVX512-VNNI and AVX512-BF16.
"""

from __future__ import annotations

import functools

from assistant.kernels.gguf_bf16 import (
                          AVX512,
                          GROUP_BYTES,
                          KINDS,
                          LAYOUT,
                          MULTIPLE,
                          OUTPUTS,
                          check,
                          dequantize,
                          entry,
                          holds,
                          linears,
                          repack,
)
from assistant.kernels.gguf_bf16 import linear as tile_kernel_linear

__all__ = ["GROUP_BYTES", "KINDS", "LAYOUT", "MULTIPLE", "OUTPUTS", "check", "dequantize", "entry", "holds", "linear",
           "linears", "repack", "library", "usable", "failure", "stamp", "FUNCTION"]
library, usable, failure, stamp = AVX512.library, AVX512.usable, AVX512.failure, AVX512.stamp
FUNCTION = "q8_linears"  # tile_kernel.linears's function here: x quantized to 8 bits per row and 32 or 256 inputs

linear = functools.partial(tile_kernel_linear, function=FUNCTION)
