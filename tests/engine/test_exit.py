"""A process that uses `Assistant` and never calls `close()` ends cleanly: status 0 and nothing printed,
whatever background work runs when it ends (the first start's measurement of forward costs, a warm-up
of a buffer's prompt). Before, it aborted ("terminate called without an active exception", SIGABRT)
with a thread inside torch. A real Python process each time, on a fresh cache (no costs measured yet)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cache_without_costs

from assistant.config import settings
from assistant.model import loading

ROOT = Path(__file__).resolve().parents[2]
START = "from assistant import Assistant\nassistant = Assistant()\n"
REWRITE = "assistant.rewrite_text('def add(a, b):\\n    return a - b\\n', 'fix bugs', max_new_tokens=8)\n"
WARMING = ("import threading\nassistant.measured_costs()\n"  # 70 forwards of a warm-up, one per turn
           "buffer = ''.join(f'def f{i}(x):\\n    return x + {i}\\n\\n' for i in range(150))\n"
           "threading.Thread(target=assistant.warm, args=(buffer,), daemon=True).start()\n")


@pytest.fixture
def cache(tmp_path) -> Path:
    loading.resolve(settings().model)  # converted once into this machine's cache
    return cache_without_costs(tmp_path / "cache")


@pytest.mark.parametrize("background", ["", WARMING], ids=["measuring costs", "warming a buffer"])
def test_a_process_that_never_closes_its_assistant_ends_cleanly(cache, background):
    done = subprocess.run([sys.executable, "-c", START + background + REWRITE], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=os.environ | {"PYTHONPATH": str(ROOT), "ASSISTANT_CACHE": str(cache)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
