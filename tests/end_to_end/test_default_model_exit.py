"""The default model, Qwen2.5-Coder-1.5B with the weights `auto` picks here, in a script that never closes
its Assistant: `Assistant()`, one short rewrite, the end of the script. On a fresh cache its forward costs
are being measured in the background when the script ends; the process exits 0 and prints nothing (it
aborted with SIGABRT before). Run as test_default_model.py runs the default model: the suite's
ASSISTANT_MODEL and ASSISTANT_WEIGHTS left out of the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import cache_without_costs

from assistant.config import DEFAULT_MODEL, settings
from assistant.model import loading

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ("from assistant import Assistant\nassistant = Assistant()\n"
          "assistant.rewrite_text('def add(a, b):\\n    return a - b\\n', 'fix bugs', max_new_tokens=4)\n")


def test_a_script_on_the_default_model_that_never_closes_ends_cleanly(tmp_path):
    loading.load(DEFAULT_MODEL, "auto", settings().cache, "cpu")  # converted once into this machine's cache
    cache = cache_without_costs(tmp_path / "cache")
    env = {k: v for k, v in os.environ.items() if k not in ("ASSISTANT_MODEL", "ASSISTANT_WEIGHTS")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env=env | {"PYTHONPATH": str(ROOT), "ASSISTANT_CACHE": str(cache)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
