"""`assistant bench`'s plan: the defaults, the strategies (the engine's from its contract) and their order,
argument and data errors refused before any model loads, the records chosen, the fix task's records."""

from __future__ import annotations

import argparse

import pytest

from assistant import STRATEGIES as ENGINE_STRATEGIES
from assistant import cli
from assistant.bench import data, generators, plan, run
from assistant.cli import bench as bench_command


@pytest.fixture
def no_model(monkeypatch):
    """Bad input must be refused before any model loads."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(bench_command, "Assistant", refuse)


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    bench_command.register(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_defaults():
    args = parse()
    assert args.tasks == "code-edit,text-edit"
    assert args.strategies == "ar,hf-pld,pld,pld+h,pld+a"
    assert (args.samples, args.max_new_tokens, args.out) == (5, None, None)  # None: whole answers
    assert plan.plan(args).strategies == ["ar", "hf-pld", "pld", "pld+h", "pld+a"]


def test_ar_runs_first_even_when_not_asked():
    assert plan.plan(parse("--strategies", "pld,hf-pld,pld")).strategies == ["ar", "pld", "hf-pld"]


def test_strategies_on_other_weights_run_after_ar_and_before_the_rest():
    planned = plan.plan(parse("--strategies", "pld+h,pld+h@float32,ar@float32,hf-pld")).strategies
    assert planned == ["ar", "ar@float32", "pld+h", "pld+h@float32", "hf-pld"]  # ar@W is pld+h@W's reference


def test_drafts_that_stop_at_the_ceiling_are_a_row_of_their_own_checked_against_ar():
    planned = plan.plan(parse("--strategies", "pld+h,pld+h@long-drafts=0")).strategies
    assert planned == ["ar", "pld+h", "pld+h@long-drafts=0"]
    loads, other = [], argparse.Namespace(measured_costs=lambda: None)
    runner = generators.Runner(argparse.Namespace(loaded=argparse.Namespace(weights="gguf")), None, "smollm2-135m",
                               lambda weights, long_drafts=True: loads.append((weights, long_drafts)) or other)
    assert runner.with_weights("pld+h@long-drafts=0") == (other, "pld+h", {})
    assert loads == [("gguf", False)]  # the same weights, without long drafts
    ar = generators.Run("answer", 10, True, 1.0)
    assert run.expected("pld+h@long-drafts=0", {"ar": ar}) == "answer"  # plain decoding drafts nothing


def test_a_token_tree_of_candidates_is_a_row_of_its_own_checked_against_ar():
    planned = plan.plan(parse("--strategies", "pld+h,pld+h@tree=3")).strategies
    assert planned == ["ar", "pld+h", "pld+h@tree=3"]
    loads, other = [], argparse.Namespace(measured_costs=lambda: None)
    runner = generators.Runner(argparse.Namespace(loaded=argparse.Namespace(weights="gguf")), None, "smollm2-135m",
                               lambda weights, branches=1: loads.append((weights, branches)) or other)
    assert runner.with_weights("pld+h@tree=3") == (other, "pld+h", {})
    assert loads == [("gguf", 3)]  # the same weights, three branches
    ar = generators.Run("answer", 10, True, 1.0)
    assert run.expected("pld+h@tree=3", {"ar": ar}) == "answer"  # plain decoding drafts nothing


def test_attention_in_another_precision_is_a_row_of_its_own_checked_against_ar_in_that_precision():
    planned = plan.plan(parse("--strategies", "pld+h,pld+h@attention=float32,ar@attention=float32")).strategies
    assert planned == ["ar", "ar@attention=float32", "pld+h", "pld+h@attention=float32"]
    loads, other = [], argparse.Namespace(measured_costs=lambda: None)
    runner = generators.Runner(argparse.Namespace(loaded=argparse.Namespace(weights="gguf")), None, "smollm2-135m",
                               lambda weights, attention="auto": loads.append((weights, attention)) or other)
    assert runner.with_weights("pld+h@attention=float32") == (other, "pld+h", {})
    assert loads == [("gguf", "float32")]  # the same weights, float32 attention
    ar, ar32 = generators.Run("answer", 10, True, 1.0), generators.Run("other answer", 10, True, 1.0)
    assert run.expected("pld+h@attention=float32", {"ar": ar, "ar@attention=float32": ar32}) == "other answer"


@pytest.mark.parametrize("argv, message", [
    (("--strategies", "pld+h@attention=float16"), "with attention in another precision, such as pld+h@attention=float32"),
    (("--strategies", "pld+h@tree=1"), "or with a token tree of N candidates' drafts (N from 2 to 8)"),
    (("--strategies", "pld+h@tree=9"), "such as pld+h@tree=3"),
    (("--tasks", "poetry"), "unknown task 'poetry'"),
    (("--strategies", "pld+h@long-drafts=1"), "drafts that stop at the tuned ceiling, pld+h@long-drafts=0"),
    (("--max-draft", "64"), "--max-draft must be between 1 and 63"),
    (("--strategies", "ar,turbo"), "unknown strategy 'turbo'"),
    (("--strategies", "ar@int3"), "unknown strategy 'ar@int3'"),
    (("--strategies", "hf-pld@float32"), "or an engine strategy with other weights, such as ar@float32"),
    (("--samples", "100000"), "more than the"),
    (("--samples", "0"), "at least 1"),
    (("--max-new-tokens", "0"), "at least 1"),
    (("--max-draft", "0"), "--max-draft must be between 1 and"),
    (("--tasks", "fix", "--records", "Python/1,Python/999"), "no record 'Python/999' in the tasks fix"),
    (("--tasks", "preserve", "--records", "preserve-nosuchmodule-docstrings"), "there is no module 'nosuchmodule'"),
    (("--tasks", "preserve", "--records", "preserve-glob-poems"), "no record 'preserve-glob-poems'"),
])
def test_bad_arguments_exit_2_before_loading(no_model, capsys, argv, message):
    assert cli.main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_unreadable_data_exits_2(no_model, monkeypatch, capsys):
    def broken(task, split="eval"):
        raise data.DataError("code_edit.jsonl:3: not JSON")
    monkeypatch.setattr(data, "load", broken)
    assert cli.main(["bench"]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_records_run_just_the_records_named():
    planned = plan.plan(parse("--tasks", "fix,preserve", "--records", "preserve-timeit-type-hints,Python/1")).records
    assert [record.id for record in planned] == ["Python/1", "preserve-timeit-type-hints"]


def test_records_name_modules_held_out_of_the_preserve_set():
    planned = plan.plan(parse("--tasks", "preserve", "--records", "preserve-glob-type-hints,preserve-codeop-docstrings"))
    [held_out] = [record for record in planned.records if record.module == "glob"]
    assert held_out.id == "preserve-glob-type-hints" and held_out.test_module == "test.test_glob"
    assert held_out.instruction == "Add type hints to every function." and "def iglob(" in held_out.document


def test_samples_spread_over_every_source_of_a_task():
    records = data.load("code-edit")
    chosen = data.sample(records, 10)
    assert len({r.id for r in chosen}) == 10
    assert {r.group for r in chosen} == {r.group for r in records} and len({r.group for r in records}) == 5
    assert sorted(r.id for r in data.sample(records, len(records) + 5)) == sorted(r.id for r in records)


# --- the fix task: HumanEvalFix Python, checked by each task's own tests ---------------------------

def test_fix_task_plans_every_task_of_the_development_split():
    rows = data.read_jsonl(data.FOLDER / data.FIX_FILE)
    records = plan.plan(parse("--tasks", "fix", "--samples", str(len(rows)))).records
    assert sorted(r.id for r in records) == sorted(r["task_id"] for r in rows) and len(rows) == 45
    by_id = {r["task_id"]: r for r in rows}
    for record in records:
        row = by_id[record.id]
        assert record.task == "fix" and record.is_edit
        assert record.instruction == f"Fix bugs in {row['entry_point']}."
        assert record.document == row["prompt"] + row["buggy_solution"]  # the file as a user has it
        assert record.tests.startswith(row["test"]) and record.tests.rstrip().endswith(f"check({row['entry_point']})")
    assert data.load("fix", "calibration") == []  # nothing is tuned on it


def test_fix_task_calls_check_when_the_tests_do_not():
    row = {**data.read_jsonl(data.FOLDER / data.FIX_FILE)[0], "test": "def check(f):\n    assert f('') == []\n"}
    assert data.fix_record(row).tests.rstrip().endswith("check(separate_paren_groups)")


def test_fix_samples_beyond_the_split_exit_2(no_model, capsys):
    assert cli.main(["bench", "--tasks", "fix", "--samples", "46"]) == 2
    assert "more than the 45 fix eval records" in capsys.readouterr().err


def test_the_engine_strategies_come_from_the_contract():
    assert plan.ENGINE_STRATEGIES is ENGINE_STRATEGIES
    assert set(ENGINE_STRATEGIES) <= set(plan.STRATEGIES) and set(plan.DEFAULT_STRATEGIES) <= set(plan.STRATEGIES)
