"""The run of `assistant bench`: a plan's records measured one after another, each row written as it
finishes, and the report written at the end (or on Ctrl-C, from what was measured so far).

Each record runs every strategy in turn (interleaved, so that a machine that slows down over time hurts
all strategies alike), plain decoding `ar` first because it is the reference every other output must
equal (`expected`). With `--busy N`, each run is measured again at once with N CPU-bound processes
spinning beside it (`busy.py`). Prefix reuse is off for these runs (each strategy pays its own prefill,
as `hf-pld` does) and measured apart (`prefix_reuse`): the same edit request twice, time to first token
cold and warm, and the default strategy after the buffer was idle (`Assistant.warm`, as the editor does).

Edit quality is measured beside the speed: `fix` and `canitedit` answers run with their tests in the
sandbox (`sandbox.py`); `preserve` answers run CPython's own tests of their module (`preserve.py`) and
say how much of the instruction they did (`done.py`); every edit says whether it changed anything
(`checks.change_kind`, as the engine's `Result.change`). The engine checks the answers of records in a
known language (fix, preserve, canitedit) and repairs what they broke; each row says what the check found
and what repair cost. Every pass is exact, so an engine strategy's answer after repairs equals `ar`'s with
the same repairs (`ar@repairs=N` is the reference of `X@repairs=N`); generators that do not repair
(`hf-pld`, llama.cpp) are compared with `ar`'s first answer. The environment (machine, versions, model,
settings, command) is recorded with the results.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import sys
from pathlib import Path

import torch
import transformers
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)

from assistant import RewriteError, config
from assistant.bench import busy, canitedit, data, preserve, report, sandbox, step_costs
from assistant.bench.attribution_quality import quality
from assistant.bench.generators import Run, Runner, runs_on
from assistant.bench.plan import ENGINE_STRATEGIES, REFERENCE_PROMPT, SHORT_DRAFTS, SIDE_BY_SIDE, TREE, Plan
from assistant.checks.change import change_kind
from assistant.engine.events import Result


def run(plan: Plan, assistant, model: str, load) -> bool:
    """Measure the plan with `assistant` (prefix reuse off) and write the results; `load(weights)` makes
    another Assistant of `model` for a strategy on other weights. True when Ctrl-C cut the run short."""
    assistant.measured_costs()  # a first run measures them now, not while strategies are timed
    plan.out.mkdir(parents=True, exist_ok=True)
    runner = Runner(assistant, plan.max_new_tokens, model, load)
    env = environment(assistant, plan.max_new_tokens) | {"busy": plan.busy}
    if {data.FIX_TASK, data.PRESERVE_TASK, data.CANITEDIT_TASK} & set(plan.tasks):  # how the sandbox cut the network
        env["sandbox_network"] = "unshare -n" if sandbox.network_namespace() else "socket guard"
    rows: list[dict] = []
    costs: dict[str, dict] = {}
    interrupted = False
    # Piped output would be cut to 80 columns, too narrow for the table's two dozen columns.
    console, progress_console = Console(width=None if sys.stdout.isatty() else 320), Console(stderr=True)
    try:
        strategies = runner.warm_up(runner.check(plan.strategies), plan.records[0])
        progress_console.print(f"measuring the cost of a forward after {step_costs.CONTEXT} tokens of context")
        costs = runner.forward_costs(plan.records)
        with open(plan.out / "rows.jsonl", "w") as jsonl, \
                Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                         console=progress_console) as progress:
            bar = progress.add_task("bench", total=len(plan.records) * len(strategies))
            for record in plan.records:
                for row in measured_record(runner, strategies, record, plan.busy, progress, bar):
                    jsonl.write(json.dumps(row) + "\n")
                    jsonl.flush()
                    if "error" not in row:
                        rows.append(row)
    except KeyboardInterrupt:
        interrupted = True
        progress_console.print("interrupted: summarizing what was measured")
    measured = {"environment": env, "interrupted": interrupted, "unavailable": runner.unavailable,
                "llama_cpp": runner.llama_info or None, "step_costs": costs, "left_out": plan.left_out}
    report.write(plan.out, rows, plan.tasks, plan.strategies, measured, console)
    return interrupted


def measured_record(runner: Runner, strategies: list[str], record: data.Record, processes: int, progress, bar):
    """The rows of one record, each as soon as it is measured: every strategy that runs on it (and each
    again beside `processes` spinners), then the prefix-reuse runs of an edit."""
    results: dict[str, Run] = {}
    for strategy in strategies:
        progress.update(bar, description=f"{record.task} {record.id[:24]} {strategy}")
        if not runs_on(strategy, record):
            progress.advance(bar)
            continue
        try:
            row, result = measure(runner, strategy, record, results)
        except RewriteError as error:  # e.g. a prompt longer than the model's context
            yield {"task": record.task, "id": record.id, "strategy": strategy, "error": str(error)}
            progress.advance(bar, len(strategies) - strategies.index(strategy))
            break  # every strategy shares the prompt: the record cannot run at all
        yield row
        results[strategy] = result
        if processes:
            yield measured_busy(runner, strategy, record, results, row, processes)
        progress.advance(bar)
    if record.is_edit and results and record.task not in (data.PRESERVE_TASK, data.CANITEDIT_TASK):
        progress.update(bar, description=f"{record.task} {record.id[:24]} {report.PREFIX_REUSE}")
        yield prefix_reuse(runner, record, results.get("ar"))


def measure(runner: Runner, strategy: str, record: data.Record, results: dict[str, Run]) -> tuple[dict, Run]:
    """One row: the strategy's speed on the record against `ar`'s, whether its output is the one it must
    equal (`expected`), and the quality of the answer."""
    device = runner.assistant.loaded.device
    reset_peak_memory(device)
    result = runner.run(strategy, record)
    reference = results.get("ar")
    must_equal = expected(strategy, results)
    row = {"task": record.task, "id": record.id, "strategy": strategy, "new_tokens": result.new_tokens,
           "seconds": round(result.seconds, 4),
           "tokens_per_second": round(result.new_tokens / result.seconds, 3) if result.seconds else None,
           "complete": result.complete, "steps": result.steps, "first_token_seconds": result.first_token_seconds,
           "per_step": result.per_step,
           # ar is the reference itself; None where ar did not run on these weights: nothing is claimed
           "exact_match": (True if strategy.partition("@")[0] == "ar" else None if must_equal is None
                           else result.text == must_equal), **peak_memory_mb(device),
           "text": result.text}  # kept so that a mismatch with ar can be inspected afterwards
    if reference is not None and reference.seconds and result.seconds and reference.new_tokens:
        row["speedup"] = round((result.new_tokens / result.seconds) / (reference.new_tokens / reference.seconds), 4)
    elif reference is None:
        row["speedup"] = 1.0
    row |= judged(record, result)
    if record.task == "preserve":  # passes over definitions make less than their answer holds (`answer_tokens`)
        row["answer_tokens"] = runner.assistant.count_tokens(result.text)
    if strategy.partition("@")[0] in ENGINE_STRATEGIES:
        q = quality(record.document, result.text, result.token_spans)
        row["attribution"] = {"kept": q.kept, "kept_attributed": q.kept_attributed, "attributed": q.attributed,
                              "correct": q.correct}
    return row, result


def judged(record: data.Record, result: Run) -> dict:
    """The quality of an answer: whether an edit changed anything, its tests' verdict (fix, canitedit),
    what the engine's check found and repair cost, and for `preserve` whether it kept and did the edit."""
    row = {"reply": result.reply} if result.reply is not None else {}
    if record.is_edit:
        row["change"] = change_kind(record.document, result.text, record.language)
    if record.task == data.FIX_TASK:
        outcome = sandbox.run_python(f"{result.text}\n\n{record.tests}")
        row["fixed"], row["test_outcome"] = outcome.passed, outcome.reason
    if record.task == data.CANITEDIT_TASK:
        outcome = canitedit.score(result.text, record.tests)
        row |= {"instruction_kind": record.group, "passed": outcome.passed, "test_outcome": outcome.reason}
    if result.result is not None and record.language is not None:
        row |= checked(result.result)
    if record.test_module:
        row |= preserved(record, result)
    return row


def expected(strategy: str, results: dict[str, Run]) -> str | None:
    """The text `strategy`'s answer must equal: `ar`'s with the same weights and repairs (`ar@W` for a
    strategy on other weights W, `ar` itself for `X@long-drafts=0`, `X@tree=N` and `X@side-by-side=N`: plain
    decoding drafts nothing, and passes side by side make the tokens they make one after the other), or `ar`'s
    first answer for one that is not repaired (`X@repairs=0`, and the generators that do not repair); None where
    that did not run, or for another prompt's answer (`reference-prompt`)."""
    base, _, other = strategy.partition("@")
    reference = results.get(f"ar@{other}" if other else "ar")
    if reference is None and (other in ("repairs=0", SHORT_DRAFTS) or TREE.fullmatch(other)
                              or SIDE_BY_SIDE.fullmatch(other)):
        reference = results.get("ar")
    if reference is None or strategy == REFERENCE_PROMPT:
        return None
    if base not in ENGINE_STRATEGIES or other == "repairs=0":
        return reference.first_text if reference.first_text is not None else reference.text
    return reference.text


def checked(result: Result) -> dict:
    """What the engine's check found in the answer delivered, and what repairing it cost."""
    repairs = result.repairs
    return {"checks": list(result.check.ran) if result.check else None, "problems": [p.message for p in result.problems],
            "repairs": [repair.to_json() for repair in repairs], "repaired": any(repair.kept for repair in repairs),
            "check_seconds": round(result.check_seconds, 4),
            "repair_seconds": round(sum(repair.seconds for repair in repairs), 4),
            "first_pass_seconds": round(result.stats.seconds - sum(repair.stats.seconds for repair in repairs), 4)}


def preserved(record: data.Record, result: Run) -> dict:
    """Whether the rewritten module still passes CPython's own tests (an unfinished answer does not), how
    much of the instruction it did, whether that makes it useful, and whether the engine flagged it: named
    a problem, or did not finish it."""
    if result.complete:
        outcome = preserve.run_tests(record.module, result.text, record.test_module)
        passed, reason = outcome.passed, outcome.reason
    else:
        passed, reason = False, "incomplete: the answer did not finish"
    done = preserve.share_done(record.document, result.text, record.instruction)
    named = bool(result.result is not None and result.result.problems)
    made = result.result.definitions if result.result is not None else None
    return {"kept_passing": passed, "test_outcome": reason, "done": done, "useful": report.useful(passed, done),
            "flagged": named or not result.complete, "definitions": made.to_json() if made is not None else None}


def measured_busy(runner: Runner, strategy: str, record: data.Record, results: dict[str, Run], quiet: dict,
                  processes: int) -> dict:
    """The row of the same run again, at once, with `processes` CPU-bound processes spinning beside it."""
    with busy.spinning(processes):
        row, _ = measure(runner, strategy, record, results)
    return busy.row(quiet, row, processes)


def prefix_reuse(runner: Runner, record: data.Record, reference: Run | None) -> dict:
    """Time to first token of one edit request: cold, made again (its whole prompt prefix cached), and
    after the buffer was left idle (`Assistant.warm`: the part any instruction shares cached); the last
    runs to the end, so that tokens/s with the buffer warm is measured too, and checked against ar's
    text (`reference`)."""
    assistant = runner.assistant
    assistant.reuse_prefixes(config.settings().prefix_cache_mb)
    try:
        cold, warm = (runner.engine(assistant.strategy, record, 1).first_token_seconds for _ in range(2))
        assistant.reuse_prefixes(config.settings().prefix_cache_mb)
        assistant.warm(record.document)
        idle = runner.engine(assistant.strategy, record, runner.max_new_tokens)
    finally:
        assistant.reuse_prefixes(0)
    return {"task": record.task, "id": record.id, "strategy": report.PREFIX_REUSE, "cold_first_token_seconds": cold,
            "warm_first_token_seconds": warm, "idle_first_token_seconds": idle.first_token_seconds,
            "idle_new_tokens": idle.new_tokens, "idle_seconds": round(idle.seconds, 4),
            "idle_exact_match": None if reference is None else idle.text == reference.text}


def reset_peak_memory(device) -> None:
    """Start a row's peaks from what is held now: CUDA's, and on Linux the process's resident high-water mark
    (writing 5 to /proc/self/clear_refs sets it to the resident size), so that `max_rss_mb` is the row's."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_memory_mb(device) -> dict:
    # ru_maxrss is the resident high-water mark in KiB on Linux: since `reset_peak_memory` where that could reset it,
    # else since the process started (every model loaded so far resident in either case).
    memory = {"max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device.type == "cuda":
        memory["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return memory


def environment(assistant, max_new_tokens: int) -> dict:
    """The machine, the versions, the model and the settings a run measured with, and its command."""
    cpu = platform.processor()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    loaded = assistant.loaded
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "thread_waiting": config.thread_waiting(),  # OMP_WAIT_POLICY, GOMP_SPINCOUNT as set
            "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "device": str(loaded.device), "gpu": torch.cuda.get_device_name() if loaded.device.type == "cuda" else None,
            "weights": loaded.weights, "attention": loaded.attention, "model": loaded.name, "model_sha256": loaded.sha256,
            "max_new_tokens": max_new_tokens, "max_draft": assistant.draft_ceiling,
            "longest_draft": assistant.longest_draft,
            "command": " ".join(sys.argv)}
