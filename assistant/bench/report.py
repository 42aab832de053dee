"""What `assistant bench` reports: the rows a run measured, summarized per task and strategy, drawn as
tables and a chart, and written to `summary.json`.

Speedup is reported both as Spec-Bench does (the tokens/s ratio per record, averaged) and as the ratio
of total tokens over total time, both with the prefill included; "after 1st token" is the ratio without
it, which is where drafting acts. For `preserve`, "answer tok/s" counts the answer's tokens instead of those
the model made: an edit made definition by definition makes the docstrings and signatures, not the text
around them, so it is the speed of the edit over the same module. Edit quality beside the speed: the fix rate (`fix`), pass@1 with each
kind of instruction (`canitedit`), and for `preserve` the edits whose tests kept passing (kept), the mean
share of what the instruction asked that the answer did (done, `done.py`), the edits kept and at least
`USEFUL_DONE` done (useful), the broken ones and those of them the engine flagged; for every edit, how many
answers made no change (`checks.change_kind`: none, or only layout or comments). The busy runs (`--busy`)
are summarized with the same pooling as the quiet ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from matplotlib.figure import Figure
from rich.table import Table

from assistant.bench import canitedit, step_costs
from assistant.bench.plan import LLAMA_CPP
from assistant.checks.change import EDIT

PREFIX_REUSE = "prefix-reuse"  # rows of the cold/warm time-to-first-token measurement
USEFUL_DONE = 0.8  # the share of what was asked an edit must do to be useful (its tests passing too)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def relative(rows: list[dict], mine: list[dict], baseline: str) -> tuple[float | None, float | None]:
    """Tokens/s of `mine` over the `baseline` strategy's on the records both ran (also when a run was cut
    short), with the prefill and without it."""
    theirs = {r["id"]: r for r in rows if r["task"] == mine[0]["task"] and r["strategy"] == baseline}
    both = [r for r in mine if r["id"] in theirs]
    base = [theirs[r["id"]] for r in both]
    return ratio(ratio(*totals(both)), ratio(*totals(base))), ratio(decode_speed(both), decode_speed(base))


def groups(rows: list[dict], tasks: list[str], strategies: list[str]) -> Iterator[tuple[str, str, list[dict]]]:
    """(task, strategy, its rows) for each task and strategy with rows, in the plan's order."""
    for task in tasks:
        for strategy in strategies:
            mine = [r for r in rows if r["task"] == task and r["strategy"] == strategy]
            if mine:
                yield task, strategy, mine


def summarize(rows: list[dict], tasks: list[str], strategies: list[str]) -> list[dict]:
    """One entry per task and strategy measured, pooled over its records."""
    summary = []
    for task, strategy, mine in groups(rows, tasks, strategies):
        tokens, seconds = totals(mine)
        speedups = [r["speedup"] for r in mine if r.get("speedup") is not None]
        steps = [r["steps"] for r in mine if r["steps"] is not None]
        first = [r["first_token_seconds"] for r in mine if r["first_token_seconds"] is not None]
        compared = [r for r in mine if r["exact_match"] is not None]
        speedup_total, decode_speedup = relative(rows, mine, "ar")
        vs_llama_cpp, vs_llama_cpp_decode = relative(rows, mine, LLAMA_CPP)
        summary.append({
            "task": task, "strategy": strategy, "records": len(mine), "new_tokens": tokens,
            "seconds": round(seconds, 3), "tokens_per_second": ratio(tokens, seconds),
            "answer_tokens_per_second": ratio(sum(r["answer_tokens"] for r in mine), seconds)
            if all("answer_tokens" in r for r in mine) else None,
            "speedup_mean": sum(speedups) / len(speedups) if speedups else None,
            "speedup_total": speedup_total, "decode_speedup": decode_speedup,
            "vs_llama_cpp": vs_llama_cpp, "vs_llama_cpp_decode": vs_llama_cpp_decode,
            "mean_accepted": ratio(tokens, sum(steps)) if len(steps) == len(mine) else None,
            "exact_match": ratio(sum(r["exact_match"] for r in compared), len(compared)),
            "complete": ratio(sum(r["complete"] for r in mine), len(mine)),
            "first_token_seconds": sum(first) / len(first) if first else None,
            "max_rss_mb": max(r["max_rss_mb"] for r in mine),
            "cuda_peak_mb": max((r["cuda_peak_mb"] for r in mine if "cuda_peak_mb" in r), default=None),
            **summarize_attribution(mine), **summarize_tests(mine), **summarize_checks(mine),
        })
    return summary


def summarize_attribution(mine: list[dict]) -> dict:
    """Attribution coverage and precision pooled over the rows that measured it."""
    measured = [r["attribution"] for r in mine if "attribution" in r]
    pooled = {k: sum(a[k] for a in measured) for k in ("kept", "kept_attributed", "attributed", "correct")}
    return {"attribution_coverage": ratio(pooled["kept_attributed"], pooled["kept"]) if measured else None,
            "attribution_precision": ratio(pooled["correct"], pooled["attributed"]) if measured else None}


def summarize_tests(mine: list[dict]) -> dict:
    """The fix rate (`fix`), pass@1 with each kind of instruction (`canitedit`), and the answers that made
    no change (`change` other than an edit) among the edits."""
    fixed = [r["fixed"] for r in mine if "fixed" in r]
    passed = {kind: [r["passed"] for r in mine if r.get("instruction_kind") == kind]
              for kind in canitedit.INSTRUCTIONS}
    changes = [r["change"] for r in mine if r.get("change") is not None]
    return {"fixed": sum(fixed) if fixed else None, "fix_tried": len(fixed) or None,
            "fix_rate": ratio(sum(fixed), len(fixed)),
            **{f"passed_{kind}": sum(runs) if runs else None for kind, runs in passed.items()},
            **{f"tried_{kind}": len(runs) or None for kind, runs in passed.items()},
            **{f"pass_at_1_{kind}": ratio(sum(runs), len(runs)) for kind, runs in passed.items()},
            "unchanged": sum(change != EDIT for change in changes) if changes else None,
            "edits": len(changes) or None,
            "changes": {kind: changes.count(kind) for kind in dict.fromkeys(changes)} or None}


def summarize_checks(mine: list[dict]) -> dict:
    """The preserve task's edits kept passing, done (the mean share of what was asked), useful (kept and at
    least USEFUL_DONE done, or kept with nothing to do), broken, and broken but flagged (and good ones
    flagged: false alarms, unfinished ones among them); the answers repaired, and the time repair added to
    the answers it touched (repair passes against the rest of their time) and the check to clean ones."""
    tested = [r for r in mine if "kept_passing" in r]
    broken = [r for r in tested if not r["kept_passing"]]
    measured = [r["done"] for r in tested if r.get("done") is not None]
    checked_rows = [r for r in mine if "checks" in r]
    touched = [r for r in checked_rows if r["repairs"]]
    clean = [r for r in checked_rows if not r["repairs"] and not r["problems"]]

    def share(rows: list[dict], key: str) -> float | None:
        return ratio(sum(r[key] for r in rows), sum(r["first_pass_seconds"] + r["check_seconds"] for r in rows))
    return {"kept": len(tested) - len(broken) if tested else None, "broken": len(broken) if tested else None,
            "done": ratio(sum(measured), len(measured)), "done_measured": len(measured) if tested else None,
            "useful": sum(r.get("useful", False) for r in tested) if tested else None,
            "flagged": sum(r["flagged"] for r in broken) if tested else None,
            "false_alarms": sum(r["flagged"] for r in tested if r["kept_passing"]) if tested else None,
            "incomplete": sum(not r["complete"] for r in tested) if tested else None,
            "repaired": sum(r["repaired"] for r in checked_rows) if checked_rows else None,
            "repair_passes": sum(len(r["repairs"]) for r in checked_rows) if checked_rows else None,
            "repair_share": share(touched, "repair_seconds"), "check_share": share(clean, "check_seconds")}


def useful(kept_passing: bool, done: float | None) -> bool:
    """An edit is useful when its tests pass and it did at least USEFUL_DONE of what was asked (all of
    nothing, when nothing was to be done)."""
    return kept_passing and (done is None or done >= USEFUL_DONE)


def prefill_rate(costs: dict[str, dict]) -> float | None:
    """The tokens per second of the default engine's prefill (the first weights in the forward costs), the
    rate a copy cannot beat; None where the costs were not measured."""
    engines = [c for name, c in costs.items() if name.startswith("engine ")]
    return ratio(engines[0]["context"], engines[0]["prefill_seconds"]) if engines else None


def summarize_prefix_reuse(rows: list[dict], tasks: list[str], results: list[dict],
                           prefill: float | None = None) -> list[dict]:
    """Per task: the mean times to first token, and the default strategy's tokens/s with the buffer warm,
    against the tokens/s (cold, on the same records) of `hf-pld` and llama.cpp in `results`, and against the
    engine's `prefill` rate (`prefill_rate`)."""
    summary = []
    for task in tasks:
        mine = [r for r in rows if r["task"] == task and r["strategy"] == PREFIX_REUSE]
        if mine:
            cold = sum(r["cold_first_token_seconds"] for r in mine) / len(mine)
            warm = sum(r["warm_first_token_seconds"] for r in mine) / len(mine)
            idle = sum(r["idle_first_token_seconds"] for r in mine) / len(mine)
            tps = ratio(sum(r["idle_new_tokens"] for r in mine), sum(r["idle_seconds"] for r in mine))
            others = {s["strategy"]: s["tokens_per_second"] for s in results if s["task"] == task}
            compared = [r["idle_exact_match"] for r in mine if r["idle_exact_match"] is not None]
            summary.append({"task": task, "records": len(mine), "cold_first_token_seconds": cold,
                            "warm_first_token_seconds": warm, "warm_over_cold": ratio(warm, cold),
                            "idle_first_token_seconds": idle, "idle_over_cold": ratio(idle, cold),
                            "idle_tokens_per_second": tps, "idle_vs_hf_pld": ratio(tps, others.get("hf-pld")),
                            "idle_vs_llama_cpp": ratio(tps, others.get(LLAMA_CPP)),
                            "prefill_tokens_per_second": prefill, "idle_vs_prefill": ratio(tps, prefill),
                            "idle_exact_match": ratio(sum(compared), len(compared))})
    return summary


def decode_seconds(row: dict) -> float | None:
    """The time after the first token (None for a generator that does not say when that came)."""
    return None if row["first_token_seconds"] is None else row["seconds"] - row["first_token_seconds"]


def decode_speed(rows: list[dict]) -> float | None:
    """Tokens/s after the first token, i.e. without the prefill every strategy pays alike (None for
    a generator that does not report its first token)."""
    if not rows or any(r["first_token_seconds"] is None for r in rows):
        return None
    return ratio(sum(r["new_tokens"] - 1 for r in rows), sum(decode_seconds(r) for r in rows))


def totals(rows: list[dict]) -> tuple[int, float]:
    return sum(r["new_tokens"] for r in rows), sum(r["seconds"] for r in rows)


def fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def count(summary: dict, passed: str, tried: str) -> str:
    """"50% (1/2)": the share of `tried` that `passed`."""
    if not summary[tried]:
        return "n/a"
    return f"{summary[passed] / summary[tried]:.0%} ({summary[passed]}/{summary[tried]})"


COLUMNS = (  # name, the summary key an optional column shows only when some entry has it, cell
    ("task", None, lambda s: s["task"]),
    ("strategy", None, lambda s: s["strategy"]),
    ("n", None, lambda s: str(s["records"])),
    ("tok/s", None, lambda s: fmt(s["tokens_per_second"], ".1f")),
    ("answer tok/s", "answer_tokens_per_second", lambda s: fmt(s["answer_tokens_per_second"], ".1f")),
    ("speedup (mean)", None, lambda s: fmt(s["speedup_mean"], ".2f", "x")),
    ("speedup (total)", None, lambda s: fmt(s["speedup_total"], ".2f", "x")),
    ("after 1st token", None, lambda s: fmt(s["decode_speedup"], ".2f", "x")),
    ("vs llama.cpp", "vs_llama_cpp", lambda s: fmt(s["vs_llama_cpp"], ".2f", "x")),
    ("vs llama.cpp after 1st token", "vs_llama_cpp", lambda s: fmt(s["vs_llama_cpp_decode"], ".2f", "x")),
    ("accepted/step", None, lambda s: fmt(s["mean_accepted"])),
    ("exact vs ar", None, lambda s: fmt(s["exact_match"], ".0%")),
    ("complete", None, lambda s: fmt(s["complete"], ".0%")),
    ("fix rate", "fix_rate", lambda s: count(s, "fixed", "fix_tried")),
    *(("pass@1 " + kind, f"pass_at_1_{kind}", lambda s, kind=kind: count(s, f"passed_{kind}", f"tried_{kind}"))
      for kind in canitedit.INSTRUCTIONS),
    ("tests kept", "kept", lambda s: "n/a" if s["kept"] is None else f"{s['kept']}/{s['kept'] + s['broken']}"),
    ("done", "done", lambda s: fmt(s["done"], ".0%")),
    ("useful", "useful", lambda s: "n/a" if s["useful"] is None else f"{s['useful']}/{s['kept'] + s['broken']}"),
    ("broken (flagged)", "broken", lambda s: "n/a" if s["broken"] is None else f"{s['broken']} ({s['flagged']})"),
    ("repaired", "repaired",
     lambda s: "n/a" if s["repaired"] is None else f"{s['repaired']} ({s['repair_passes']} passes)"),
    ("repair time", "repair_share", lambda s: fmt(s["repair_share"], ".0%")),
    ("check time", "check_share", lambda s: fmt(s["check_share"], ".1%")),
    ("no change", "unchanged", lambda s: "n/a" if s["unchanged"] is None else f"{s['unchanged']}/{s['edits']}"),
    ("first token", None, lambda s: fmt(s["first_token_seconds"], ".3f", "s")),
    ("max RSS", None, lambda s: fmt(s["max_rss_mb"], ".0f", " MB")),
    ("CUDA peak", "cuda_peak_mb", lambda s: fmt(s["cuda_peak_mb"], ".0f", " MB")),
    ("attr. coverage", None, lambda s: fmt(s["attribution_coverage"], ".0%")),
    ("attr. precision", None, lambda s: fmt(s["attribution_precision"], ".0%")),
)


def table(summary: list[dict], unavailable: dict[str, str], left_out: dict[str, dict[str, list[str]]] | None = None
          ) -> Table:
    """The main table: a column for what some entry measured; the caption names the strategies that could not
    run and the problems left out for want of their packages."""
    columns = [(name, cell) for name, key, cell in COLUMNS
               if key is None or any(s[key] is not None for s in summary)]
    notes = [f"{k}: unavailable ({v})" for k, v in unavailable.items()]
    notes += [f"{task}: {len(problems)} problem{'s' * (len(problems) > 1)} left out, their packages not installed "
              f"({', '.join(sorted({p for packages in problems.values() for p in packages}))})"
              for task, problems in (left_out or {}).items()]
    t = Table(title="assistant bench", caption="; ".join(notes))
    for name, _ in columns:
        t.add_column(name, justify="left" if name in ("task", "strategy") else "right")
    for s in summary:
        t.add_row(*(cell(s) for _, cell in columns))
    return t


def prefix_table(summary: list[dict]) -> Table:
    t = Table(title="prefix reuse: the same edit request twice, and after the buffer was idle (whole answer)")
    for name in ("task", "n", "first token cold", "first token again", "again / cold", "after idle", "idle / cold",
                 "tok/s after idle", "vs hf-pld", "vs llama.cpp", "of prefill", "exact vs ar"):
        t.add_column(name, justify="left" if name == "task" else "right")
    for s in summary:
        t.add_row(s["task"], str(s["records"]), fmt(s["cold_first_token_seconds"], ".3f", "s"),
                  fmt(s["warm_first_token_seconds"], ".3f", "s"), fmt(s["warm_over_cold"], ".0%"),
                  fmt(s["idle_first_token_seconds"], ".3f", "s"), fmt(s["idle_over_cold"], ".0%"),
                  fmt(s["idle_tokens_per_second"], ".1f"), fmt(s["idle_vs_hf_pld"], ".2f", "x"),
                  fmt(s["idle_vs_llama_cpp"], ".2f", "x"), fmt(s["idle_vs_prefill"], ".0%"),
                  fmt(s["idle_exact_match"], ".0%"))
    return t


def step_table(costs: dict[str, dict]) -> Table:
    t = Table(title=f"the cost of a forward after the same context (best of {step_costs.STEP_REPEATS}; "
                    f"prefill best of {step_costs.PREFILL_REPEATS})")
    for name in ("forward of", "context", "prefill", "one-token step", f"{step_costs.VERIFY}-token verification",
                 "verification / step", "step vs llama.cpp", "prefill vs llama.cpp", "loop step",
                 "outside the forward"):
        t.add_column(name, justify="left" if name == "forward of" else "right")
    for name, c in costs.items():
        loop = c.get("loop_step_seconds")
        t.add_row(name, str(c["context"]), fmt(c["prefill_seconds"], ".2f", "s"),
                  fmt(c["step_seconds"] * 1000, ".1f", " ms"), fmt(c["verify_seconds"] * 1000, ".1f", " ms"),
                  fmt(c["verify_over_step"], ".2f", "x"), fmt(c["step_vs_llama_cpp"], ".2f", "x"),
                  fmt(c["prefill_vs_llama_cpp"], ".2f", "x"), fmt(loop and loop * 1000, ".1f", " ms"),
                  fmt(c.get("outside_forward"), ".0%"))
    return t


def chart(summary: list[dict], rows: list[dict], path: Path) -> None:
    tasks = list(dict.fromkeys(s["task"] for s in summary))
    strategies = list(dict.fromkeys(s["strategy"] for s in summary))
    fig = Figure(figsize=(13, 4.5))  # no pyplot: no display and no global state needed
    bars, hist = fig.subplots(1, 2)
    width = 0.8 / max(1, len(strategies))
    for k, strategy in enumerate(strategies):
        speed = {s["task"]: s["speedup_mean"] or 0.0 for s in summary if s["strategy"] == strategy}
        bars.bar([i + k * width for i in range(len(tasks))], [speed.get(t, 0.0) for t in tasks], width,
                 label=strategy)
    bars.axhline(1.0, color="grey", linewidth=0.8)
    bars.set_xticks([i + width * (len(strategies) - 1) / 2 for i in range(len(tasks))], tasks)
    bars.set_ylabel("speedup over ar (mean per record)")
    if strategies:  # none where Ctrl-C came before the first row
        bars.legend(fontsize="small")
    steps = {s: [n for r in rows if r["strategy"] == s for n in r["per_step"]] for s in strategies if s != "ar"}
    steps = {s: v for s, v in steps.items() if v}
    if steps:
        top = max(max(v) for v in steps.values())
        hist.hist(list(steps.values()), bins=range(1, top + 2), label=list(steps), align="left")
        hist.legend(fontsize="small")
    hist.set_xlabel("tokens gained per step")
    hist.set_ylabel("steps")
    hist.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)



def summarize_busy(rows: list[dict], tasks: list[str], strategies: list[str]) -> list[dict]:
    """Per task and strategy of the busy runs (`busy.row`): tokens/s quiet and busy over the same records,
    and busy time over quiet, in all and after the first token."""
    summary = []
    for task, strategy, mine in groups(rows, tasks, strategies):
        quiet = sum(r["quiet_seconds"] for r in mine)
        tokens, seconds = totals(mine)
        timed = [r for r in mine if r["quiet_decode_seconds"] is not None]
        decode = ratio(sum(decode_seconds(r) for r in timed), sum(r["quiet_decode_seconds"] for r in timed))
        summary.append({"task": task, "strategy": strategy, "records": len(mine), "busy": mine[0]["busy"],
                        "quiet_tokens_per_second": ratio(sum(r["quiet_new_tokens"] for r in mine), quiet),
                        "busy_tokens_per_second": ratio(tokens, seconds), "busy_over_quiet": ratio(seconds, quiet),
                        "decode_busy_over_quiet": decode if len(timed) == len(mine) else None,
                        "same_as_quiet": sum(r["same_as_quiet"] for r in mine) / len(mine)})
    return summary


def busy_table(summary: list[dict]) -> Table:
    processes = summary[0]["busy"]
    t = Table(title=f"a busy machine: each run again with {processes} CPU-bound process"
                    f"{'es' * (processes > 1)} spinning beside it, at once")
    for name in ("task", "strategy", "n", "tok/s quiet", "tok/s busy", "busy time / quiet", "after 1st token",
                 "same text"):
        t.add_column(name, justify="left" if name in ("task", "strategy") else "right")
    for s in summary:
        t.add_row(s["task"], s["strategy"], str(s["records"]), fmt(s["quiet_tokens_per_second"], ".1f"),
                  fmt(s["busy_tokens_per_second"], ".1f"), fmt(s["busy_over_quiet"], ".2f", "x"),
                  fmt(s["decode_busy_over_quiet"], ".2f", "x"), f"{s['same_as_quiet']:.0%}")
    return t


def write(out: Path, rows: list[dict], tasks: list[str], strategies: list[str], measured: dict, console) -> None:
    """summary.json (with `measured`: the environment, what could not run, the forward costs, ...), the
    chart and the tables, from the rows measured so far; the busy runs apart from the quiet ones."""
    quiet = [r for r in rows if "busy" not in r]
    summary = summarize(quiet, tasks, strategies)
    reuse = summarize_prefix_reuse(quiet, tasks, summary, prefill_rate(measured["step_costs"] or {}))
    loaded = summarize_busy([r for r in rows if "busy" in r], tasks, strategies)
    (out / "summary.json").write_text(json.dumps(
        {**measured, "results": summary, "prefix_reuse": reuse, "busy": loaded}, indent=1) + "\n")
    chart(summary, quiet, out / "chart.png")
    if measured["step_costs"]:
        console.print(step_table(measured["step_costs"]))
    console.print(table(summary, measured["unavailable"], measured["left_out"]))
    if reuse:
        console.print(prefix_table(reuse))
    if loaded:
        console.print(busy_table(loaded))
    console.print(f"results in {out}/ (rows.jsonl, summary.json, chart.png)")
