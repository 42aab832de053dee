"""A GGUF's own blocks, read for `--weights gguf` as they are and carried over to `--weights int4`,
so the model is not quantized twice; and the input embedding kept as its blocks, in the cache and in
memory (`carried_embedding`, `BlockEmbedding`), so that a packed model holds no float32 copy of it.

The embedded models ship as 4-bit GGUFs, and converting them dequantizes to float32. Quantizing
that float32 again into int4 groups of 32 rounds every weight a second time. But Q4_0, Q4_1 and the
32-weight sub-blocks of Q4_K already are 4-bit groups of 32 with one scale and one offset:

    Q4_0  w = d (q - 8)                 scale d,       offset 0
    Q4_1  w = d q + m                   scale d,       offset m + 8 d
    Q4_K  w = d sc q - dmin mn          scale d sc,    offset 8 d sc - dmin mn   (per sub-block)

in torch's int4 layout, w = (q - 8) scale + offset. So their codes are kept as they are, and only
the scale and offset are rounded to bfloat16, which the kernel takes. Measured on four Q4_K matrices
of Qwen2.5-Coder-1.5B (query, up, gate and output projections of blocks 0, 3, 10 and 20): that
rounding moves a weight by at most 0.25% of the matrix's largest weight (mean at most 0.006%),
where quantizing the dequantized float32 again moved it by up to 3.0% (mean up to 0.09%). Other
block types (Q6_K, Q8_0, float) have no 4-bit form; their matrices are quantized from the float32
model as before: in Qwen2.5-Coder-1.5B's Q4_K_M that is half the value and down projections and
the output head (Q6_K), 29 of 197 matrices.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import Q4_K, dequantize
from torch import nn

GROUP = 32  # weights per int4 group, as in a Q4_0/Q4_1 block and a Q4_K sub-block
LAYER_TENSORS = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}


def gguf_name(linear: str) -> str | None:
    """The GGUF tensor that holds a Llama/Qwen2 linear layer named as transformers names it."""
    if linear == "lm_head":
        return "output.weight"
    parts = linear.split(".")  # model.layers.<i>.<module>.<proj>
    if len(parts) == 5 and parts[:2] == ["model", "layers"]:
        kind = LAYER_TENSORS.get(".".join(parts[3:]))
        return kind and f"blk.{parts[2]}.{kind}.weight"
    return None


EMBEDDING = "token_embd.weight"
BLOCK_TYPES = {kind.value for kind, (block, _) in GGML_QUANT_SIZES.items() if block > 1}  # quantized, not float


class BlockEmbedding(nn.Module):
    """An input embedding held as a GGUF's blocks: `rows` [tokens, bytes a row] uint8 of block type `kind`,
    each token's row dequantized to float32 by gguf's own dequantization when it is looked up.

    Invariant: a row looked up is bit for bit the float32 row the GGUF's conversion made of it
    (`carried_embedding` compares the whole table before the blocks are kept), so no forward changes. A step's
    lookup took 50 us for one token and 340 us for 64 (Qwen2.5-Coder-1.5B, 2-core Zen 4 EPYC), against
    forwards of 40 to 500 ms."""

    def __init__(self, rows: torch.Tensor, kind: GGMLQuantizationType, features: int):
        super().__init__()
        self.register_buffer("rows", rows)
        self.kind, self.features = kind, features

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        picked = self.rows[ids.reshape(-1).to(self.rows.device)].numpy()
        return dequantized(picked, self.kind).view(*ids.shape, self.features).to(ids.device)

    def table(self) -> torch.Tensor:
        """The whole float32 embedding [tokens, features]."""
        return dequantized(self.rows.numpy(), self.kind)


def carried_embedding(weight: torch.Tensor, found: dict) -> dict[str, torch.Tensor] | None:
    """The float32 input embedding `weight` (dequantized from `found`, a GGUF's `blocks`) as the GGUF's own
    blocks, {"rows", "kind"}, where they give `weight` back bit for bit (`embedding`); None where it stays
    float32. Qwen2.5-Coder-1.5B's Q4_K embedding is 131 MB of blocks against 933 MB of float32."""
    if EMBEDDING not in found or weight.dtype != torch.float32:
        return None
    kind, data = found[EMBEDDING]
    tensors = {"rows": torch.from_numpy(np.array(data)), "kind": torch.tensor([kind.value])}
    held = embedding(tensors, *weight.shape)
    try:
        return tensors if held is not None and torch.equal(held.table(), weight) else None
    except NotImplementedError:  # a block type gguf does not dequantize
        return None


def dequantized(data: np.ndarray, kind: GGMLQuantizationType, part: int = 4096) -> torch.Tensor:
    """gguf's float32 of `data` [rows, bytes a row] of block type `kind`, [rows, values a row], `part` rows at a
    time: gguf's dequantization of a whole 151,936-row matrix of the 1.5B at once held 4 GB of intermediates."""
    block, size = GGML_QUANT_SIZES[kind]
    out = torch.empty(data.shape[0], data.shape[1] // size * block)
    for start in range(0, data.shape[0], part):
        piece = dequantize(np.asarray(data[start:start + part]), kind)
        out[start:start + part] = torch.from_numpy(np.require(piece, requirements="W"))  # a float type's: the file's
    return out


def embedding(tensors: dict[str, torch.Tensor], rows: int, features: int) -> BlockEmbedding | None:
    """The embedding of `rows` tokens and `features` that `carried_embedding`'s blocks hold; None where they
    do not hold that shape in blocks gguf dequantizes."""
    blocks, kind = tensors.get("rows"), tensors.get("kind")
    if blocks is None or kind is None or kind.numel() != 1 or int(kind) not in BLOCK_TYPES:
        return None
    kind = GGMLQuantizationType(int(kind))
    block, size = GGML_QUANT_SIZES[kind]
    if blocks.dtype != torch.uint8 or features % block or tuple(blocks.shape) != (rows, features // block * size):
        return None
    return BlockEmbedding(blocks, kind, features)


def layer_blocks(name: str, found: dict, config) -> tuple[GGMLQuantizationType, torch.Tensor] | None:
    """(block type, rows [out, bytes per row] uint8 in transformers' row order) of the linear layer
    `name` among `blocks(...)`, or None where the GGUF does not hold it (`held_as`); Llama's query and key
    rows are put back in order (`unpermute_rows`)."""
    tensor = held_as(name, found, config)
    if tensor is None:
        return None
    kind, data = found[tensor]
    rows = torch.from_numpy(np.array(data))
    if heads := permuted_heads(tensor, config):
        rows = unpermute_rows(rows, heads).contiguous()
    return kind, rows


def held_as(name: str, found: dict, config) -> str | None:
    """The tensor of `found` that holds transformers' linear layer `name` (a tied output head: the embedding);
    None where none does."""
    tensor = gguf_name(name)
    if tensor not in found and name == "lm_head" and getattr(config, "tie_word_embeddings", False):
        tensor = EMBEDDING
    return tensor if tensor in found else None


def permuted_heads(tensor: str, config) -> int | None:
    """The heads whose rows llama.cpp's converter interleaved in the GGUF tensor `tensor` (a Llama's query
    and key, weight or bias: `unpermute_rows` puts them back), or None where it did not."""
    if config.model_type != "llama":
        return None
    return (config.num_attention_heads if ".attn_q." in tensor else
            config.num_key_value_heads if ".attn_k." in tensor else None)


def blocks(path: Path) -> dict[str, tuple[GGMLQuantizationType, np.ndarray]]:
    """name -> (block type, bytes [rows, bytes per row]) of every tensor in the GGUF, memory-mapped.

    The header is walked here rather than by gguf's GGUFReader, which builds every metadata field
    first: the tokenizer's 300,000 strings of Qwen2.5-Coder-1.5B took it minutes; this skips them."""
    data = np.memmap(path, dtype=np.uint8, mode="r")
    magic, version, tensors, fields = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF" or version not in (2, 3):
        raise ValueError(f"{path} is not a GGUF file of version 2 or 3")
    at, alignment = 24, 32
    for _ in range(fields):
        key, at = string(data, at)
        (kind,), at = struct.unpack_from("<I", data, at), at + 4
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", data, at)
        at = skip_value(data, at, kind)
    infos = []
    for _ in range(tensors):
        name, at = string(data, at)
        (dims,) = struct.unpack_from("<I", data, at)
        shape = struct.unpack_from(f"<{dims}Q", data, at + 4)
        kind, offset = struct.unpack_from("<IQ", data, at + 4 + 8 * dims)
        infos.append((name, shape, GGMLQuantizationType(kind), offset))
        at += 4 + 8 * dims + 12
    start = -(-at // alignment) * alignment
    found = {}
    for name, shape, kind, offset in infos:
        block, size = GGML_QUANT_SIZES[kind]
        rows, row_bytes = int(np.prod(shape[1:], dtype=np.int64)), shape[0] // block * size
        found[name] = kind, data[start + offset:start + offset + rows * row_bytes].reshape(rows, row_bytes)
    return found


SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type: bytes
STRING, ARRAY = 8, 9


def string(data: np.ndarray, at: int) -> tuple[str, int]:
    (length,) = struct.unpack_from("<Q", data, at)
    return bytes(data[at + 8:at + 8 + length]).decode("utf-8", "replace"), at + 8 + length


def skip_value(data: np.ndarray, at: int, kind: int) -> int:
    """The offset after a metadata value of GGUF type `kind` that starts at `at`."""
    if kind == STRING:
        return at + 8 + struct.unpack_from("<Q", data, at)[0]
    if kind == ARRAY:
        item, count = struct.unpack_from("<IQ", data, at)
        at += 12
        if item in SCALARS:
            return at + count * SCALARS[item]
        for _ in range(count):
            at = skip_value(data, at, item)
        return at
    return at + SCALARS[kind]


def int4_codes(kind: GGMLQuantizationType, data: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(codes [out, in] int32 in 0..15, scale [out, in / 32], offset [out, in / 32], float32) such that
    w = (code - 8) scale + offset is the GGUF's own dequantization; None for other block types."""
    rows = data.shape[0]
    if kind in (GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q4_1):
        header = 2 if kind == GGMLQuantizationType.Q4_0 else 4
        raw = data.reshape(rows, -1, header + 16)
        d = raw[..., :2].copy().view(np.float16)[..., 0].astype(np.float32)
        m = raw[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32) if header == 4 else None
        codes = nibbles(raw[..., header:], halves=1)
        offset = np.zeros_like(d) if m is None else m + 8 * d
        scale = d
    elif kind == GGMLQuantizationType.Q4_K:
        raw = data.reshape(-1, 144)  # one 256-weight super-block per row: d, dmin, 12 bytes of scales, 128 of codes
        d = raw[:, :2].copy().view(np.float16).astype(np.float32)
        dmin = raw[:, 2:4].copy().view(np.float16).astype(np.float32)
        sc, mn = Q4_K.get_scale_min(raw[:, 4:16])
        scale, offset = d * sc, 8 * d * sc - dmin * mn  # [super-blocks, 8]
        codes = nibbles(raw[:, 16:].reshape(-1, 4, 32), halves=2)  # each 32 bytes: two sub-blocks
        scale, offset = scale.reshape(rows, -1), offset.reshape(rows, -1)
    else:
        return None
    return (torch.from_numpy(codes.reshape(rows, -1).astype(np.int32)), torch.from_numpy(np.ascontiguousarray(scale)),
            torch.from_numpy(np.ascontiguousarray(offset)))


def nibbles(packed: np.ndarray, halves: int) -> np.ndarray:
    """The 4-bit codes of bytes [..., 16 or 32] laid out as GGUF does: a group's low nibbles hold its first
    half and the high nibbles its second (Q4_0/Q4_1, halves=1), or the low nibbles one sub-block and the
    high nibbles the next (Q4_K, halves=2); returns [..., 32 * halves]."""
    low, high = packed & 0x0F, packed >> 4
    return np.concatenate([low, high], axis=-1) if halves == 1 else np.stack([low, high], axis=-2)


def unpermute_rows(t: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo the row order llama.cpp's converter gives Llama's query and key matrices (rotary halves
    interleaved), as transformers does when it reads them."""
    return t.reshape(heads, t.shape[0] // heads // 2, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape)
