"""A process that uses `Assistant` and never calls `close()` ends cleanly: status 0 and nothing printed,
whatever work runs when it ends (the first start's measurement of forward costs, a warm-up of a
buffer's prompt, a rewrite streaming in another thread). Before, it aborted ("terminate called without
an active exception", SIGABRT) with a thread inside torch, freeing a tensor included. A real Python
process each time, on a fresh cache (no costs measured yet)."""

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
BUFFER = "import threading, time\nbuffer = ''.join(f'def f{i}(x):\\n    return x + {i}\\n\\n' for i in range(150))\n"
WARMING = (BUFFER + "assistant.measured_costs()\n"  # 70 forwards of a warm-up, one per turn
           "threading.Thread(target=assistant.warm, args=(buffer,), daemon=True).start()\n" + REWRITE)
STREAMING = (BUFFER + "def stream():\n    try:\n"
             "        list(assistant.rewrite(buffer, 'Add a docstring to every function.'))\n"
             "    except RuntimeError:\n        pass  # Closed, at exit\n"
             "threading.Thread(target=stream, daemon=True).start()\ntime.sleep(3)\n")


@pytest.fixture
def cache(tmp_path) -> Path:
    loading.resolve(settings().model, settings().cache)  # converted once into this machine's cache
    return cache_without_costs(tmp_path / "cache")


@pytest.mark.parametrize("script", [REWRITE, WARMING, STREAMING],
                         ids=["measuring costs", "warming a buffer", "streaming a rewrite"])
def test_a_process_that_never_closes_its_assistant_ends_cleanly(cache, script):
    done = subprocess.run([sys.executable, "-c", START + script], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=os.environ | {"PYTHONPATH": str(ROOT), "ASSISTANT_CACHE": str(cache)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
