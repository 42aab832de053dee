"""What `assistant bench` will measure: its tasks, strategies and records, checked before the model loads,
so that a bad argument or unreadable data costs no model load (`assistant/cli/bench.py` is the command).

The engine's strategies come from the engine contract (`assistant.STRATEGIES`), never a list of the
bench's own; the bench adds the generators it measures the engine against: transformers' own prompt
lookup (`hf-pld`), llama.cpp (`llama-cpp`) and, on CanItEdit, the benchmark's own chat prompt through
the engine (`reference-prompt`). An engine strategy may run on other weights (`ar@float32`) or with
another number of repair passes (`pld+h@repairs=0`), or in one pass where it would edit definition by
definition (`pld+h@one-pass`: the single pass the per-definition passes are measured against), or with
drafts that never grow past the tuned ceiling (`pld+h@long-drafts=0`: what long drafts are measured against),
or verifying the continuations of N best-ranked candidates together as a token tree (`pld+h@tree=N`, N from 2
to 8: measured against the default's one chain), or with attention's products in another precision
(`pld+h@attention=float32`, exact against `ar@attention=float32`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from assistant import STRATEGIES as ENGINE_STRATEGIES
from assistant.bench import data
from assistant.model import exactness, weights

HF_PLD, LLAMA_CPP, REFERENCE_PROMPT = "hf-pld", "llama-cpp", "reference-prompt"
STRATEGIES = (*ENGINE_STRATEGIES, HF_PLD, LLAMA_CPP, REFERENCE_PROMPT)
DEFAULT_TASKS = ("code-edit", "text-edit")
DEFAULT_STRATEGIES = ("ar", HF_PLD, *(s for s in ENGINE_STRATEGIES if s != "ar"))
MAX_DRAFT = exactness.FEW - 1  # `--max-draft`: a draft and its token fit the rows one forward computes alike
REPAIRS = re.compile(r"repairs=([0-9]+)")  # a strategy's variant with another number of repair passes
ONE_PASS = "one-pass"  # a strategy's variant that makes an edit asked of each definition in one pass
SHORT_DRAFTS = "long-drafts=0"  # a strategy's variant whose drafts never grow past the tuned ceiling
TREE = re.compile(r"tree=([2-8])")  # a strategy's variant that verifies N candidates' drafts as one token tree
SIDE_BY_SIDE = re.compile(r"side-by-side=([1-8])")  # a strategy's variant that decodes N definition passes at once
ATTENTION = re.compile(r"attention=(float32|bfloat16)")  # a strategy's variant with attention in that precision


class BenchError(ValueError):
    """Bad arguments or data; reported before the model is loaded."""


@dataclass
class Plan:
    tasks: list[str]
    strategies: list[str]
    records: list[data.Record]  # task by task, `samples` each, spread over the task's sources
    max_new_tokens: int | None  # None: each answer's own budget, as the front doors give
    out: Path
    busy: int = 0  # CPU-bound processes spinning beside a second, busy run of each (`busy.py`); 0: none
    left_out: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # task -> problem -> packages missing


def split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def plan(args) -> Plan:
    tasks = list(dict.fromkeys(split_list(args.tasks)))
    if not tasks:
        raise BenchError("no tasks given")
    for task in tasks:
        if task not in data.TASKS:
            raise BenchError(f"unknown task {task!r}: use one of {', '.join(data.TASKS)}")
    strategies = planned_strategies(split_list(args.strategies))
    if args.samples < 1:
        raise BenchError("--samples must be at least 1")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise BenchError("--max-new-tokens must be at least 1")
    if args.max_draft is not None and not 1 <= args.max_draft <= MAX_DRAFT:
        raise BenchError(f"--max-draft must be between 1 and {MAX_DRAFT}")
    records = chosen_records(tasks, args.samples, split_list(args.records) if args.records else None)
    out = args.out or Path("bench-results") / datetime.now().strftime("%Y%m%d-%H%M%S")
    if args.busy < 0:
        raise BenchError("--busy must be 0 or more")
    left_out = {task: data.left_out(task) for task in tasks}
    return Plan(tasks, strategies, records, args.max_new_tokens, out, args.busy,
                {task: problems for task, problems in left_out.items() if problems})


def planned_strategies(strategies: list[str]) -> list[str]:
    """The strategies known here, `ar` first (the reference), then those on other weights (`ar@W`, the
    reference of `X@W`), then the others in the order given."""
    for strategy in strategies:
        base, at, other = strategy.partition("@")
        if strategy not in STRATEGIES and not (at and base in ENGINE_STRATEGIES and
                                               (other in weights.FORMATS or other in (ONE_PASS, SHORT_DRAFTS)
                                                or REPAIRS.fullmatch(other) or TREE.fullmatch(other)
                                                or SIDE_BY_SIDE.fullmatch(other) or ATTENTION.fullmatch(other))):
            raise BenchError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}, or an engine "
                             f"strategy with other weights, such as ar@float32 ({', '.join(weights.FORMATS)}), "
                             f"or with another number of repair passes, such as pld+h@repairs=0, or in one pass "
                             f"where it would edit definition by definition, pld+h@{ONE_PASS}, or with drafts "
                             f"that stop at the tuned ceiling, pld+h@{SHORT_DRAFTS}, or with a token tree of N "
                             f"candidates' drafts (N from 2 to 8), such as pld+h@tree=3, or with N passes over "
                             f"definitions decoded side by side (N from 1 to 8), such as pld+h@side-by-side=1, or "
                             f"with attention in another precision, such as pld+h@attention=float32")
    return list(dict.fromkeys(["ar"] + sorted(strategies, key=lambda s: not s.startswith("ar@"))))


def more_records(task: str, ids: set[str]) -> list[data.Record]:
    """The records `ids` name beyond a task's own: `preserve` records of modules held out of its development set."""
    try:
        return data.named_preserve_records(ids) if task == data.PRESERVE_TASK else []
    except data.DataError as error:
        raise BenchError(f"cannot make the preserve records asked for: {error}") from error


def chosen_records(tasks: list[str], samples: int, chosen: list[str] | None) -> list[data.Record]:
    """`samples` records of each task (spread over its sources), or the records named in `chosen`."""
    records = []
    for task in tasks:
        try:
            available = data.load(task)
        except (data.DataError, OSError) as error:
            raise BenchError(f"cannot read the {task} data: {error}") from error
        if chosen is not None:
            records += [record for record in available if record.id in chosen]
            records += more_records(task, set(chosen) - {record.id for record in available})
        elif samples > len(available):
            raise BenchError(f"--samples {samples} is more than the {len(available)} {task} eval records")
        else:
            records += data.sample(available, samples)
    unknown = sorted(set(chosen or ()) - {record.id for record in records})
    if unknown:
        raise BenchError(f"no record {unknown[0]!r} in the tasks {', '.join(tasks)}")
    return records
