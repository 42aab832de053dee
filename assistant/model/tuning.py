"""The tuned settings per model that the engine reads: how many heads and which ones PLD+(a)
attends with, the hidden-state layer of PLD+(h) and the most tokens the adaptive draft length
may choose.

They ship for the embedded models in the `tuned/` folder beside this module and are written to
the cache the model was loaded from by `assistant calibrate` (`bench/calibration.py`, which finds
them); a model without them runs on the defaults below.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from assistant import files
from assistant.model import loading

SHIPPED = Path(__file__).parent / "tuned"


@dataclass
class Tuned:
    draft_tokens: int = 16  # the most the adaptive draft length may choose; 16 came within 1% of the best replay
    hidden_layer: int = 0  # 0: the middle layer of the model
    head_count: int = 4
    heads: list[tuple[int, int]] = field(default_factory=list)  # (layer, head), best first


def tuned_path(loaded: loading.LoadedModel) -> Path:
    """The shipped settings of the model where they exist (or where it was loaded without a cache), else
    those calibrated into its cache."""
    key = f"{loaded.name}-{loaded.sha256[:16]}" if loaded.sha256 else loaded.name.replace("/", "--")
    shipped = SHIPPED / f"{key}.json"
    return shipped if shipped.is_file() or loaded.cache is None else loaded.cache / "tuned" / f"{key}.json"


def tuned(loaded: loading.LoadedModel) -> Tuned:
    saved = files.read_json(tuned_path(loaded))
    try:
        settings = Tuned(**saved) if isinstance(saved, dict) else Tuned()
    except TypeError:  # written by another version: the defaults serve until it is calibrated again
        settings = Tuned()
    settings.heads = [tuple(h) for h in settings.heads]
    settings.hidden_layer = settings.hidden_layer or loaded.model.config.num_hidden_layers // 2
    return settings


def save(loaded: loading.LoadedModel, settings: Tuned, path: Path | None = None) -> Path:
    path = path or tuned_path(loaded)
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomically(path, json.dumps(asdict(settings), indent=1).encode())
    return path
