"""Fixtures shared by the checks' tests: CPython's own `colorsys.py`, and the edits a small model made to it."""

from __future__ import annotations

import colorsys
import re
from pathlib import Path

TYPE_HINTS = "Add type hints to every function."
SIGNATURES = {"rgb_to_yiq": "r: float, g: float, b: float", "yiq_to_rgb": "y: float, i: float, q: float",
              "rgb_to_hls": "r: float, g: float, b: float", "hls_to_rgb": "h: float, l: float, s: float",
              "_v": "m1: float, m2: float, hue: float", "rgb_to_hsv": "r: float, g: float, b: float",
              "hsv_to_rgb": "h: float, s: float, v: float"}


def colorsys_source() -> str:
    """The standard library's colorsys.py, as this interpreter ships it."""
    return Path(colorsys.__file__).read_text(encoding="utf-8")


def annotate(source: str, triple: str = "Tuple[float, float, float]") -> str:
    """colorsys with every function's arguments and result annotated, as the model writes them."""
    def signature(match: re.Match[str]) -> str:
        name = match.group(1)
        result = "float" if name == "_v" else triple
        return f"def {name}({SIGNATURES[name]}) -> {result}:"

    return re.sub(r"def (\w+)\([^)]*\):", signature, source)


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)
