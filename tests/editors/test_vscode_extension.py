"""The VS Code client (editors/vscode): installs, compiles with tsc and passes its node unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "editors" / "vscode"


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm (Node.js) is not installed")
def test_extension_compiles_and_unit_tests_pass():
    install = "" if (EXTENSION / "node_modules").is_dir() else "npm ci && "
    proc = subprocess.run(f"{install}npm run compile && npm test", shell=True, cwd=EXTENSION,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert (EXTENSION / "out" / "extension.js").exists()
