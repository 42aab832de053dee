"""A GGUF's model for a packed format, built one tensor at a time: no float32 copy of the whole.

transformers' GGUF loading dequantizes every tensor into a float32 model first (6.2 GB for
Qwen2.5-Coder-1.5B, 8.8 GB at the peak of its conversion; 5.1 GB so), where a packed format
(`weights.pack_stored`) keeps little of it: its linear layers carry the GGUF's blocks over, each checked
against its own float32 weight, and the rest is norms, biases and the embedding. So the model is built on
the meta device from the config transformers reads from the GGUF, its other tensors are filled from the
GGUF's, and each linear layer's float32 weight is dequantized only while that layer is packed, and of a
layer carried over only the rows its check compares (`weights`).

Invariant: every tensor is the one transformers' loading makes of the GGUF (gguf's dequantization, the
same names, Llama's query and key rows put back in order, float32), so the packed model is the one the
float32 model packs to, bit for bit. A GGUF whose tensors do not fill the model is refused (ValueError).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForCausalLM, GenerationConfig

from assistant.model import gguf_blocks
from assistant.model.weights import assign, linears

# A decoder layer's tensors other than its linear layers' weights: GGUF name -> transformers' name.
LAYER_TENSORS = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
                 **{f"attn_{p}.bias": f"self_attn.{p}_proj.bias" for p in "qkv"}}
MODEL_TENSORS = {"output_norm.weight": "model.norm.weight", gguf_blocks.EMBEDDING: "model.embed_tokens.weight"}


def built(file: Path, config) -> nn.Module:
    """The float32 model of `config` (read from the GGUF `file`, a Llama or Qwen2): every tensor but the
    linear layers' weights filled from the GGUF, those left on the meta device (`weights` gives them)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig.from_model_config(config)
    found, shapes = gguf_blocks.blocks(file), dict(model.state_dict(keep_vars=True))
    tensors = {name: float32(found, gguf, config).reshape(shapes[name].shape)
               for gguf, name in small_tensors(found, config).items() if name in shapes}
    rotary = model.model.rotary_emb  # computed, not stored: made anew off the meta device
    model.model.rotary_emb = type(rotary)(config=model.config)
    left = {name for name, t in model.state_dict(keep_vars=True).items() if t.is_meta} - set(tensors)
    if not assign(model, tensors) or left - {f"{name}.weight" for name in linears(model)}:
        raise ValueError(f"{file.name}'s tensors do not fill a {config.model_type} model of its config")
    return model.eval()


def small_tensors(found: dict, config) -> dict[str, str]:
    """GGUF name -> transformers' name of every tensor of `found` that is not a linear layer's weight."""
    names = {gguf: name for gguf, name in MODEL_TENSORS.items() if gguf in found}
    for layer in range(config.num_hidden_layers):
        names |= {f"blk.{layer}.{gguf}": f"model.layers.{layer}.{name}" for gguf, name in LAYER_TENSORS.items()
                  if f"blk.{layer}.{gguf}" in found}
    return names


def float32(found: dict, gguf: str, config, rows: int | None = None) -> torch.Tensor:
    """The GGUF tensor `gguf` of `found` as transformers reads it, [rows, values a row], or its first `rows`:
    dequantized to float32, a Llama's query and key rows put back in order."""
    kind, data = found[gguf]
    heads = gguf_blocks.permuted_heads(gguf, config)
    if not heads:
        return gguf_blocks.dequantized(data[:rows], kind)
    tensor = gguf_blocks.dequantized(data, kind)  # a head's rows interleaved: all of them
    tensor = tensor[0] if tensor.shape[0] == 1 else tensor  # a bias is one row of values
    return gguf_blocks.unpermute_rows(tensor, heads)[:rows].contiguous()


def weights(file: Path, config) -> Callable[[str, int | None], torch.Tensor]:
    """A linear layer's float32 weight [out, in] by its name, or its first rows, dequantized from the GGUF
    `file` when asked (`float32`; the tensor `gguf_blocks.held_as` names). KeyError where the GGUF does not
    hold it."""
    found = gguf_blocks.blocks(file)

    def of(name: str, rows: int | None = None) -> torch.Tensor:
        tensor = gguf_blocks.held_as(name, found, config)
        if tensor is None:
            raise KeyError(f"the GGUF holds no tensor of {name}")
        return float32(found, tensor, config, rows)
    return of
