"""Compact linear weights: what `--weights` stores for each matrix product and which kernel runs it.

A GGUF is dequantized to float32 when it is converted, and a float32 model reads 4 to 8 times the
bytes llama.cpp reads per token. Every linear layer (the output head included) is therefore
replaced by a compact one; norms and attention stay as they are, and an embedding the GGUF holds in
blocks is looked up in them (`gguf_blocks.BlockEmbedding`):

- `float16` (fbgemm), `int8` and `int4` (torch's kernels), `bfloat16` (oneDNN);
- `gguf`, `gguf-bf16` and `gguf-q8`: the GGUF's own blocks, regrouped once when the model is packed,
  through our kernels (`kernels.gguf_avx2`, `kernels.gguf_bf16` on AMX or AVX512-BF16,
  `kernels.gguf_vnni` with activations quantized to 8 bits). Layers a GGUF holds in other types,
  and every layer of a model that came without a GGUF, are quantized to Q8_0.

`auto` measures the formats this machine offers once (a few seconds, cached per CPU, thread count,
torch, the formats offered and the kernels' sources) on the products of a code edit with the
default strategy (`EDIT`), and takes the fastest. Packed weights are cached and rebuilt when their
layout changes; a GGUF's model is stored with every other tensor of it (`pack_stored`), so that
it loads without float32 weights.

Invariant (exactness): drafts are verified in one forward of many rows and must reproduce one-token
steps bit for bit, so every format computes a row alike whatever the number of rows: torch's int8
and int4 kernels and our kernels compute each row alone (up to 64 rows for gguf and gguf-bf16, any
number for gguf-q8); fbgemm's float16 kernel and MKL's float32 one round a row differently for some
batch sizes, so `Float16Linear`, and on CPU every float32 layer left (`float32_rows_alike`), pad a batch
to the next size that computes every row as a large batch does (probed once per model); bfloat16
forwards are padded to fixed shapes (`model.exactness`).
The measurements that chose these are in docs/kernels.md.
"""

from __future__ import annotations

import functools
import json
import logging
import platform
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from pathlib import Path
from types import ModuleType

import safetensors
import safetensors.torch
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants
from safetensors import SafetensorError
from torch import nn

from assistant import files
from assistant.kernels import gguf_avx2, gguf_bf16, gguf_vnni
from assistant.model import gguf_blocks
from assistant.model.catalog import CHOICES, FORMATS
from assistant.model.exactness import PADDED_ROWS

Rows = Callable[[int | None], torch.Tensor]  # a layer's float32 weight, its first rows (None: all)
COMPACT = ("float16", "int8", "int4", "gguf", "gguf-bf16", "gguf-q8")  # formats that replace the linear layers of a float32 model
FAMILIES = ("llama", "qwen2")  # model types whose compact forward is tested token for token
INT4_GROUP = 32
PROBED_ROWS = 64  # batch sizes checked for exactness (fbgemm's, MKL's): more than any verification
REST, EMBEDDING = "rest.", "embedding."  # a packed file's other tensors (`rest_of`), beside its layers'

log = logging.getLogger("assistant")


class WeightsError(ValueError):
    """A --weights value this machine cannot run; the message names the choices."""


def available(device: torch.device) -> tuple[str, ...]:
    """The formats this device runs."""
    return tuple(f for f in FORMATS if runs(f, device))


def runs(weights: str, device: torch.device) -> bool:
    """Whether this device runs `weights`; the formats on our kernels build them to know (once per machine)."""
    if device.type != "cpu":
        return weights in ("float32", "bfloat16", "float16")
    if weights == "float16":
        return "fbgemm" in torch.backends.quantized.supported_engines
    return weights not in KERNELS or KERNELS[weights].usable()


def check(weights: str, device: torch.device) -> str:
    if weights not in CHOICES:
        raise WeightsError(f"unknown weights {weights!r}: use one of {', '.join(CHOICES)}")
    if weights != "auto" and not runs(weights, device):
        why = f" ({KERNELS[weights].failure()})" if weights in KERNELS and device.type == "cpu" else ""
        raise WeightsError(f"weights {weights!r} do not run on {device.type} here{why}: use one of "
                           f"auto, {', '.join(available(device))}")
    return weights


class Float16Linear(nn.Module):
    """y = x W^T + b with W in fbgemm's packed float16; x, y and the sums in float32."""

    rows_alike = True  # up to PROBED_ROWS rows, batches are padded to sizes fbgemm computes alike (`exactness.alike`)

    def __init__(self, linear: nn.Linear, pad: list[int]):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # the bias copied: fbgemm keeps the tensor it is given, which would keep the map of the file it was read
        # from (`loading.copied_out_of_file`)
        bias = None if linear.bias is None else linear.bias.detach().clone()
        self.packed = torch.ops.quantized.linear_prepack_fp16(linear.weight.detach().float(), bias)
        self.pad = pad  # pad[m]: the batch size to compute m rows in (see the module docstring)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return padded(x, self.pad, lambda rows: torch.ops.quantized.linear_dynamic_fp16(rows, self.packed))


def padded(x: torch.Tensor, pad: list[int], product) -> torch.Tensor:
    """product(x) [..., out] of x [..., in], computed on a batch of pad[m] rows where x has m < len(pad)."""
    rows = x.reshape(-1, x.shape[-1])
    m = rows.shape[0]
    if m < len(pad) and pad[m] != m:
        rows = torch.cat([rows, rows.new_zeros(pad[m] - m, rows.shape[1])])
    out = product(rows.contiguous())[:m]
    return out.reshape(*x.shape[:-1], out.shape[-1])


def float32_rows_alike(model: nn.Module) -> None:
    """Pad the batches of `model`'s float32 linear layers as `Float16Linear` pads fbgemm's: MKL computes 1 to
    3, 5 to 7 and 9 to 11 rows with other bits than the same rows among 64 (Zen 4 EPYC, 2 threads, every
    shape of SmolLM2 and a 64 x 64), which a verified draft would not reproduce; the forwards are replaced,
    the layers and their weights stay as they are."""
    layers = [m for m in model.modules() if type(m) is nn.Linear and m.weight.dtype == torch.float32]
    pads = {width: consistent_sizes(width, mkl_float32) for width in {layer.in_features for layer in layers}}
    for layer in layers:
        layer.forward = functools.partial(padded, pad=pads[layer.in_features],
                                          product=functools.partial(F.linear, weight=layer.weight, bias=layer.bias))


class QuantizedLinear(nn.Module):
    """y = x W^T + b through one of torch's CPU kernels for integer weights, which take x in bfloat16
    and compute each row alone. Subclasses name their stored tensors (`KEYS`) and make them."""

    KEYS: tuple[str, ...]

    def __init__(self, tensors: dict[str, torch.Tensor], bias: torch.Tensor | None, in_features: int):
        super().__init__()
        for key in self.KEYS:
            self.register_buffer(key, tensors[key])
        self.register_buffer("bias", bias)
        self.in_features, self.out_features = in_features, tensors[self.KEYS[0]].shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.product(x.reshape(-1, self.in_features).to(torch.bfloat16)).float()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


class Int8Linear(QuantizedLinear):
    """W as int8 with one bfloat16 scale per output."""

    KEYS = ("q", "scales")  # [out, in] int8, [out] bfloat16

    @staticmethod
    def quantize(weight: torch.Tensor) -> dict[str, torch.Tensor]:
        scales = (weight.abs().amax(1) / 127).clamp(min=1e-12)
        return {"q": (weight / scales[:, None]).round().clamp(-127, 127).to(torch.int8),
                "scales": scales.to(torch.bfloat16)}

    def product(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(rows, self.q, self.scales)


class Int4Linear(QuantizedLinear):
    """W in groups of 32 inputs, 4 bits each with a bfloat16 scale and offset per group:
    w = (q - 8) * scale + offset."""

    KEYS = ("packed", "scales")  # torch's CPU int4 layout [out, in / 2] uint8; [in / 32, out, 2] bfloat16

    @staticmethod
    def quantize(weight: torch.Tensor) -> dict[str, torch.Tensor]:
        out, features = weight.shape
        groups = weight.reshape(out, features // INT4_GROUP, INT4_GROUP)
        low, high = groups.amin(-1), groups.amax(-1)
        scale = ((high - low) / 15).clamp(min=1e-12)
        q = ((groups - low[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32).reshape(out, features)
        return Int4Linear.from_codes(q, scale, low + 8 * scale)

    @staticmethod
    def from_codes(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> dict[str, torch.Tensor]:
        """The stored tensors of w = (codes - 8) * scale + offset: codes [out, in] in 0..15, scale and
        offset [out, in / 32]."""
        return {"packed": torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1),
                "scales": torch.stack([scale, offset], -1).transpose(0, 1).contiguous().to(torch.bfloat16)}

    @staticmethod
    def carried(name: str, shape: tuple[int, int], weight: Rows, blocks: dict,
                config) -> dict[str, torch.Tensor] | None:
        """The stored tensors of a linear layer of `shape` from a GGUF's own 4-bit blocks (`gguf_blocks`), or
        None where the GGUF holds it in another form, or where they do not give back its `weight`, which was
        dequantized from them (so a mapping mistake can only cost the carry-over, never the model)."""
        found = gguf_blocks.layer_blocks(name, blocks, config)
        codes = found and gguf_blocks.int4_codes(found[0], found[1].numpy())
        if codes is None or codes[0].shape != shape:
            return None
        tensors, weight = Int4Linear.from_codes(*codes), weight(None)
        scale, offset = (codes[i].to(torch.bfloat16).float() for i in (1, 2))
        groups = (codes[0] - 8).reshape(*scale.shape, INT4_GROUP) * scale[..., None] + offset[..., None]
        close = (groups.reshape(weight.shape) - weight).abs().amax() <= 0.01 * weight.abs().amax()
        return tensors if close else None

    def product(self, rows: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, INT4_GROUP, self.scales)


class GgufLinear(nn.Module):
    """y = x W^T + b with W in a GGUF's own blocks, laid out once for a kernel (`KERNEL.repack`: groups
    of `KERNEL.OUTPUTS` outputs) and multiplied by it (`products`); x, y and the sums in float32."""

    KEYS = ("groups", "kind")  # [out / OUTPUTS, bytes per group] uint8; [1] the GGML block type
    KERNEL: ModuleType  # gguf_avx2, gguf_bf16 or gguf_vnni

    def __init__(self, tensors: dict[str, torch.Tensor], bias: torch.Tensor | None, in_features: int):
        super().__init__()
        self.register_buffer("groups", tensors["groups"])
        self.register_buffer("bias", None if bias is None else bias.float().contiguous())
        self.kind = int(tensors["kind"])
        self.in_features, self.out_features = in_features, self.groups.shape[0] * self.KERNEL.OUTPUTS
        self.KERNEL.check(self.groups, self.kind, in_features)
        self.library = self.KERNEL.library()
        self.calls: dict[tuple[nn.Module, ...], tuple] = {}  # `products`' calls that start with this layer

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> dict[str, torch.Tensor]:
        """Q8_0: one float16 scale and 32 int8 codes per 32 weights, as GGUF's own quantizer makes them."""
        kind = GGMLQuantizationType.Q8_0.value
        blocks = torch.from_numpy(gguf_quants.quantize(weight.numpy(), GGMLQuantizationType.Q8_0))
        return {"groups": cls.KERNEL.repack(blocks, kind), "kind": torch.tensor([kind])}

    @classmethod
    def carried(cls, name: str, shape: tuple[int, int], weight: Rows, blocks: dict,
                config) -> dict[str, torch.Tensor] | None:
        """The GGUF's own blocks of a linear layer of `shape`, laid out, or None where the kernel does not take
        their type or they do not give back its `weight` (dequantized from them) exactly: its first rows are
        compared."""
        found = gguf_blocks.layer_blocks(name, blocks, config)
        if found is None or found[0].value not in cls.KERNEL.KINDS:
            return None
        kind, rows, first = found[0].value, found[1], cls.KERNEL.MULTIPLE
        if rows.shape[0] != shape[0] or not torch.equal(cls.KERNEL.dequantize(
                cls.KERNEL.library(), cls.KERNEL.repack(rows[:first], kind), kind, shape[1]), weight(first)):
            return None
        return {"groups": cls.KERNEL.repack(rows, kind), "kind": torch.tensor([kind])}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return products(x, (self,))[0]


class BlockLinear(GgufLinear):
    """Groups of 8 outputs through the AVX2 kernel (`kernels.gguf_avx2`): float32 activations, a matrix a call."""

    KERNEL = gguf_avx2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.KERNEL.linear(self.library, x.reshape(-1, self.in_features).float(), self.groups, self.kind,
                                 self.in_features)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


class TileLinear(GgufLinear):
    """Groups of 16 outputs through the tile kernel (`gguf_bf16`, on AMX or AVX512-BF16): activations
    rounded to bfloat16 there."""

    KERNEL = gguf_bf16


class Q8Linear(GgufLinear):
    """The same groups through VPDPBUSD (`gguf_vnni`): activations quantized to 8 bits per 32 inputs (256 for K-quants)."""

    KERNEL = gguf_vnni

    @property
    def rows_alike(self) -> bool:
        """Every row computed alike whatever the rows, a prefill's too (`exactness.alike`): not where a
        prefill takes the AMX tiles."""
        return gguf_vnni.prefill_alike()


QUANTIZED = {"int8": Int8Linear, "int4": Int4Linear, "gguf": BlockLinear, "gguf-bf16": TileLinear, "gguf-q8": Q8Linear}
KERNELS = {f: QUANTIZED[f].KERNEL for f in ("gguf", "gguf-bf16", "gguf-q8")}  # formats that run on a kernel of ours
FROM_GGUF = ("int4", "gguf", "gguf-bf16", "gguf-q8")  # formats that carry a GGUF's blocks over


def products(x: torch.Tensor, layers: tuple[nn.Module, ...]) -> list[torch.Tensor]:
    """x [..., in] times each of `layers`' weights (linear layers over the same inputs: a decoder layer's
    q, k and v, its gate and up), [..., out] each. Layers of one tile or q8 kernel take one call of it,
    their biases added there (in float32, as torch adds them: the same bits as layer by layer); others go
    one by one. A layer alone went through 13 us of Python, ctypes and an addition of its bias beside its
    kernel (k_proj's 5.5 us, one row); q, k and v together take one pass and one parallel region. With
    `attention.projected`, the 1.5B's one-token step after 1,500 tokens took 41.0 ms against 43.7, a
    16-token verification 130.4 against 135.1 (medians of 100 and 40, taking turns in one process, Zen 4
    EPYC, gguf-q8); the 0.5B's 19.3 against 21.5 and 55.3 against 58.7; the same logits."""
    call = getattr(layers[0], "calls", {}).get(layers) or _call(layers)
    if call is None:
        return [layer(x) for layer in layers]
    linears, function, table, widths, total = call
    rows = x.reshape(-1, x.shape[-1]).float().contiguous()
    y = linears(function, rows, table, total)
    if len(widths) == 1:
        return [y.view(*x.shape[:-1], total)]
    parts = y.split([rows.shape[0] * width for width in widths])
    return [part.view(*x.shape[:-1], width) for part, width in zip(parts, widths)]


def _call(layers: tuple[nn.Module, ...]) -> tuple | None:
    """`products`' call of `layers`, kept by the first (the table holds their buffers' addresses, the
    layers hold the buffers), or None where they do not share a kernel that takes several matrices."""
    first = layers[0]
    if not (isinstance(first, GgufLinear) and hasattr(first.KERNEL, "FUNCTION")
            and all(type(layer) is type(first) and layer.in_features == first.in_features for layer in layers)):
        return None
    table = torch.tensor([first.KERNEL.entry(layer.groups, layer.kind, layer.bias) for layer in layers])
    widths = tuple(layer.out_features for layer in layers)
    function = getattr(first.library, first.KERNEL.FUNCTION)
    first.calls[layers] = (first.KERNEL.linears, function, table, widths, sum(widths))
    return first.calls[layers]


def fits(weights: str, linear: nn.Linear) -> bool:
    """Whether this layer's shape suits the format's kernel (int4 packs groups of 32, two per byte;
    the GGUF formats take blocks of 32 inputs and outputs by 8, or by 16 on AMX)."""
    return (weights not in FROM_GGUF or linear.in_features % INT4_GROUP == 0) and (
        weights not in KERNELS or linear.out_features % QUANTIZED[weights].KERNEL.MULTIPLE == 0)


def linears(model: nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if type(module) is nn.Linear]


def fbgemm_float16(weight: torch.Tensor):
    packed = torch.ops.quantized.linear_prepack_fp16(weight, None)
    return lambda x: torch.ops.quantized.linear_dynamic_fp16(x, packed)


def mkl_float32(weight: torch.Tensor):
    return lambda x: F.linear(x, weight)


def consistent_sizes(in_features: int, kernel=fbgemm_float16) -> list[int]:
    """pad[m] for m < PROBED_ROWS: the smallest batch of at least m rows whose every row `kernel` (of a
    weight matrix, its product) computes bitwise as in a batch of PROBED_ROWS rows, with this many
    threads and inputs."""
    generator = torch.Generator().manual_seed(0)
    product = kernel(torch.randn(64, in_features, generator=generator))
    x = torch.randn(PROBED_ROWS, in_features, generator=generator)
    reference = product(x)
    good = [m for m in range(1, PROBED_ROWS) if torch.equal(product(x[:m].contiguous()), reference[:m])]
    good.append(PROBED_ROWS)
    return [0] + [next(g for g in good if g >= m) for m in range(1, PROBED_ROWS)]


def pack(model: nn.Module, weights: str, stored: dict[str, torch.Tensor] | None = None,
         gguf: Path | None = None,
         weight_of: Callable[[str, int | None], torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Replace the linear layers of a float32 `model` by `weights` ones, in place.

    int8 and int4 take their tensors from `stored` where given (written by an earlier load), else
    int4 carries over the 4-bit blocks of `gguf` (the file the model was converted from) where it
    has them, and the rest is quantized; returns the tensors to store (none for float16, whose
    packed form lives in fbgemm). With `weight_of`, a layer's float32 weight (or its first rows) is what it
    gives for the layer's name, asked while the layer is packed (`gguf_model`: the model holds none); a
    layer carried over reads only the rows its check compares. Layers are packed on as many threads as
    torch uses: the kernels' packing releases the GIL.
    """
    names = [name for name in linears(model) if fits(weights, model.get_submodule(name))]
    widths = {model.get_submodule(name).in_features for name in names}
    pads = {width: consistent_sizes(width) for width in widths} if weights == "float16" else {}
    kind = QUANTIZED.get(weights)
    blocks = gguf_blocks.blocks(gguf) if weights in FROM_GGUF and stored is None and gguf is not None else {}
    carried: list[str] = []

    def compact(name: str) -> tuple[str, nn.Module, dict[str, torch.Tensor]]:
        linear = model.get_submodule(name)
        if weights == "float16":
            return name, Float16Linear(linear, pads[linear.in_features]), {}
        bias = None if linear.bias is None else linear.bias.detach().float()

        def weight(rows: int | None) -> torch.Tensor:  # its first rows (None: all), read when asked
            return linear.weight.detach().float()[:rows] if weight_of is None else weight_of(name, rows)
        tensors = stored and {key: stored[f"{name}.{key}"] for key in kind.KEYS}
        shape = (linear.out_features, linear.in_features)
        if not tensors and blocks and (tensors := kind.carried(name, shape, weight, blocks, model.config)):
            carried.append(name)
        tensors = tensors or kind.quantize(weight(None))
        return name, kind(tensors, bias, linear.in_features), {f"{name}.{key}": t for key, t in tensors.items()}

    to_store: dict[str, torch.Tensor] = {}
    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        for name, module, tensors in pool.map(compact, names):
            parent, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, attr, module)
            to_store.update(tensors)
    if blocks:
        log.info("%s: %d of %d layers carried over from the GGUF's blocks, the rest quantized",
                 weights, len(carried), len(names))
    return to_store


# Rows of a product: how many of them six edits of the bench's make with `pld+h` (Qwen2.5-Coder-1.5B, one
# code edit, two text edits, three fixes, 2026-11-27): 3,646 prompt rows, then 22 one-token steps and
# verifications of 2 to 13 rows (43), 19 to 31 (25), 33 to 59 (19) and 64 (32).
EDIT = {256: 14, 1: 22, 8: 43, 24: 25, 48: 19, 64: 32}


def timed_formats(device: torch.device, in_features: int, out_features: int) -> dict[str, float]:
    """Seconds of the products a code edit of the default strategy runs (`EDIT`), through each format,
    on a random matrix of the model's MLP shape, a bfloat16 step as decoding pads it (`PADDED_ROWS`);
    formats are interleaved and the fastest of 5 rounds of each size kept, so that other load hurts
    them alike."""
    generator = torch.Generator().manual_seed(0)
    linear = nn.Linear(in_features, out_features, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(out_features, in_features, generator=generator) * 0.02)
    runs = {}
    for weights in available(device):
        if weights == "float32":
            runs[weights] = linear
        elif weights == "bfloat16":
            runs[weights] = lambda x, w=linear.weight.detach().to(torch.bfloat16): F.linear(x.to(w.dtype), w)
        elif weights == "float16":
            runs[weights] = Float16Linear(linear, [])
        elif weights in KERNELS:  # random codes in what a 4-bit GGUF holds most: Q4_K, Q5_0 where rows are not 256 long
            kind = GGMLQuantizationType.Q4_K if in_features % 256 == 0 else GGMLQuantizationType.Q5_0
            per, size = gguf_avx2.KINDS[kind.value]
            blocks = torch.randint(0, 256, (out_features, in_features // per, size), dtype=torch.uint8, generator=generator)
            blocks[..., :4] = torch.tensor([0x2E66, 0x2E66], dtype=torch.int16).view(torch.uint8)  # float16 scales of 0.1
            layer = QUANTIZED[weights]
            runs[weights] = layer({"groups": layer.KERNEL.repack(blocks.reshape(out_features, -1), kind.value),
                                   "kind": torch.tensor([kind.value])}, None, in_features)
        else:
            runs[weights] = QUANTIZED[weights](QUANTIZED[weights].quantize(linear.weight.detach()), None, in_features)
    inputs = {rows: torch.randn(max(rows, PADDED_ROWS), in_features, generator=generator) for rows in EDIT}
    best = {(weights, rows): float("inf") for weights in runs for rows in inputs}
    with torch.inference_mode():
        for _ in range(5):
            for weights, run in runs.items():
                for rows, x in inputs.items():
                    started = time.perf_counter()
                    run(x if weights == "bfloat16" else x[:rows])
                    best[weights, rows] = min(best[weights, rows], time.perf_counter() - started)
    return {weights: sum(count * best[weights, rows] for rows, count in EDIT.items()) for weights in runs}


def choose(config, device: torch.device, cache: Path) -> str:
    """`auto`: bfloat16 (or float32) on a GPU; on a CPU the format measured fastest here, once."""
    if device.type != "cpu":
        return "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    text = config.get_text_config()
    shape = (text.hidden_size, text.intermediate_size)
    offered = available(device)
    key = (f"{platform.machine()}-{cpu_name()}-{torch.get_num_threads()}t-torch{torch.__version__}-{shape[0]}x{shape[1]}"
           f"-{'-'.join(offered)}{''.join(f'-{KERNELS[f].stamp()}' for f in offered if f in KERNELS)}"
           f"-{'-'.join(f'{count}x{rows}' for rows, count in EDIT.items())}")
    path = cache / "weights" / f"auto-{''.join(c if c.isalnum() or c in '.-' else '_' for c in key)}.json"
    saved = files.read_json(path)
    if isinstance(saved, dict) and saved.get("weights") in offered:
        return saved["weights"]
    scores = timed_formats(device, *shape)
    chosen = min(scores, key=scores.get)
    save(path, json.dumps({"weights": chosen, "seconds": scores}).encode())
    return chosen


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def save(path: Path, data: bytes) -> None:
    """Write a cache file whole or not at all; where the cache is read-only, what was measured or
    packed is simply used from memory."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomically(path, data)
    except OSError:
        pass


def pack_cached(model: nn.Module, weights: str, path: Path) -> None:
    """`pack`, with int8 and int4 tensors read from `path` when a complete file for this very model
    is there; otherwise quantized and written there atomically for the next load. A file that is
    truncated, corrupt or for other shapes is never used: it is quantized again and replaced."""
    stored = read_stored(model, weights, path) if weights in QUANTIZED else None
    to_store = pack(model, weights, stored)
    if stored is None and to_store:
        save(path, safetensors.torch.save(to_store, metadata=layout(weights)))


def pack_stored(model: nn.Module, weights: str, path: Path, gguf: Path,
                weight_of: Callable[[str, int | None], torch.Tensor] | None = None) -> None:
    """`pack` a float32 `model` converted from the GGUF file `gguf` (its layers' weights from `weight_of`
    where given), carrying its blocks over, and store at `path` the packed layers with every other tensor
    of the model (`rest_of`): all that `load_packed` needs beside the model's config, so that a later load
    reads neither float32 weights nor the GGUF. The model then looks its embedding up in the blocks, as a
    later load does."""
    to_store = pack(model, weights, gguf=gguf, weight_of=weight_of)
    rest = rest_of(model, gguf_blocks.blocks(gguf))
    save(path, safetensors.torch.save(to_store | rest, metadata=layout(weights)))
    hold_embedding(model, {k.removeprefix(EMBEDDING): t for k, t in rest.items() if k.startswith(EMBEDDING)})


def rest_of(model: nn.Module, found: dict) -> dict[str, torch.Tensor]:
    """Every tensor of a packed `model` that its packed layers do not hold as their `KEYS`, under `REST`:
    norms, biases, the rotary frequencies (which a model built on the meta device lacks); the input
    embedding under `EMBEDDING` instead, as the GGUF's blocks (`found`) where they give it back exactly."""
    weight = model.get_input_embeddings().weight
    carried = gguf_blocks.carried_embedding(weight.detach(), found)
    own = {f"{name}.{key}" for name, module in model.named_modules()
           if isinstance(module, tuple(QUANTIZED.values())) for key in module.KEYS}
    tensors = {REST + name: tensor.detach().contiguous()
               for name, tensor in chain(model.named_parameters(), model.named_buffers())
               if name not in own and not (carried and tensor is weight)}
    return tensors | {EMBEDDING + key: tensor for key, tensor in (carried or {}).items()}


def load_packed(model: nn.Module, weights: str, path: Path) -> bool:
    """Fill `model`, built on the meta device from its config, from the file `pack_stored` wrote at `path`,
    its layers packed as `weights`. False where the file is missing, damaged, of another layout or short
    of any tensor the model has: the model is then of no use, and the caller converts again."""
    stored = read_file(path, weights)
    if stored is None:
        return False
    part = lambda prefix: {k.removeprefix(prefix): t for k, t in stored.items() if k.startswith(prefix)}  # noqa: E731
    layers = {k: t for k, t in stored.items() if not k.startswith((REST, EMBEDDING))}
    if not holds_layers(model, weights, layers) or not assign(model, part(REST)):
        return False
    pack(model, weights, layers)
    if not hold_embedding(model, part(EMBEDDING)):
        return False
    return not any(t.is_meta for t in chain(model.parameters(), model.buffers()))


def hold_embedding(model: nn.Module, blocks: dict[str, torch.Tensor]) -> bool:
    """Look `model`'s input embedding up in the GGUF blocks `blocks` (`gguf_blocks.carried_embedding`; none:
    it stays as it is) instead of a float32 table, after its layers are packed: where a layer still shares
    the table (an output head left unpacked), the table is the blocks' float32. False where the blocks do
    not hold the embedding's shape."""
    if not blocks:
        return True
    table = model.get_input_embeddings().weight
    held = gguf_blocks.embedding(blocks, *table.shape)
    if held is None:
        return False
    if sum(t is table for m in model.modules() for t in (*m._parameters.values(), *m._buffers.values())) > 1:
        return assign(model, {embedding_name(model): held.table()})
    model.set_input_embeddings(held)
    return True


def embedding_name(model: nn.Module) -> str:
    found = model.get_input_embeddings()
    return next(f"{name}.weight" for name, module in model.named_modules() if module is found)


def assign(model: nn.Module, tensors: dict[str, torch.Tensor]) -> bool:
    """Put each of `tensors` (by name) in place of the model's tensor of that name and shape, in every
    module that shares it (a tied output head); False where a name or a shape is not the model's."""
    holders: dict[int, list[tuple[dict, str]]] = {}
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for key, tensor in table.items():
                if tensor is not None:
                    holders.setdefault(id(tensor), []).append((table, key))
    for name, tensor in tensors.items():
        owner, _, key = name.rpartition(".")
        try:
            module = model.get_submodule(owner)
        except AttributeError:
            return False
        old = module._parameters.get(key, module._buffers.get(key))
        if old is None or old.shape != tensor.shape:
            return False
        new = nn.Parameter(tensor) if key in module._parameters else tensor
        for table, where in holders[id(old)]:
            table[where] = new
    return True


def layout(weights: str) -> dict[str, str]:
    """What a packed file of `weights` says of itself beside its tensors: the kernel's layout of the
    blocks, which a kernel may change while every size stays the same."""
    return {"layout": str(QUANTIZED[weights].KERNEL.LAYOUT)} if weights in KERNELS else {}


def read_stored(model: nn.Module, weights: str, path: Path) -> dict[str, torch.Tensor] | None:
    """The packed layers of `model` that `pack_cached` stored at `path`, or None unless they are whole and its own."""
    stored = read_file(path, weights)
    return stored if stored is not None and holds_layers(model, weights, stored) else None


def read_file(path: Path, weights: str) -> dict[str, torch.Tensor] | None:
    """The tensors of a packed file of `weights`, each 64-byte aligned; None where it is missing, damaged
    or laid out by another kernel."""
    try:
        stored = safetensors.torch.load_file(str(path))
        with safetensors.safe_open(str(path), "pt") as f:
            written = f.metadata() or {}
    except (OSError, SafetensorError, ValueError, RuntimeError):
        return None
    if any(written.get(key) != value for key, value in layout(weights).items()):
        return None  # the same sizes laid out otherwise, by an older kernel
    # safetensors places tensors 8 bytes apart. torch's int8 kernel on an AVX512 Xeon reads 4 or more rows
    # with aligned loads: on weights 8 bytes off a 16-byte boundary it died (segmentation fault), at 16, 32
    # or 48 it ran. So each tensor goes where torch itself would allocate it: 64-byte aligned; one at a time,
    # each replaced as it is copied, so that a load holds the file's size and one tensor more at most.
    for name, tensor in stored.items():
        if tensor.data_ptr() % 64:
            stored[name] = tensor.clone()
    return stored


def holds_layers(model: nn.Module, weights: str, stored: dict[str, torch.Tensor]) -> bool:
    """Whether `stored` are the packed tensors of every layer of `model` that `weights` packs, of their shapes."""
    kind = QUANTIZED[weights]
    expected = {name: model.get_submodule(name) for name in linears(model) if fits(weights, model.get_submodule(name))}
    if set(stored) != {f"{name}.{key}" for name in expected for key in kind.KEYS}:
        return False
    rows = kind.KERNEL.OUTPUTS if weights in KERNELS else 1  # outputs per stored row
    if any(stored[f"{name}.{kind.KEYS[0]}"].shape[0] * rows != linear.out_features for name, linear in expected.items()):
        return False
    return weights not in KERNELS or all(stored[f"{name}.kind"].numel() == 1 and kind.KERNEL.holds(
        stored[f"{name}.groups"], int(stored[f"{name}.kind"]), linear.in_features) for name, linear in expected.items())
