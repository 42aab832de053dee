"""The default model, end to end: `assistant rewrite` on Qwen2.5-Coder-1.5B with the weights `auto` picks
here, fixing a real bug, checked by running the fixed code.

With test_default_model_exit.py, the tests of the suite that load the default model (a first run converts
it once, a minute or two); every other test runs on smollm2-135m, whose skill does not matter to what
they check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from assistant.bench import sandbox
from assistant.model import weights

BUGGY = '''def sum_to(n):
    """Return the sum of the integers from 1 to n, both included."""
    total = 0
    for i in range(1, n):
        total += i
    return total
'''
CHECK = "assert sum_to(1) == 1 and sum_to(4) == 10 and sum_to(100) == 5050\n"


def test_the_default_model_fixes_a_bug_end_to_end(tmp_path):
    path = tmp_path / "sums.py"
    path.write_text(BUGGY)
    env = {k: v for k, v in os.environ.items() if k not in ("ASSISTANT_MODEL", "ASSISTANT_WEIGHTS")}
    done = subprocess.run([sys.executable, "-m", "assistant.cli", "rewrite", str(path), "-i", "Fix bugs in sum_to.",
                           "--json"], capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["model"] == "qwen2.5-coder-1.5b" and result["weights"] in weights.FORMATS
    assert result["stopped"] == "eos"
    assert sandbox.run_python(result["text"] + "\n" + CHECK).passed, result["text"]
    assert result["spans"], "nothing attributed to the file it rewrote"
