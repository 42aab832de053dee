"""The benchmark behind `assistant bench`: speed, exactness, attribution quality and edit quality of
every strategy on the benchmark data (`assistant/cli/bench.py` is the command).

Records are measured one after another; each record runs every strategy in turn (interleaved,
so that a machine that slows down over time hurts all strategies alike), plain decoding `ar`
first because it is the reference every other output must equal. Rows are appended to
`rows.jsonl` as they finish; `summary.json`, `chart.png` and the table are written at the end,
or on Ctrl-C from what was measured so far. With `--busy N`, each run is measured again at once with
N CPU-bound processes spinning beside it (`busy.py`): what a busy machine costs each generator, and
whether the engine gives the same text under load.

Speedup is reported both as Spec-Bench does (the tokens/s ratio per record, averaged) and as
the ratio of total tokens over total time, both with the prefill included; "after 1st token"
is the ratio without it, which is where drafting acts. Prefix reuse is off for these runs (each
strategy pays its own prefill, as `hf-pld` does) and measured apart: the same edit request
twice, time to first token cold and warm, and the default strategy after the buffer was idle
(`Assistant.warm`, as the editor does).

Every answer runs to its end by default, with the output budget the front doors give
(`Assistant.budget`), since an answer cut at a token limit is never written for the user; each row
says whether its answer was complete, and `--max-new-tokens N` cuts every answer at N instead.

The `fix` task also measures edit quality: each output is run with its task's tests in a
sandboxed process (`sandbox.py`), and the fix rate is reported beside the speed. The `preserve` task
(`preserve.py`) rewrites standard-library modules on instructions that must not change what they do
and runs CPython's own tests of each against the answer: edits kept passing, broken, and broken ones
the engine flagged (its check named a problem, or the answer did not finish, so no door delivers it
as it is); it skips the prefix-reuse runs. `llama-cpp` is llama.cpp's plain greedy decoding
(llama-cpp-python, optional) of the same GGUF, fed the engine's own prompt token ids, with the
engine's thread count and its own prefill each time.

The engine checks the answers of records in a known language (fix, preserve) and repairs what they
broke, with its default number of repair passes; a strategy such as `pld+h@repairs=0` runs with
another number (0: repair off). Each row says what the check found and what repair cost: the time of
the repair passes (their checks included) against that of the answer without them. Every pass is
exact, so an engine strategy's answer after repairs equals `ar`'s with the same repairs (`ar@repairs=N`
is the reference of `X@repairs=N`); generators that do not repair (`hf-pld`, llama.cpp) are compared
with `ar`'s first answer.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import sys
import time
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch
import transformers
from matplotlib.figure import Figure
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from transformers.generation.streamers import BaseStreamer

from assistant import config
from assistant.bench import busy, data, preserve, sandbox, step_costs
from assistant.bench.attribution_quality import quality
from assistant import Delta, Result, RewriteError, result_of
from assistant.engine.output import OutputText
from assistant.model import loading, weights

ENGINE_STRATEGIES = ("ar", "pld", "pld+h", "pld+a")
STRATEGIES = ("ar", "hf-pld", "pld", "pld+h", "pld+a", "llama-cpp")
DEFAULT_TASKS = ("code-edit", "text-edit")
DEFAULT_STRATEGIES = ("ar", "hf-pld", "pld", "pld+h", "pld+a")
HF_PLD_LOOKUP = 10  # prompt_lookup_num_tokens, transformers' own default for its PLD
WARMUP_TOKENS = 4
MAX_DRAFT = 64
PREFIX_REUSE = "prefix-reuse"  # rows of the cold/warm time-to-first-token measurement
LLAMA_CPP = "llama-cpp"
UNFINISHED = ("length", "cancelled")  # a Result's `stopped` for an answer that did not end by itself
REPAIRS = re.compile(r"repairs=([0-9]+)")  # a strategy's variant with another number of repair passes


class BenchError(ValueError):
    """Bad arguments or data; reported before the model is loaded."""


# --- plan: everything checked before the model loads ---------------------------------------------

@dataclass
class Plan:
    tasks: list[str]
    strategies: list[str]
    records: list[data.Record]  # task by task, `samples` each, spread over the task's sources
    max_new_tokens: int | None  # None: each answer's own budget, as the front doors give
    out: Path
    busy: int = 0  # CPU-bound processes spinning beside a second, busy run of each (`busy.py`); 0: none


def split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def plan(args) -> Plan:
    tasks = split_list(args.tasks)
    if not tasks:
        raise BenchError("no tasks given")
    for task in tasks:
        if task not in data.TASKS:
            raise BenchError(f"unknown task {task!r}: use one of {', '.join(data.TASKS)}")
    strategies = split_list(args.strategies)
    for strategy in strategies:
        base, at, other = strategy.partition("@")
        if strategy not in STRATEGIES and not (at and base in ENGINE_STRATEGIES and
                                               (other in weights.FORMATS or REPAIRS.fullmatch(other))):
            raise BenchError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}, or an engine "
                             f"strategy with other weights, such as ar@float32 ({', '.join(weights.FORMATS)}), "
                             f"or with another number of repair passes, such as pld+h@repairs=0")
    strategies = list(dict.fromkeys(["ar"] + sorted(strategies, key=lambda s: not s.startswith("ar@"))))
    if args.samples < 1:
        raise BenchError("--samples must be at least 1")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise BenchError("--max-new-tokens must be at least 1")
    if args.max_draft is not None and not 1 <= args.max_draft <= MAX_DRAFT:
        raise BenchError(f"--max-draft must be between 1 and {MAX_DRAFT}")
    records = []
    chosen = split_list(args.records) if args.records else None
    for task in dict.fromkeys(tasks):
        try:
            available = data.load(task)
        except (data.DataError, OSError) as error:
            raise BenchError(f"cannot read the {task} data: {error}") from error
        if chosen is not None:
            records += [record for record in available if record.id in chosen]
        elif args.samples > len(available):
            raise BenchError(f"--samples {args.samples} is more than the {len(available)} {task} eval records")
        else:
            records += data.sample(available, args.samples)
    unknown = sorted(set(chosen or ()) - {record.id for record in records})
    if unknown:
        raise BenchError(f"no record {unknown[0]!r} in the tasks {', '.join(tasks)}")
    out = args.out or Path("bench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    if args.busy < 0:
        raise BenchError("--busy must be 0 or more")
    return Plan(list(dict.fromkeys(tasks)), strategies, records, args.max_new_tokens, out, args.busy)


# --- running one strategy on one record -----------------------------------------------------------

@dataclass
class Run:
    text: str
    new_tokens: int
    complete: bool  # the answer ended by itself, not at the token limit
    seconds: float
    steps: int | None = None
    first_token_seconds: float | None = None
    per_step: list[int] = field(default_factory=list)  # tokens gained per step
    token_spans: list = field(default_factory=list)
    first_text: str | None = None  # the first answer, before any repair (None: `text`, nothing was repaired)
    result: Result | None = None  # the engine's Result, with its check and repairs


class Runner:
    """Runs a record under a strategy with one loaded model; knows which strategies it can run."""

    def __init__(self, assistant, max_new_tokens: int | None, model: str, load=None):
        self.assistant, self.max_new_tokens, self.model = assistant, max_new_tokens, model
        self.load = load  # weights -> another Assistant of the same model, for strategies such as ar@float32
        self.others: dict[str, object] = {}
        self.unavailable: dict[str, str] = {}
        self.histories: dict[str, tuple[dict, ...]] = {}
        self.llama = None
        self.llama_info: dict = {}  # what llama.cpp ran, for summary.json

    def check(self, strategies: list[str]) -> list[str]:
        """The strategies that can run here; the others go to `unavailable` with the reason."""
        if "pld+a" in strategies and not self.assistant.tuned.heads:
            self.unavailable["pld+a"] = "no tuned induction heads for this model (run `assistant calibrate`)"
        if LLAMA_CPP in strategies:
            try:
                self.load_llama()
            except ImportError:
                self.unavailable[LLAMA_CPP] = "llama_cpp is not installed (see the README's bench section)"
            except (BenchError, loading.ModelError, ValueError) as error:  # no GGUF, or one llama.cpp cannot load
                self.unavailable[LLAMA_CPP] = str(error)
        return [s for s in strategies if s not in self.unavailable]

    def load_llama(self) -> None:
        from llama_cpp import Llama, __version__  # optional, never a dependency

        gguf, threads = llama_gguf(self.model), torch.get_num_threads()
        self.llama = Llama(model_path=str(gguf), n_ctx=self.assistant.loaded.context_length, n_threads=threads,
                           n_threads_batch=threads, verbose=False)
        self.llama_info = {"version": __version__, "gguf": str(gguf), "threads": threads,
                           "prompt": "the engine's prompt token ids"}

    def warm_up(self, strategies: list[str], record: data.Record) -> list[str]:
        """One short generation per strategy, so that first-call costs stay out of the timings."""
        for strategy in strategies:
            try:
                self.run(strategy, record, WARMUP_TOKENS)
            except Exception as error:  # a strategy that cannot run here is reported, not fatal
                if strategy == "ar":
                    raise
                self.unavailable[strategy] = f"{type(error).__name__}: {error}"
        return [s for s in strategies if s not in self.unavailable]

    def run(self, strategy: str, record: data.Record, max_new_tokens: int | None = None) -> Run:
        max_new_tokens = max_new_tokens or self.max_new_tokens
        if strategy == "hf-pld":
            return self.hf_pld(record, max_new_tokens)
        if strategy == LLAMA_CPP:
            return self.llama_cpp(record, max_new_tokens)
        return self.engine(strategy, record, max_new_tokens)  # None: the engine's own budget

    def budget(self, record: data.Record, prompt, max_new_tokens: int | None) -> int:
        """The tokens another generator may make: `max_new_tokens`, or the budget the engine gives itself."""
        return max_new_tokens or self.assistant.budget(prompt, record.document if record.is_edit else None)

    def with_weights(self, strategy: str):
        """(assistant, engine strategy, repair passes or None) for `strategy`, which may name other weights,
        `ar@float32`, or another number of repair passes, `ar@repairs=0`."""
        strategy, _, other = strategy.partition("@")
        if not other:
            return self.assistant, strategy, None
        if repairs := REPAIRS.fullmatch(other):
            return self.assistant, strategy, int(repairs.group(1))
        if other not in self.others:
            self.others[other] = self.load(other)
            self.others[other].measured_costs()
        return self.others[other], strategy, None

    def events(self, strategy: str, record: data.Record, max_new_tokens: int | None):
        assistant, strategy, repairs = self.with_weights(strategy)
        if record.is_edit:
            return assistant.rewrite(record.document, record.instruction, strategy=strategy,
                                     max_new_tokens=max_new_tokens, language=record.language, repairs=repairs)
        return assistant.chat(record.document, history=self.history(record), strategy=strategy,
                              max_new_tokens=max_new_tokens)

    def engine(self, strategy: str, record: data.Record, max_new_tokens: int | None) -> Run:
        per_step, first = [], ""  # first: the first answer, as streamed (a repair's steps are not)
        with closing(self.events(strategy, record, max_new_tokens)) as events:
            for event in events:
                if isinstance(event, Delta):
                    first += event.text
                    if event.new_tokens:  # new_tokens == 0: the final flush
                        per_step.append(event.new_tokens)
                if isinstance(event, Result):
                    stats = event.stats
                    return Run(event.text, stats.new_tokens, event.stopped not in UNFINISHED, stats.seconds,
                               stats.steps, stats.first_token_seconds, per_step, event.token_spans, first, event)
        raise AssertionError("the engine ended without a result")

    def forward_costs(self, records: list[data.Record]) -> dict[str, dict]:
        """The cost of a forward (`step_costs`) for each weights loaded and for llama.cpp, after the same
        context made of the records' text."""
        loaded = self.assistant.loaded
        ids = step_costs.context_ids(loaded.tokenizer, [r.document for r in records], loaded.context_length)
        engines = {f"engine {a.loaded.weights}": step_costs.Engine(a.loaded.model, ids)
                   for a in (self.assistant, *self.others.values())}
        if self.llama is not None:
            engines[LLAMA_CPP] = step_costs.LlamaCpp(self.llama, ids)
        costs = step_costs.measure(engines)
        llama = costs.get(LLAMA_CPP)
        return {name: {**c.as_dict(), "step_vs_llama_cpp": ratio(llama and llama.step_seconds, c.step_seconds),
                       "prefill_vs_llama_cpp": ratio(llama and llama.prefill_seconds, c.prefill_seconds)}
                for name, c in costs.items()}

    def history(self, record: data.Record) -> tuple[dict, ...]:
        """MT-Bench earlier turns with the model's own (greedy, untimed) answers, made once per record."""
        if record.id not in self.histories:
            history: tuple[dict, ...] = ()
            for turn in record.earlier_turns:
                answer = result_of(self.assistant.chat(turn, history=history, strategy="ar",
                                                       max_new_tokens=self.max_new_tokens)).text
                history += ({"role": "user", "content": turn}, {"role": "assistant", "content": answer})
            self.histories[record.id] = history
        return self.histories[record.id]

    def prompt(self, record: data.Record):
        if record.is_edit:
            return self.assistant.prompt(record.document, record.instruction)
        return self.assistant.chat_prompt(record.document, self.history(record))

    def visible(self, record: data.Record, prompt, tokens: list[int]) -> tuple[str, int, bool]:
        """What the engine would show for these tokens, how many of them it would count, and whether they
        end the answer."""
        target = (0, len(record.document)) if record.is_edit else None
        return self.assistant.shown(prompt, record.document, target, tokens)

    def hf_pld(self, record: data.Record, max_new_tokens: int | None) -> Run:
        model, tokenizer = self.assistant.loaded.model, self.assistant.loaded.tokenizer
        prompt = self.prompt(record)
        max_new_tokens = self.budget(record, prompt, max_new_tokens)
        ids = torch.tensor([prompt.ids], device=model.device)
        # The engine ends an edit where the answer's code block closes; generate() is told the same.
        closing = {"stop_strings": [f"\n{prompt.fence}\n"], "tokenizer": tokenizer} if prompt.fence else {}
        synchronize(model.device)
        first = FirstTokens()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), prompt_lookup_num_tokens=HF_PLD_LOOKUP,
                                 max_new_tokens=max_new_tokens, do_sample=False, streamer=first, **closing)
        synchronize(model.device)
        seconds = time.perf_counter() - first.started
        return Run(*self.visible(record, prompt, out[0, ids.shape[1]:].tolist()), seconds,
                   first_token_seconds=first.seconds)

    def llama_cpp(self, record: data.Record, max_new_tokens: int | None) -> Run:
        """llama.cpp's greedy decoding of the engine's prompt ids, stopped where the engine would stop."""
        prompt, eos = self.prompt(record), self.assistant.loaded.eos
        max_new_tokens = self.budget(record, prompt, max_new_tokens)
        output = OutputText(self.assistant.loaded.tokenizer, record.document, fence=prompt.fence)
        tokens, first_token = [], None
        self.llama.reset()  # no reuse of the previous prompt's cache: it pays its own prefill, as every strategy
        started = time.perf_counter()
        for token in self.llama.generate(prompt.ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            first_token = first_token or time.perf_counter() - started
            tokens.append(token)
            output.add([token], [None])
            if token in eos or output.ended or len(tokens) == max_new_tokens:
                break
        seconds = time.perf_counter() - started
        return Run(*self.visible(record, prompt, tokens), seconds, first_token_seconds=first_token)


class FirstTokens(BaseStreamer):
    """When generate() hands over its first new tokens (its first `put` is the prompt), in seconds from
    this streamer's making: `hf-pld`'s time to first token, as the engine's is taken at its first step."""

    def __init__(self):
        self.started, self.puts, self.seconds = time.perf_counter(), 0, None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.seconds = time.perf_counter() - self.started

    def end(self) -> None:
        pass


def llama_gguf(model: str) -> Path:
    """The GGUF file llama.cpp reads for `--model`: a .gguf path as given, or an embedded model's
    weights, joined once into the cache when they ship in parts."""
    path = loading.gguf_file(model)
    if path is None:
        raise BenchError(f"llama-cpp reads GGUF weights: --model {model!r} is neither an embedded model "
                         f"nor a .gguf file")
    return path


def synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def reset_peak_memory(device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_memory_mb(device) -> dict:
    # ru_maxrss is the process-wide high-water mark in KiB on Linux: it only ever grows.
    memory = {"max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device.type == "cuda":
        memory["cuda_peak_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return memory


def expected(strategy: str, results: dict[str, Run]) -> str | None:
    """The text `strategy`'s answer must equal: `ar`'s with the same weights and repairs (`ar@W` for a
    strategy on other weights W), or `ar`'s first answer for one that is not repaired (`X@repairs=0`, and
    the generators that do not repair); None where that did not run."""
    base, _, other = strategy.partition("@")
    reference = results.get(f"ar@{other}" if other else "ar")
    if reference is None and other == "repairs=0":
        reference = results.get("ar")
    if reference is None:
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
    """Whether the rewritten module still passes CPython's own tests (an unfinished answer does not), and
    whether the engine flagged it: named a problem, or did not finish it."""
    if result.complete:
        outcome = preserve.run_tests(record.module, result.text, record.test_module)
        passed, reason = outcome.passed, outcome.reason
    else:
        passed, reason = False, "incomplete: the answer did not finish"
    named = bool(result.result is not None and result.result.problems)
    return {"kept_passing": passed, "test_outcome": reason, "flagged": named or not result.complete}


def measure(runner: Runner, strategy: str, record: data.Record, results: dict[str, Run]) -> tuple[dict, Run]:
    """One row: the strategy's speed on the record against `ar`'s, and whether its output is the one it
    must equal (`expected`)."""
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
    if record.tests:
        outcome = sandbox.run_python(f"{result.text}\n\n{record.tests}")
        row["fixed"], row["test_outcome"] = outcome.passed, outcome.reason
    if result.result is not None and record.language is not None:
        row |= checked(result.result)
    if record.test_module:
        row |= preserved(record, result)
    if strategy.partition("@")[0] in ENGINE_STRATEGIES:
        q = quality(record.document, result.text, result.token_spans)
        row["attribution"] = {"kept": q.kept, "kept_attributed": q.kept_attributed, "attributed": q.attributed,
                              "correct": q.correct}
    return row, result


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
    return {"task": record.task, "id": record.id, "strategy": PREFIX_REUSE, "cold_first_token_seconds": cold,
            "warm_first_token_seconds": warm, "idle_first_token_seconds": idle.first_token_seconds,
            "idle_new_tokens": idle.new_tokens, "idle_seconds": round(idle.seconds, 4),
            "idle_exact_match": None if reference is None else idle.text == reference.text}


# --- summary, table, chart ------------------------------------------------------------------------

def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def relative(rows: list[dict], mine: list[dict], baseline: str) -> tuple[float | None, float | None]:
    """Tokens/s of `mine` over the `baseline` strategy's on the records both ran (also when a run was cut
    short), with the prefill and without it."""
    theirs = {r["id"]: r for r in rows if r["task"] == mine[0]["task"] and r["strategy"] == baseline}
    both = [r for r in mine if r["id"] in theirs]
    base = [theirs[r["id"]] for r in both]
    return ratio(ratio(*totals(both)), ratio(*totals(base))), ratio(decode_speed(both), decode_speed(base))


def summarize(rows: list[dict], tasks: list[str], strategies: list[str]) -> list[dict]:
    """One entry per task and strategy measured, pooled over its records."""
    summary = []
    for task in tasks:
        for strategy in strategies:
            mine = [r for r in rows if r["task"] == task and r["strategy"] == strategy]
            if not mine:
                continue
            tokens, seconds = totals(mine)
            tps = ratio(tokens, seconds)
            speedups = [r["speedup"] for r in mine if r.get("speedup") is not None]
            steps = [r["steps"] for r in mine if r["steps"] is not None]
            first = [r["first_token_seconds"] for r in mine if r["first_token_seconds"] is not None]
            pooled = {k: sum(r["attribution"][k] for r in mine if "attribution" in r)
                      for k in ("kept", "kept_attributed", "attributed", "correct")}
            fixed = [r["fixed"] for r in mine if "fixed" in r]
            compared = [r for r in mine if r["exact_match"] is not None]
            speedup_total, decode_speedup = relative(rows, mine, "ar")
            vs_llama_cpp, vs_llama_cpp_decode = relative(rows, mine, LLAMA_CPP)
            summary.append({
                "task": task, "strategy": strategy, "records": len(mine), "new_tokens": tokens,
                "seconds": round(seconds, 3), "tokens_per_second": tps,
                "speedup_mean": sum(speedups) / len(speedups) if speedups else None,
                "speedup_total": speedup_total, "decode_speedup": decode_speedup,
                "vs_llama_cpp": vs_llama_cpp, "vs_llama_cpp_decode": vs_llama_cpp_decode,
                "fixed": sum(fixed) if fixed else None, "fix_tried": len(fixed) or None,
                "fix_rate": ratio(sum(fixed), len(fixed)),
                "mean_accepted": ratio(tokens, sum(steps)) if len(steps) == len(mine) else None,
                "exact_match": ratio(sum(r["exact_match"] for r in compared), len(compared)),
                "complete": ratio(sum(r["complete"] for r in mine), len(mine)),
                "first_token_seconds": sum(first) / len(first) if first else None,
                "max_rss_mb": max(r["max_rss_mb"] for r in mine),
                "cuda_peak_mb": max((r["cuda_peak_mb"] for r in mine if "cuda_peak_mb" in r), default=None),
                "attribution_coverage": ratio(pooled["kept_attributed"], pooled["kept"])
                if any("attribution" in r for r in mine) else None,
                "attribution_precision": ratio(pooled["correct"], pooled["attributed"])
                if any("attribution" in r for r in mine) else None,
                **summarize_checks(mine),
            })
    return summary


def summarize_checks(mine: list[dict]) -> dict:
    """The preserve task's edits kept passing, broken, and broken but flagged (and good ones flagged:
    false alarms, unfinished ones among them); the answers repaired, and the time repair added to the
    answers it touched (repair passes against the rest of their time) and the check to clean ones."""
    tested = [r for r in mine if "kept_passing" in r]
    broken = [r for r in tested if not r["kept_passing"]]
    checked_rows = [r for r in mine if "checks" in r]
    touched = [r for r in checked_rows if r["repairs"]]
    clean = [r for r in checked_rows if not r["repairs"] and not r["problems"]]

    def share(rows: list[dict], key: str) -> float | None:
        return ratio(sum(r[key] for r in rows), sum(r["first_pass_seconds"] + r["check_seconds"] for r in rows))
    return {"kept": len(tested) - len(broken) if tested else None, "broken": len(broken) if tested else None,
            "flagged": sum(r["flagged"] for r in broken) if tested else None,
            "false_alarms": sum(r["flagged"] for r in tested if r["kept_passing"]) if tested else None,
            "incomplete": sum(not r["complete"] for r in tested) if tested else None,
            "repaired": sum(r["repaired"] for r in checked_rows) if checked_rows else None,
            "repair_passes": sum(len(r["repairs"]) for r in checked_rows) if checked_rows else None,
            "repair_share": share(touched, "repair_seconds"), "check_share": share(clean, "check_seconds")}


def summarize_prefix_reuse(rows: list[dict], tasks: list[str], results: list[dict]) -> list[dict]:
    """Per task: the mean times to first token, and the default strategy's tokens/s with the buffer warm,
    against the tokens/s (cold, on the same records) of `hf-pld` and llama.cpp in `results`."""
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
                            "idle_exact_match": ratio(sum(compared), len(compared))})
    return summary


def decode_speed(rows: list[dict]) -> float | None:
    """Tokens/s after the first token, i.e. without the prefill every strategy pays alike (None for
    a generator that does not report its first token)."""
    if not rows or any(r["first_token_seconds"] is None for r in rows):
        return None
    return ratio(sum(r["new_tokens"] - 1 for r in rows), sum(r["seconds"] - r["first_token_seconds"] for r in rows))


def totals(rows: list[dict]) -> tuple[int, float]:
    return sum(r["new_tokens"] for r in rows), sum(r["seconds"] for r in rows)


def fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


COLUMNS = (  # name, the summary key an optional column shows only when some entry has it, cell
    ("task", None, lambda s: s["task"]),
    ("strategy", None, lambda s: s["strategy"]),
    ("n", None, lambda s: str(s["records"])),
    ("tok/s", None, lambda s: fmt(s["tokens_per_second"], ".1f")),
    ("speedup (mean)", None, lambda s: fmt(s["speedup_mean"], ".2f", "x")),
    ("speedup (total)", None, lambda s: fmt(s["speedup_total"], ".2f", "x")),
    ("after 1st token", None, lambda s: fmt(s["decode_speedup"], ".2f", "x")),
    ("vs llama.cpp", "vs_llama_cpp", lambda s: fmt(s["vs_llama_cpp"], ".2f", "x")),
    ("vs llama.cpp after 1st token", "vs_llama_cpp", lambda s: fmt(s["vs_llama_cpp_decode"], ".2f", "x")),
    ("accepted/step", None, lambda s: fmt(s["mean_accepted"])),
    ("exact vs ar", None, lambda s: fmt(s["exact_match"], ".0%")),
    ("complete", None, lambda s: fmt(s["complete"], ".0%")),
    ("fix rate", "fix_rate",
     lambda s: f"{s['fix_rate']:.0%} ({s['fixed']}/{s['fix_tried']})" if s["fix_tried"] else "n/a"),
    ("tests kept", "kept", lambda s: "n/a" if s["kept"] is None else f"{s['kept']}/{s['kept'] + s['broken']}"),
    ("broken (flagged)", "broken", lambda s: "n/a" if s["broken"] is None else f"{s['broken']} ({s['flagged']})"),
    ("repaired", "repaired",
     lambda s: "n/a" if s["repaired"] is None else f"{s['repaired']} ({s['repair_passes']} passes)"),
    ("repair time", "repair_share", lambda s: fmt(s["repair_share"], ".0%")),
    ("check time", "check_share", lambda s: fmt(s["check_share"], ".1%")),
    ("first token", None, lambda s: fmt(s["first_token_seconds"], ".3f", "s")),
    ("max RSS", None, lambda s: fmt(s["max_rss_mb"], ".0f", " MB")),
    ("CUDA peak", "cuda_peak_mb", lambda s: fmt(s["cuda_peak_mb"], ".0f", " MB")),
    ("attr. coverage", None, lambda s: fmt(s["attribution_coverage"], ".0%")),
    ("attr. precision", None, lambda s: fmt(s["attribution_precision"], ".0%")),
)


def table(summary: list[dict], unavailable: dict[str, str]) -> Table:
    columns = [(name, cell) for name, key, cell in COLUMNS
               if key is None or any(s[key] is not None for s in summary)]
    t = Table(title="assistant bench", caption="; ".join(f"{k}: unavailable ({v})" for k, v in unavailable.items()))
    for name, _ in columns:
        t.add_column(name, justify="left" if name in ("task", "strategy") else "right")
    for s in summary:
        t.add_row(*(cell(s) for _, cell in columns))
    return t


def prefix_table(summary: list[dict]) -> Table:
    t = Table(title="prefix reuse: the same edit request twice, and after the buffer was idle (whole answer)")
    for name in ("task", "n", "first token cold", "first token again", "again / cold", "after idle", "idle / cold",
                 "tok/s after idle", "vs hf-pld", "vs llama.cpp", "exact vs ar"):
        t.add_column(name, justify="left" if name == "task" else "right")
    for s in summary:
        t.add_row(s["task"], str(s["records"]), fmt(s["cold_first_token_seconds"], ".3f", "s"),
                  fmt(s["warm_first_token_seconds"], ".3f", "s"), fmt(s["warm_over_cold"], ".0%"),
                  fmt(s["idle_first_token_seconds"], ".3f", "s"), fmt(s["idle_over_cold"], ".0%"),
                  fmt(s["idle_tokens_per_second"], ".1f"), fmt(s["idle_vs_hf_pld"], ".2f", "x"),
                  fmt(s["idle_vs_llama_cpp"], ".2f", "x"), fmt(s["idle_exact_match"], ".0%"))
    return t


def step_table(costs: dict[str, dict]) -> Table:
    t = Table(title=f"the cost of a forward after the same context (best of {step_costs.STEP_REPEATS}; "
                    f"prefill best of {step_costs.PREFILL_REPEATS})")
    for name in ("forward of", "context", "prefill", "one-token step", f"{step_costs.VERIFY}-token verification",
                 "verification / step", "step vs llama.cpp", "prefill vs llama.cpp"):
        t.add_column(name, justify="left" if name == "forward of" else "right")
    for name, c in costs.items():
        t.add_row(name, str(c["context"]), fmt(c["prefill_seconds"], ".2f", "s"),
                  fmt(c["step_seconds"] * 1000, ".1f", " ms"), fmt(c["verify_seconds"] * 1000, ".1f", " ms"),
                  fmt(c["verify_over_step"], ".2f", "x"), fmt(c["step_vs_llama_cpp"], ".2f", "x"),
                  fmt(c["prefill_vs_llama_cpp"], ".2f", "x"))
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


def environment(assistant, max_new_tokens: int) -> dict:
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
            "weights": loaded.weights, "model": loaded.name, "model_sha256": loaded.sha256,
            "max_new_tokens": max_new_tokens, "max_draft": assistant.draft_ceiling,
            "command": " ".join(sys.argv)}


def finish(plan_: Plan, runner: Runner, rows: list[dict], costs: dict[str, dict], env: dict, interrupted: bool,
           console) -> None:
    quiet = [r for r in rows if "busy" not in r]
    summary = summarize(quiet, plan_.tasks, plan_.strategies)
    reuse = summarize_prefix_reuse(quiet, plan_.tasks, summary)
    loaded = busy.summarize([r for r in rows if "busy" in r], plan_.tasks, plan_.strategies)
    (plan_.out / "summary.json").write_text(json.dumps(
        {"environment": env, "interrupted": interrupted, "unavailable": runner.unavailable,
         "llama_cpp": runner.llama_info or None, "step_costs": costs, "results": summary,
         "prefix_reuse": reuse, "busy": loaded}, indent=1) + "\n")
    chart(summary, quiet, plan_.out / "chart.png")
    if costs:
        console.print(step_table(costs))
    console.print(table(summary, runner.unavailable))
    if reuse:
        console.print(prefix_table(reuse))
    if loaded:
        console.print(busy.table(loaded))
    console.print(f"results in {plan_.out}/ (rows.jsonl, summary.json, chart.png)")


# --- the whole run ---------------------------------------------------------------------------------

def run(plan_: Plan, assistant, model: str, load) -> bool:
    """Measure the plan with `assistant` (prefix reuse off) and write the results; `load(weights)` makes
    another Assistant of `model` for a strategy on other weights. True when Ctrl-C cut the run short."""
    assistant.measured_costs()  # a first run measures them now, not while strategies are timed
    plan_.out.mkdir(parents=True, exist_ok=True)
    runner = Runner(assistant, plan_.max_new_tokens, model, load)
    env = environment(assistant, plan_.max_new_tokens) | {"busy": plan_.busy}
    if {data.FIX_TASK, data.PRESERVE_TASK} & set(plan_.tasks):  # how the sandbox that runs tests cut the network
        env["sandbox_network"] = "unshare -n" if sandbox.network_namespace() else "socket guard"
    rows: list[dict] = []
    costs: dict[str, dict] = {}
    interrupted = False
    # Piped output would be cut to 80 columns, too narrow for the table.
    console, progress_console = Console(width=None if sys.stdout.isatty() else 180), Console(stderr=True)
    try:
        strategies = runner.warm_up(runner.check(plan_.strategies), plan_.records[0])
        progress_console.print(f"measuring the cost of a forward after {step_costs.CONTEXT} tokens of context")
        costs = runner.forward_costs(plan_.records)
        with open(plan_.out / "rows.jsonl", "w") as jsonl, \
                Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                         console=progress_console) as progress:
            bar = progress.add_task("bench", total=len(plan_.records) * len(strategies))
            for record in plan_.records:
                results: dict[str, Run] = {}
                for strategy in strategies:
                    progress.update(bar, description=f"{record.task} {record.id[:24]} {strategy}")
                    try:
                        row, result = measure(runner, strategy, record, results)
                    except RewriteError as error:  # e.g. a prompt longer than the model's context
                        row, result = {"task": record.task, "id": record.id, "strategy": strategy,
                                       "error": str(error)}, None
                    jsonl.write(json.dumps(row) + "\n")
                    jsonl.flush()
                    if result is None:  # every strategy shares the prompt: the record cannot run at all
                        progress.advance(bar, len(strategies) - strategies.index(strategy))
                        break
                    rows.append(row)
                    results[strategy] = result
                    if plan_.busy:
                        rows.append(measured_busy(runner, strategy, record, results, row, plan_.busy))
                        jsonl.write(json.dumps(rows[-1]) + "\n")
                        jsonl.flush()
                    progress.advance(bar)
                if record.is_edit and results and record.task != data.PRESERVE_TASK:
                    progress.update(bar, description=f"{record.task} {record.id[:24]} {PREFIX_REUSE}")
                    rows.append(prefix_reuse(runner, record, results.get("ar")))
                    jsonl.write(json.dumps(rows[-1]) + "\n")
                    jsonl.flush()
    except KeyboardInterrupt:
        interrupted = True
        progress_console.print("interrupted: summarizing what was measured")
    finish(plan_, runner, rows, costs, env, interrupted, console)
    return interrupted
