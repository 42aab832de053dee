"""A matrix product straight on a GGUF's own quantized blocks, with float32 activations, for AVX2 CPUs.

A one-token step of Qwen2.5-Coder-1.5B reads every weight once, and in fbgemm's float16 it reads
2.6 GB where the GGUF holds 1.0 GB. torch's int4 and int8 kernels read less but are vectorised for
bfloat16 activations only, which AVX2 CPUs emulate. So the blocks are kept as shipped (Q4_K, Q6_K,
Q5_0, Q8_0, ...) and `block_kernel.cpp` dequantizes them in registers on the way to float32 FMAs.
Measured on a 2-core AMD EPYC (Zen 3, AVX2), 2 threads, the 197 matrices of Qwen2.5-Coder-1.5B one
after another, best of 8 rounds interleaved with fbgemm float16 (a noisy VM: two sessions' figures):

    rows                   1          2          4          16          64
    GGUF blocks here    97-107 ms  122-176    199-237    565-715    1897-2250
    float16, fbgemm    127-165     136-185    155-203    401-470    1240-1475

Up to 4 rows each output's blocks are dequantized once, in registers, for all the rows; from 5 rows
they are dequantized into a small panel that a 3-row by 2-output tile of FMAs reads. Both add the
same products in the same order, so a row's result never depends on how many rows came with it,
which verification needs to reproduce one-token steps bit for bit. Past `ROWS` rows (a prefill) the
kernel's 80-90 GFLOPS lose to MKL, so the blocks are dequantized (exactly, as the converted float32
model holds them) and multiplied in float32 there; a prefill then costs what float32's does.

The C++ source beside this file is compiled once per machine into the cache (about 5 s with g++; with
no compiler or no AVX2 the format is not offered, and `auto` picks another) and called through
ctypes, which releases the GIL. It runs on torch's own OpenMP threads (the same libgomp).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

import torch

from . import atomic

SOURCE = Path(__file__).with_suffix(".cpp")
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared", "-std=c++17"]
ROWS = 64  # more rows than any verification: larger batches go through MKL
OUTPUTS = 4096  # outputs dequantized at a time for MKL: at most 147 MB of float32 (8960 inputs)
KINDS = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 12: (256, 144), 14: (256, 210)}
# the GGML block types it takes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K): weights and bytes per block

log = logging.getLogger("assistant")
_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failure: str | None = None


class KernelError(RuntimeError):
    """The block kernel cannot run here; the message says why."""


def cpu_has_avx2() -> bool:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return False
    return {"avx2", "fma", "f16c"} <= set(flags.split(":", 1)[1].split())


def library() -> ctypes.CDLL:
    """The compiled kernel, built into the cache on first use; raises KernelError where it cannot be."""
    global _library, _failure
    with _lock:
        if _library is None and _failure is None:
            try:
                from .models import cache_root  # models imports weights, which imports this
                _library = build(cache_root())
            except (KernelError, OSError) as error:
                _failure = str(error)
                log.info("no gguf weights here: %s", _failure)
        if _library is None:
            raise KernelError(_failure)
        return _library


def usable() -> bool:
    try:
        library()
    except KernelError:
        return False
    return True


def failure() -> str | None:
    """Why the kernel cannot run here, once `library` was tried; None where it runs."""
    return _failure


def build(cache: Path) -> ctypes.CDLL:
    if not cpu_has_avx2():
        raise KernelError("the block kernel needs a CPU with AVX2, FMA and F16C")
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        raise KernelError("the block kernel needs a C++ compiler (g++) to be built once")
    stamp = hashlib.sha256(SOURCE.read_bytes() + repr((compiler, FLAGS)).encode()).hexdigest()[:16]
    path = cache / "kernels" / f"blocks-{stamp}.so"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic.temporary_beside(path) as temporary:
            done = subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(temporary)], capture_output=True, text=True)
            if done.returncode != 0:
                raise KernelError(f"building the block kernel failed: {done.stderr.strip()[-2000:]}")
            os.replace(temporary, path)
    lib = ctypes.CDLL(str(path))
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.block_linear.argtypes = [p, i64, i64, p, i64, i64, i32, p]
    lib.block_dequantize.argtypes = [p, i64, i64, i64, i32, p]
    return lib


def linear(lib: ctypes.CDLL, x: torch.Tensor, blocks: torch.Tensor, kind: int, in_features: int) -> torch.Tensor:
    """x [m, in] float32 times the blocks [out, bytes per row] of GGML type `kind`, transposed: [m, out].

    Up to `ROWS` rows (one-token steps, verifications, the warm buffer's chunks) through the kernel,
    each row alone; more (a prefill) through MKL on the blocks dequantized `OUTPUTS` at a time.
    The blocks must pass `check` (done once per layer, off the decoding loop)."""
    x = x.contiguous()
    if x.shape[0] > ROWS:
        return torch.cat([x @ dequantize(lib, blocks[i:i + OUTPUTS], kind, in_features).T
                          for i in range(0, blocks.shape[0], OUTPUTS)], dim=1)
    y = torch.empty(x.shape[0], blocks.shape[0])
    lib.block_linear(x.data_ptr(), x.shape[0], in_features, blocks.data_ptr(), blocks.shape[0], blocks.shape[1],
                     kind, y.data_ptr())
    return y


def dequantize(lib: ctypes.CDLL, blocks: torch.Tensor, kind: int, in_features: int) -> torch.Tensor:
    """The float32 matrix [out, in] the blocks hold."""
    check(blocks, kind, in_features)
    w = torch.empty(blocks.shape[0], in_features)
    lib.block_dequantize(blocks.data_ptr(), blocks.shape[0], blocks.shape[1], in_features, kind, w.data_ptr())
    return w


def holds(blocks: torch.Tensor, kind: int, in_features: int) -> bool:
    """Whether `blocks` are rows of `in_features` weights in blocks of GGML type `kind` that the kernel takes."""
    if kind not in KINDS or blocks.dtype != torch.uint8 or blocks.dim() != 2 or not blocks.is_contiguous():
        return False
    weights_per_block, size = KINDS[kind]
    return in_features % weights_per_block == 0 and blocks.shape[1] == in_features // weights_per_block * size


def check(blocks: torch.Tensor, kind: int, in_features: int) -> None:
    """Refuse what would make the kernel read or write outside its buffers."""
    if not holds(blocks, kind, in_features):
        raise ValueError(f"blocks of type {kind} [{', '.join(map(str, blocks.shape))}] do not hold {in_features} inputs")
