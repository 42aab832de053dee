"""A busy machine: OpenMP's threads wait by sleeping (chosen before torch loads, unless the user chose),
`assistant bench --busy` measures each run again beside spinning processes that never outlive it, and
the engine's answers under load are bit for bit its answers on a quiet machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assistant import cli
from assistant.bench import busy, data

# What libgomp read when torch loaded it, as it prints it (OMP_DISPLAY_ENV): how many turns a waiting
# thread spins before it sleeps (0: it sleeps at once, OMP_WAIT_POLICY=PASSIVE; unset: 300,000).
SHOW = "import assistant, torch; torch.ones(4096).sum()"


def omp_settings(code: str, **environ: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", code], env={**clean, "OMP_DISPLAY_ENV": "VERBOSE", **environ},
                          check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_openmps_threads_sleep_when_they_wait():
    """Spinning threads wait out the time slice of a thread that another process preempted, at every
    parallel region's end."""
    assert "GOMP_SPINCOUNT = '0'" in omp_settings(SHOW)


@pytest.mark.parametrize("variable, value, shown", [("OMP_WAIT_POLICY", "ACTIVE", "GOMP_SPINCOUNT = '30000000000'"),
                                                    ("GOMP_SPINCOUNT", "300000", "GOMP_SPINCOUNT = '300000'")])
def test_a_users_choice_of_waiting_is_kept(variable, value, shown):
    assert shown in omp_settings(SHOW, **{variable: value})


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_spinners_run_inside_and_are_gone_after_whatever_ends_it():
    with pytest.raises(KeyboardInterrupt), busy.spinning(2) as spinners:
        assert len(spinners) == 2 and all(alive(s.pid) for s in spinners)
        raise KeyboardInterrupt
    assert [s.returncode for s in spinners] == [-signal.SIGKILL] * 2


def test_a_spinner_whose_parent_was_killed_stops_by_itself():
    code = ("import time\nfrom assistant.bench import busy\n"
            "with busy.spinning(1) as spinners:\n    print(spinners[0].pid, flush=True)\n    time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    spinner = int(parent.stdout.readline())
    assert alive(spinner)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 60  # a liveness bound: it checks every few million turns
    while alive(spinner):
        assert time.monotonic() < deadline, "the spinner outlived its parent"
        time.sleep(0.1)


def test_a_busy_run_measures_each_run_again_beside_spinners_and_gets_the_same_text(monkeypatch, tmp_path):
    shortest = min(data.load("text-edit"), key=lambda r: len(r.document) + len(r.instruction))
    monkeypatch.setattr(data, "load", lambda task, split="eval": [shortest])  # keep the prompt small
    out = tmp_path / "out"
    assert cli.main(["bench", "--model", "smollm2-135m", "--weights", "float32", "--samples", "1", "--max-new-tokens", "8",
                     "--tasks", "text-edit", "--strategies", "ar,pld", "--busy", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [(r["strategy"], r.get("busy")) for r in rows] == [("ar", None), ("ar", 1), ("pld", None), ("pld", 1),
                                                              ("prefix-reuse", None)]
    assert all(r["same_as_quiet"] and r["exact_match"] for r in rows if r.get("busy"))
    assert all(r["busy_over_quiet"] > 0 for r in rows if r.get("busy"))  # no timing claims
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["strategy"], s["records"], s["same_as_quiet"]) for s in summary["busy"]] == [("ar", 1, 1.0), ("pld", 1, 1.0)]
    assert [s["strategy"] for s in summary["results"]] == ["ar", "pld"]  # the quiet runs alone
    assert summary["environment"]["busy"] == 1
    assert summary["environment"]["thread_waiting"] == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_busy_must_not_be_negative(capsys):
    assert cli.main(["bench", "--busy", "-1"]) == 2
    assert "--busy must be 0 or more" in capsys.readouterr().err
