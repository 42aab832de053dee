"""The VS Code client (editors/vscode): installs, compiles with tsc, passes its node unit tests, and
packages into a .vsix with @vscode/vsce that activates on its commands only."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "editors" / "vscode"

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="npm (Node.js) is not installed")


def npm(command: str) -> None:
    install = "" if (EXTENSION / "node_modules").is_dir() else "npm ci && "
    proc = subprocess.run(f"{install}{command}", shell=True, check=False, cwd=EXTENSION, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"


def test_extension_compiles_and_unit_tests_pass():
    npm("npm run compile && npm test")
    assert (EXTENSION / "out" / "extension.js").exists()


def test_vsix_builds_with_license_and_lazy_activation():
    npm("npm run package")
    with zipfile.ZipFile(EXTENSION / "editor-assistant.vsix") as vsix:
        names = set(vsix.namelist())
        manifest = json.loads(vsix.read("extension/package.json"))
    assert {"extension/out/extension.js", "extension/LICENSE.txt"} <= names
    assert not any(name.startswith("extension/src/") for name in names)
    assert manifest["license"] == "Apache-2.0" and manifest["repository"]
    assert manifest["activationEvents"] and all(event.startswith("onCommand:") for event in manifest["activationEvents"])
