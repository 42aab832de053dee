"""The model cache under faults: damaged, killed, shared, read-only. Nothing it holds is trusted
unread, nothing half-written lasts, and two processes never do the same conversion twice.

Each test has its own cache (ASSISTANT_CACHE); where a converted model is needed it is seeded
from the machine's real cache (converted once), so only the tests about converting convert.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import make_tiny_model

from assistant import files
from assistant.config import settings
from assistant.decoding import draft_length
from assistant.model import loading, tuning

ROOT = Path(__file__).resolve().parents[2]
NAME = settings().model
REAL = settings().cache  # the machine's cache, read before any test points ASSISTANT_CACHE elsewhere


@pytest.fixture(scope="module")
def converted() -> Path:
    """The real cache's converted folder of the default model (never modified by these tests)."""
    folder, _, _ = loading.resolve(NAME, REAL)
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("ASSISTANT_CACHE", str(root))
    return root


def seed(cache: Path, converted: Path, link: bool = True) -> Path:
    """Put the converted folder into `cache`: hard links when the test only reads it."""
    folder = cache / "models" / converted.name
    shutil.copytree(converted, folder, copy_function=os.link if link else shutil.copy2)
    return folder


def python(code: str, cache: Path, within: tuple[str, ...] = ()) -> subprocess.Popen:
    env = os.environ | {"PYTHONPATH": str(ROOT), "ASSISTANT_CACHE": str(cache)}
    return subprocess.Popen([*within, sys.executable, "-c", code], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_only(root: Path) -> tuple[str, ...]:
    """A command prefix under which `root` is read-only: for root (who writes anything a mode
    forbids), a read-only bind mount in a mount namespace of its own; for others, its mode."""
    if os.geteuid() != 0:
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o555)
        return ()
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare to make a read-only mount")
    return ("unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
            str(root))


RESOLVE = ("from assistant.config import settings\nfrom assistant.model import loading\n"
           f"loading.resolve({NAME!r}, settings().cache)\n")


def conversions(cache: Path) -> list[Path]:
    return sorted((cache / "models").glob(".converting-*"))


def test_a_truncated_weights_file_is_converted_again_never_loaded(cache, converted):
    """A real conversion (tens of seconds): the damaged copy is found before anything loads it."""
    folder = cache / "models" / converted.name
    folder.mkdir(parents=True)
    for part in converted.iterdir():
        if part.name != "model.safetensors":
            os.link(part, folder / part.name)
    with open(converted / "model.safetensors", "rb") as whole, open(folder / "model.safetensors", "wb") as cut:
        cut.write(whole.read(converted.joinpath("model.safetensors").stat().st_size // 2))
    assert not loading.intact(folder) and loading.intact(converted)
    loaded = loading.load(NAME, "float32", cache, "cpu")
    assert loaded.folder == folder and loading.intact(folder)
    assert (folder / "model.safetensors").stat().st_size == (converted / "model.safetensors").stat().st_size
    assert conversions(cache) == []


def test_a_conversion_killed_with_sigkill_is_cleaned_at_the_next_start(cache, converted):
    process = python(RESOLVE, cache)
    try:
        for _ in range(1200):  # until the conversion has begun (bounded: two minutes)
            if (cache / "models").is_dir() and conversions(cache):
                break
            assert process.poll() is None, process.communicate()[1]
            time.sleep(0.1)
        else:
            pytest.fail("the conversion never started")
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=60)
    assert conversions(cache)  # what the killed process left
    folder = seed(cache, converted)
    assert loading.resolve(NAME, cache)[0] == folder
    assert conversions(cache) == []


def test_a_conversion_running_in_another_process_is_left_alone(cache, converted):
    folder = seed(cache, converted)
    running = cache / "models" / ".converting-running"
    running.mkdir()
    with files.locked(cache / "models.lock"):  # as a converting process holds it
        assert loading.resolve(NAME, cache)[0] == folder
        assert running.is_dir()


def test_two_processes_converting_at_once_do_the_work_once(cache):
    """Both convert the real GGUF; the one that waited finds the other's folder and uses it."""
    code = ("import transformers\n"
            "real = transformers.AutoModelForCausalLM.from_pretrained\n"
            "def counted(*args, **kwargs):\n"
            "    print('converting', flush=True)\n"
            "    return real(*args, **kwargs)\n"
            "transformers.AutoModelForCausalLM.from_pretrained = counted\n"
            "from assistant.config import settings\n"
            "from assistant.model import loading\n"
            f"print(loading.resolve({NAME!r}, settings().cache)[0])\n")
    processes = [python(code, cache) for _ in range(2)]
    outputs = [process.communicate(timeout=600) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], [err[-2000:] for _, err in outputs]
    assert not any("GGUF tensors" in err for _, err in outputs)  # no progress bar of transformers'
    lines = [out.split() for out, _ in outputs]
    assert sum(line.count("converting") for line in lines) == 1
    assert lines[0][-1] == lines[1][-1] and loading.intact(Path(lines[0][-1]))
    assert conversions(cache) == []


def test_a_read_only_cache_serves_a_converted_model(tmp_path, converted):
    """A real read-only cache: the model loads and runs; costs it cannot save are kept in memory."""
    root = tmp_path / "read-only"
    seed(root, converted)
    process = python("from assistant.decoding import draft_length\n"
                     "from assistant import Assistant\n"
                     "a = Assistant(weights='float32')\n"
                     "costs = a.measured_costs()\n"
                     "print(draft_length.cached_costs(a.loaded) is costs)\n"
                     "print(a.rewrite_text('x = 1\\n', 'Copy the text exactly.', max_new_tokens=4).stopped)\n",
                     root, read_only(root))
    try:
        out, err = process.communicate(timeout=600)
    finally:
        for path in [root, *root.rglob("*")]:
            if path.is_dir():
                path.chmod(0o755)
    assert process.returncode == 0, err[-3000:]
    assert out.split()[0] == "True"  # measured once, then kept in memory
    assert sorted(p.name for p in root.iterdir()) == ["models"]  # nothing written, nothing tried


# --- the small files, with a tiny random model ---

def tiny_loaded(cache: Path) -> loading.LoadedModel:
    return loading.LoadedModel(make_tiny_model(), None, "tiny-test", None, Path("."), "float32", cache)


@pytest.mark.parametrize("damage", [b"{\"1\": 1.0, \"2\": ", b"[1, 2]", b"{\"1\": \"NaN\"}"])
def test_a_damaged_forward_cost_file_is_measured_again_and_rewritten_whole(cache, damage):
    loaded = tiny_loaded(cache)
    draft_length.measure_costs(loaded)
    (path,) = (cache / "costs").iterdir()
    path.write_bytes(damage)
    draft_length.MEASURED.clear()  # a new process
    assert draft_length.cached_costs(loaded) is None  # damaged: measured again, never trusted
    costs = draft_length.measure_costs(loaded)
    assert sorted(costs) == list(draft_length.COST_SIZES)
    assert draft_length.valid_costs(files.read_json(path)) == costs
    assert [p.name for p in (cache / "costs").iterdir()] == [path.name]  # no temporary file left
    assert stat.S_IMODE(path.stat().st_mode) == files.new_file_mode()


def test_a_cancelled_measurement_stops_between_forwards_and_saves_nothing(cache):
    loaded, cancel, turns = tiny_loaded(cache), threading.Event(), []

    @contextlib.contextmanager
    def turn():  # the engine's turn in its request queue; the assistant closes during the third
        turns.append(1)
        if len(turns) == 3:
            cancel.set()
        yield

    assert draft_length.measure_costs(loaded, turn, cancel) is None
    assert len(turns) == 3 and not (cache / "costs").exists() and draft_length.cached_costs(loaded) is None


def test_damaged_tuned_settings_fall_back_to_the_defaults(cache, monkeypatch):
    loaded = tiny_loaded(cache)
    path = cache / "tuned" / "tiny-test.json"
    monkeypatch.setattr(tuning, "tuned_path", lambda loaded: path)
    tuning.save(loaded, tuning.Tuned(draft_tokens=9))
    assert tuning.tuned(loaded).draft_tokens == 9
    for damage in (b"{\"draft_tokens\": 9", b"{\"unknown\": 1}", b"7"):
        path.write_bytes(damage)
        assert tuning.tuned(loaded).draft_tokens == tuning.Tuned().draft_tokens
