"""`assistant bench`'s report: the summary pooled per task and strategy, the tables' columns, and the
edit-quality figures (fix rate, pass@1, kept, done, useful, broken, flagged, no change)."""

from __future__ import annotations

import pytest
from rich.console import Console

from assistant.bench import report


def fake_row(strategy: str, record: str, tokens: int, seconds: float, first: float | None, **extra) -> dict:
    return {"task": "fix", "id": record, "strategy": strategy, "new_tokens": tokens, "seconds": seconds,
            "steps": None, "first_token_seconds": first, "exact_match": True, "complete": True, "max_rss_mb": 1.0,
            **extra}


def test_summary_reports_the_fix_rate_and_the_speed_against_llama_cpp():
    rows = [fake_row("ar", "a", 10, 2.0, 0.5, fixed=True), fake_row("pld+h", "a", 10, 1.0, 0.5, fixed=True),
            fake_row("llama-cpp", "a", 10, 4.0, 1.0, fixed=False),
            fake_row("ar", "b", 10, 2.0, 0.5, fixed=False), fake_row("pld+h", "b", 10, 1.0, 0.5, fixed=True)]
    summary = {s["strategy"]: s for s in report.summarize(rows, ["fix"], ["ar", "pld+h", "llama-cpp"])}
    assert (summary["ar"]["fixed"], summary["ar"]["fix_tried"], summary["ar"]["fix_rate"]) == (1, 2, 0.5)
    assert summary["pld+h"]["fix_rate"] == 1.0 and summary["llama-cpp"]["fix_rate"] == 0.0
    # Against llama.cpp on the one record it ran: 10 tokens in 1 s against 10 in 4 s; after the first
    # token 9 in 0.5 s against 9 in 3 s.
    assert summary["pld+h"]["vs_llama_cpp"] == pytest.approx(4.0)
    assert summary["pld+h"]["vs_llama_cpp_decode"] == pytest.approx(6.0)
    assert summary["llama-cpp"]["vs_llama_cpp"] == pytest.approx(1.0)
    table = render(report.table(list(summary.values()), {}))
    assert "fix rate" in table and "50% (1/2)" in table and "vs llama.cpp" in table and "4.00x" in table


def test_table_leaves_out_columns_nothing_measured():
    summary = report.summarize([fake_row("ar", "a", 10, 2.0, 0.5)], ["fix"], ["ar"])
    assert summary[0]["fix_rate"] is None and summary[0]["vs_llama_cpp"] is None
    table = render(report.table(summary, {}))
    assert "fix rate" not in table and "llama.cpp" not in table


def test_an_edit_made_in_passes_is_timed_on_its_answers_tokens():
    """Passes over definitions make fewer tokens than their answer holds: "answer tok/s" compares the edits."""
    rows = [fake_row("pld+h", "a", 300, 10.0, 1.0, answer_tokens=1200),
            fake_row("pld+h@one-pass", "a", 1000, 10.0, 1.0, answer_tokens=1000)]
    summary = {s["strategy"]: s for s in report.summarize(rows, ["fix"], ["pld+h", "pld+h@one-pass"])}
    assert summary["pld+h"]["answer_tokens_per_second"] == 120.0 and summary["pld+h"]["tokens_per_second"] == 30.0
    assert "answer tok/s" in render(report.table(list(summary.values()), {}))
    assert report.summarize([fake_row("ar", "a", 10, 2.0, 0.5)], ["fix"], ["ar"])[0]["answer_tokens_per_second"] is None


def render(table) -> str:
    console = Console(width=400, record=True)
    console.print(table)
    return console.export_text()
