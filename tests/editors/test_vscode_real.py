"""The VS Code extension in a real VS Code: code-server (VS Code itself, served to a browser; installed
by scripts/setup-code-server) with the packaged .vsix installed, driven by Playwright in Debian's
Chromium, against the real language server and the embedded smollm2-135m.

The flow is a user's: open a Python file, select it, Ctrl+I, pick an instruction, see the streamed diff,
reject one hunk with its code lens, accept the rest with Ctrl+Enter, undo once; then change a server
setting on disk and see the server restart. A second review ends by typing in a hunk's new line and
saving: the file on disk holds the answer with the typing, never a hunk's old and new lines both. The
buffer is read back from the editor's rendered lines at each step (the file is short enough to show
whole). Which lines are a hunk's old and new ones is read from the server's own `assistant/diff`
notifications: `assistant.serverCommand` is a small tap that runs this repository's
`.venv/bin/assistant` and copies what the server writes to a log as it passes it on.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from serving import free_port
from test_vscode_extension import EXTENSION, npm

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CODE_SERVER = Path.home() / ".cache" / "editor-assistant" / "code-server-4.96.4" / "node_modules" / ".bin" / "code-server"
WAIT_MS = 900_000  # a rewrite on two shared cores, behind VS Code and Chromium: conditions are polled, never timed

pytestmark = [
    pytest.mark.skipif(not CODE_SERVER.exists(), reason=f"code-server is not installed at {CODE_SERVER} "
                                                        "(scripts/setup-code-server installs it)"),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian chromium at /usr/bin/chromium"),
]

ORIGINAL = '''def add(a, b):
    return a + b


def scale(values, factor):
    return [v * factor for v in values]


def mean(values):
    return sum(values) / len(values)
'''

TAP = '''#!{python}
"""Runs the language server, passing its output on to VS Code and copying it to a log."""
import subprocess, sys
server = subprocess.Popen([{assistant!r}, *sys.argv[1:]], stdout=subprocess.PIPE)
with open({log!r}, "ab") as log:
    while chunk := server.stdout.read1(65536):
        sys.stdout.buffer.write(chunk)
        sys.stdout.buffer.flush()
        log.write(chunk)
        log.flush()
sys.exit(server.wait())
'''

USER_SETTINGS = {
    "security.workspace.trust.enabled": False,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "editor.minimap.enabled": False,
    "editor.renderWhitespace": "none",  # whitespace dots in a selection would be read back as text
    "editor.stickyScroll.enabled": False,
}


@pytest.fixture(scope="module")
def vsix() -> Path:
    npm("npm run package")
    return EXTENSION / "editor-assistant.vsix"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vscode")
    folder = root / "project"
    (folder / ".vscode").mkdir(parents=True)
    (folder / "sample.py").write_text(ORIGINAL)
    tap = root / "assistant-tap"
    tap.write_text(TAP.format(python=sys.executable, assistant=str(ROOT / ".venv" / "bin" / "assistant"),
                              log=str(root / "server-output.log")))
    tap.chmod(0o755)
    (folder / ".vscode" / "settings.json").write_text(json.dumps({
        "assistant.serverCommand": str(tap), "assistant.model": "smollm2-135m", "assistant.weights": "float32"}))
    (root / "user-data" / "User").mkdir(parents=True)
    (root / "user-data" / "User" / "settings.json").write_text(json.dumps(USER_SETTINGS))
    return folder


def code_server_args(root: Path) -> list[str]:
    return [str(CODE_SERVER), "--auth", "none", "--disable-telemetry", "--disable-update-check",
            "--disable-workspace-trust", "--config", str(root / "config.yaml"),
            "--user-data-dir", str(root / "user-data"), "--extensions-dir", str(root / "extensions")]


@pytest.fixture(scope="module")
def vscode_url(vsix, workspace):
    root = workspace.parent
    installed = subprocess.run([*code_server_args(root), "--install-extension", str(vsix)],
                               check=False, capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    port = free_port()
    with open(root / "code-server.log", "w") as log:
        server = subprocess.Popen([*code_server_args(root), "--bind-addr", f"127.0.0.1:{port}", str(workspace)],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            while not answers(url):
                assert server.poll() is None, (root / "code-server.log").read_text()
                time.sleep(0.5)
            yield f"{url}/?folder={workspace}"
        finally:
            server.terminate()
            server.wait(timeout=60)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def page(vscode_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1500})
            page.set_default_timeout(WAIT_MS)
            page.goto(vscode_url)
            yield page
        finally:
            browser.close()


def buffer_text(page) -> str:
    """The text of the open editor as it shows it: its rendered lines in order (all of them: the file fits)."""
    return page.evaluate("""() => [...document.querySelectorAll('.editor-instance .monaco-editor .view-lines .view-line')]
        .map(line => [parseFloat(line.style.top), line.textContent.replace(/\\u00a0/g, ' ')])
        .sort((a, b) => a[0] - b[0]).map(([, text]) => text).join('\\n')""")


def wait_for_buffer(page, expected: str) -> None:
    page.wait_for_function("""(expected) => [...document.querySelectorAll('.editor-instance .monaco-editor .view-lines .view-line')]
        .map(line => [parseFloat(line.style.top), line.textContent.replace(/\\u00a0/g, ' ')])
        .sort((a, b) => a[0] - b[0]).map(([, text]) => text).join('\\n') === expected""", arg=expected, polling=500)


def server_messages(log: Path) -> list[dict]:
    data = log.read_bytes() if log.exists() else b""
    messages = []
    while (match := re.match(rb"Content-Length: (\d+)\r\n(?:[^\r\n]+\r\n)*\r\n", data)) and \
            len(data) >= match.end() + int(match.group(1)):
        end = match.end() + int(match.group(1))
        messages.append(json.loads(data[match.end():end]))
        data = data[end:]
    return messages


def diffs(log: Path) -> list[dict]:
    return [m["params"] for m in server_messages(log) if m.get("method") == "assistant/diff"]


def initialized(log: Path) -> list[dict]:
    """The server's answers to `initialize`: one per start."""
    return [m for m in server_messages(log) if isinstance(m.get("result"), dict) and "capabilities" in m["result"]]


def wait_until(condition, explain) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while not condition():
        assert time.monotonic() < deadline, explain()
        time.sleep(0.5)


def press_until_visible(page, key: str, target) -> None:
    """Press `key` until `target` shows: a key pressed before VS Code has read the extension's keybindings
    (late on a loaded machine) is lost, while pressing it again once `target` shows does nothing."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    def shown() -> bool:
        page.keyboard.press(key)
        try:
            target.wait_for(state="visible", timeout=10_000)
        except PlaywrightTimeout:
            return False
        return True

    wait_until(shown, lambda: f"{key} never showed {target}")


def wait_for_diff(log: Path, count: int, done) -> dict:
    """The first `assistant/diff` after the first `count` that satisfies `done` (polled)."""
    wait_until(lambda: any(done(d) for d in diffs(log)[count:]),
               lambda: f"no such assistant/diff notification; the server sent {diffs(log)[count:]}")
    return next(d for d in diffs(log)[count:] if done(d))


def without(text: str, *line_ranges: dict) -> str:
    lines = text.split("\n")
    dropped = {i for r in line_ranges for i in range(r["start"], r["end"])}
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped)


def test_rewrite_reviewed_hunk_by_hunk_and_undone_in_one_step(page, workspace):
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    log = workspace.parent / "server-output.log"
    page.get_by_role("treeitem", name="sample.py").dblclick()
    wait_for_buffer(page, ORIGINAL)
    page.locator(".editor-instance .monaco-editor .view-lines").click()
    page.keyboard.press("Control+A")
    expect(page.locator(".statusbar-item", has_text="selected")).to_be_visible()
    picker = page.locator(".quick-input-widget")
    press_until_visible(page, "Control+I", picker)  # activates the extension: it starts the server and model
    expect(picker.get_by_text("Make this clearer")).to_be_visible()  # a preset
    page.keyboard.type("Make this clearer")
    page.keyboard.press("Enter")

    # The review: every original line still in view (old lines marked), the answer's lines beside them.
    review = wait_for_diff(log, 0, lambda d: not d["streaming"])
    hunks = sorted(review["hunks"], key=lambda hunk: hunk["old"]["start"])
    assert len(hunks) >= 2, f"the answer needs two hunks for this test: {review}"
    shown = buffer_text(page)
    assert without(shown, *(h["new"] for h in hunks)) == ORIGINAL
    expect(page.locator(".codelens-decoration a", has_text="Accept all")).to_be_visible()
    expect(page.locator(".codelens-decoration a", has_text=re.compile(r"^Reject$")).first).to_be_visible()
    expect(page.locator(".statusbar-item", has_text="Assistant: ready")).to_be_visible()
    page.screenshot(path=str(artifact("vscode-diff.png")), clip={"x": 340, "y": 60, "width": 760, "height": 300})

    # Reject the first hunk with its code lens: its new lines go, its original lines stay.
    seen = len(diffs(log))
    first = min(page.locator(".codelens-decoration a", has_text=re.compile(r"^Reject$")).all(),
                key=lambda lens: lens.bounding_box()["y"])
    first.click()
    after_reject = wait_for_diff(log, seen, lambda d: len(d["hunks"]) == len(hunks) - 1)
    rejected = without(shown, hunks[0]["new"])
    wait_for_buffer(page, rejected)

    # Accept the rest with Ctrl+Enter (bound while a rewrite waits for review): their old lines go.
    seen = len(diffs(log))
    page.locator(".editor-instance .monaco-editor .view-lines").click()
    page.keyboard.press("Control+Enter")
    wait_for_diff(log, seen, lambda d: not d["hunks"] and not d["streaming"])
    accepted = without(rejected, *(h["old"] for h in after_reject["hunks"]))
    wait_for_buffer(page, accepted)
    assert accepted != ORIGINAL

    # Typing after the review is an undo step of its own; one more undo puts back the text from before
    # the rewrite.
    page.keyboard.press("Control+End")
    page.keyboard.type("#")
    wait_for_buffer(page, accepted + "#")
    page.keyboard.press("Control+Z")
    wait_for_buffer(page, accepted)
    page.keyboard.press("Control+Z")
    wait_for_buffer(page, ORIGINAL)

    # A server setting changed on disk restarts the server (a second `initialize`), without a reload.
    settings = workspace / ".vscode" / "settings.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "assistant.strategy": "ar"}))
    wait_until(lambda: len(initialized(log)) == 2, lambda: f"the server started {len(initialized(log))} time(s)")


def test_typing_in_a_hunk_and_saving_leave_one_version_of_each_hunk(page, workspace):
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    log = workspace.parent / "server-output.log"
    seen = len(diffs(log))
    page.locator(".editor-instance .monaco-editor .view-lines").click()
    page.keyboard.press("Control+A")
    picker = page.locator(".quick-input-widget")
    press_until_visible(page, "Control+I", picker)
    page.keyboard.type("Make this clearer")
    page.keyboard.press("Enter")
    review = wait_for_diff(log, seen, lambda d: not d["streaming"])
    hunks = sorted(review["hunks"], key=lambda hunk: hunk["old"]["start"])
    typed_in = hunks[0]
    side, other = ("new", "old") if typed_in["new"]["end"] > typed_in["new"]["start"] else ("old", "new")
    row = typed_in[side]["start"]
    shown = buffer_text(page).split("\n")

    # type at the end of the hunk's first new line (or old line, in a deletion): its other side goes
    seen = len(diffs(log))
    page.keyboard.press("Control+Home")
    for _ in range(row):
        page.keyboard.press("ArrowDown")
    page.keyboard.press("End")
    page.keyboard.type("# mine")
    shown[row] += "# mine"
    wait_for_diff(log, seen, lambda d: typed_in["index"] not in [hunk["index"] for hunk in d["hunks"]])
    wait_for_buffer(page, without("\n".join(shown), typed_in[other]))

    # a save accepts the other hunks first: the file holds the answer, with the typing
    page.keyboard.press("Control+S")
    answer = without("\n".join(shown), typed_in[other], *(hunk["old"] for hunk in hunks[1:]))
    wait_for_buffer(page, answer)
    wait_until(lambda: (workspace / "sample.py").read_text() == answer,
               lambda: f"the file holds {(workspace / 'sample.py').read_text()!r}, not {answer!r}")
    wait_until(lambda: not diffs(log)[-1]["hunks"], lambda: f"the review did not end: {diffs(log)[-1]}")


def artifact(name: str) -> Path:
    folder = ROOT / "artifacts"
    folder.mkdir(exist_ok=True)
    return folder / name

