"""The row rules of a model's forward passes: the one place the decode loop (and the step-cost
measurement) asks how many rows a forward takes and whether a row's bits depend on its neighbours.

Invariant: greedy verification is token-identical to plain decoding only if a row's logits are the
same bits whatever rows come with it. Where the kernels guarantee that for every row count
(`alike`), forwards take any number of rows; where they do not (CUDA, and oneDNN's bfloat16 on CPU),
every forward has a fixed shape (`fixed_shapes`): a step feeds `STEP_ROWS` rows, its tokens and then
copies of the last, and a prompt goes in chunks of `PROMPT_ROWS` rows that start at multiples of it.
`docs/kernels.md` ("fixed shapes where rows are not alike") has the measurements behind these rules.
"""

from __future__ import annotations

import torch
from torch import nn

FEW = 64  # the most queries that take attention's row-exact path: more than any draft plus its token
PADDED_ROWS = 32  # rows of every step of a bfloat16 model on CPU
# Rows of every decode step where shapes are fixed, by device: a draft of up to 63 (31) tokens and its
# token (the tuned ceilings are 24 and 32).
STEP_ROWS = {"cuda": 64, "cpu": PADDED_ROWS}
PROMPT_ROWS = 256  # rows of every prefill forward where shapes are fixed


def fixed_shapes(model: nn.Module) -> bool:
    """Whether the model's forwards are padded to fixed shapes."""
    return model.device.type == "cuda" or model.dtype == torch.bfloat16


def alike(model: nn.Module) -> bool:
    """Whether every product of `model` computes a row alike whatever the number of rows, a prefill's
    too: no plain linear layer is left, and its layers say so (`rows_alike`: float16's padded batches,
    gguf-q8's kernel without AMX)."""
    modules = list(model.modules())
    return not any(type(m) is nn.Linear for m in modules) and any(getattr(m, "rows_alike", False) for m in modules)


def longest_draft(model: nn.Module) -> int:
    """The most tokens one step may draft: its forward, the draft and its token, stays within the rows
    every forward of `model` computes alike, `STEP_ROWS` where shapes are fixed and `FEW` elsewhere
    (attention's row-exact path, fbgemm's probed batch sizes and our kernels' `ROWS` all end there)."""
    return (STEP_ROWS[model.device.type] if fixed_shapes(model) else FEW) - 1


def padded(count: int, rows: int) -> int:
    """`count` rounded up to a multiple of `rows`."""
    return -(-count // rows) * rows
