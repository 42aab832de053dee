"""The settings a user gives through the environment, read here and nowhere else.

No other module reads the environment. `settings()` is asked by the engine (`Assistant`, which passes
the model, weights and cache folder down to the model layer), by the doors and tools for their
options' defaults (cli/options.py, cli/serve.py, bench/), and by kernels/build.py (see there why);
the model and decoding layers take what they need as arguments. `settings()` reads the variables
once, on first use (a test that sets one calls `settings.cache_clear()`).

    ASSISTANT_MODEL            the model of every command (default: qwen2.5-coder-1.5b)
    ASSISTANT_WEIGHTS          the weight format (default: auto, measured once per machine)
    ASSISTANT_ATTENTION        the precision of attention's products: auto (bfloat16 where the CPU has
                               AVX512-BF16, unless the weights are float32; else float32), float32 or bfloat16
    ASSISTANT_CACHE            converted models, packed weights, kernels, costs (default: ~/.cache/assistant)
    ASSISTANT_PREFIX_CACHE_MB  memory kept for reusing prompt prefixes (default: 512; 0: none)
    ASSISTANT_ENGINE           an OpenAI-compatible server's URL that the doors send their requests to
                               instead of loading a model (default: none, the model loads in-process)
    ASSISTANT_API_KEY          the key of `assistant serve`, and the one the doors send to ASSISTANT_ENGINE
    CXX                        the C++ compiler that builds the kernels (default: g++)
    OMP_WAIT_POLICY            how OpenMP's idle threads wait (default here: PASSIVE, unless it or
    GOMP_SPINCOUNT             GOMP_SPINCOUNT is set; see `wait_politely`)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = "qwen2.5-coder-1.5b"


@dataclass(frozen=True)
class Settings:
    model: str = DEFAULT_MODEL
    weights: str = "auto"
    attention: str = "auto"
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
                   attention=environ.get("ASSISTANT_ATTENTION") or defaults.attention,
                   cache=Path(environ.get("ASSISTANT_CACHE") or defaults.cache),
                   prefix_cache_mb=int(environ.get("ASSISTANT_PREFIX_CACHE_MB") or defaults.prefix_cache_mb),
                   compiler=environ.get("CXX") or None, engine=environ.get("ASSISTANT_ENGINE") or None,
                   api_key=environ.get("ASSISTANT_API_KEY") or None)


@functools.cache
def settings() -> Settings:
    return Settings.from_environment()


WAITING = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")  # libgomp's, read once when torch first loads it


def wait_politely(environ: MutableMapping[str, str] = os.environ) -> None:
    """Have OpenMP's threads sleep when they wait, unless the user chose how they wait. By default
    libgomp spins a few milliseconds at the end of every parallel region for the threads that are
    late; when another process holds a core, the late thread is the one it preempted, so each of the
    hundreds of regions of a token waits out a time slice, and a rewrite beside one busy process
    takes many times its share of the machine. The kernels' own regions run on the same runtime.
    Called by `assistant/__init__.py` before anything imports torch; it changes nothing in a process
    that loaded torch first."""
    if not any(name in environ for name in WAITING):
        environ["OMP_WAIT_POLICY"] = "PASSIVE"


def thread_waiting(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """How OpenMP's threads wait in this process, as its variables say (for the benchmark's record)."""
    return {name: environ[name] for name in WAITING if name in environ}
