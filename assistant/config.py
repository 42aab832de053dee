"""The settings a user gives through the environment, read here and nowhere else.

Every other module takes its settings as arguments or asks `settings()`; none reads the environment
itself. `settings()` reads the variables once, on first use (a test that sets one calls
`settings.cache_clear()`).

    ASSISTANT_MODEL            the model of every command (default: qwen2.5-coder-1.5b)
    ASSISTANT_WEIGHTS          the weight format (default: auto, measured once per machine)
    ASSISTANT_CACHE            converted models, packed weights, kernels, costs (default: ~/.cache/assistant)
    ASSISTANT_PREFIX_CACHE_MB  memory kept for reusing prompt prefixes (default: 512; 0: none)
    ASSISTANT_ENGINE           an OpenAI-compatible server's URL that the doors send their requests to
                               instead of loading a model (default: none, the model loads in-process)
    ASSISTANT_API_KEY          the key of `assistant serve`, and the one the doors send to ASSISTANT_ENGINE
    CXX                        the C++ compiler that builds the kernels (default: g++)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "qwen2.5-coder-1.5b"


@dataclass(frozen=True)
class Settings:
    model: str = DEFAULT_MODEL
    weights: str = "auto"
    cache: Path = Path.home() / ".cache" / "assistant"
    prefix_cache_mb: int = 512
    compiler: str | None = None  # None: g++ (or c++) from PATH
    engine: str | None = None  # a server's URL; None: the model runs in-process
    api_key: str | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Settings:
        defaults = cls()
        return cls(model=environ.get("ASSISTANT_MODEL") or defaults.model,
                   weights=environ.get("ASSISTANT_WEIGHTS") or defaults.weights,
                   cache=Path(environ.get("ASSISTANT_CACHE") or defaults.cache),
                   prefix_cache_mb=int(environ.get("ASSISTANT_PREFIX_CACHE_MB") or defaults.prefix_cache_mb),
                   compiler=environ.get("CXX") or None, engine=environ.get("ASSISTANT_ENGINE") or None,
                   api_key=environ.get("ASSISTANT_API_KEY") or None)


@functools.cache
def settings() -> Settings:
    return Settings.from_environment()
