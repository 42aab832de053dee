"""The benchmark records shipped in `benchdata/` (see its SOURCES.md), split once and for all into
`calibration` records (used to tune settings and find induction heads) and `eval` records
(used to measure), so that nothing is tuned on what it is measured on.

The `fix` task (HumanEvalFix Python, "Fix bugs in NAME.") is already a development split of its
set and carries each task's tests, so that the bench can check whether a rewrite is correct; all
its records are `eval` records. So are those of the `preserve` task (`preserve.py`): standard-library
modules to rewrite without changing what they do, each checked by CPython's own tests of it. Its
modules come shortest first (a whole module is rewritten, several times over with `ar` and repairs,
so a small sample stays affordable), and a module's instructions are taken in a turn of their own
(the first module's from the first, the second's from the second...), so that a small sample spans
both modules and instructions. The `canitedit` task (`canitedit.py`) is CanItEdit's development split,
each problem twice (its descriptive and its lazy instruction, in the groups `descriptive` and `lazy`, so a
sample of two is one problem asked both ways); all its records are `eval` records, less the problems whose
packages are not installed (`left_out`)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from assistant.bench import canitedit, preserve

FOLDER = Path(__file__).parent / "benchdata"
EDIT_TASKS = {"code-edit": "code_edit.jsonl", "text-edit": "text_edit.jsonl"}
SPEC_BENCH_TASKS = {"summarization": "summarization", "rag": "rag", "translation": "translation", "qa": "qa"}
MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
FIX_TASK, FIX_FILE = "fix", "humanevalfix_python_dev.jsonl"
PRESERVE_TASK = "preserve"
CANITEDIT_TASK = "canitedit"
TASKS = tuple(EDIT_TASKS) + (FIX_TASK, PRESERVE_TASK, CANITEDIT_TASK) + tuple(SPEC_BENCH_TASKS) + ("mt-bench",)


class DataError(ValueError):
    pass


@dataclass(frozen=True)
class Record:
    id: str
    task: str
    document: str  # the text to rewrite, or the question of a chat task
    instruction: str = ""  # empty for chat tasks
    earlier_turns: tuple[str, ...] = field(default=())  # MT-Bench: turns the model answers first
    group: str = ""  # where the record comes from: the edit sets' source, Spec-Bench's category, the bug type
    tests: str = ""  # `fix`, `canitedit`: Python that raises unless the rewritten document is correct
    language: str | None = None  # the LSP languageId the engine checks the answer as; None: unchecked
    module: str = ""  # `preserve`: the standard-library module the document is
    test_module: str = ""  # `preserve`: CPython's tests of it, run against the rewrite

    @property
    def is_edit(self) -> bool:
        return bool(self.instruction)


def split_of(record_id: str) -> str:
    return "calibration" if zlib.crc32(record_id.encode()) % 5 == 0 else "eval"


def read_jsonl(path: Path) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise DataError(f"{path}:{number}: not JSON: {error.msg}") from error
    return rows


def load(task: str, split: str = "eval", folder: Path = FOLDER) -> list[Record]:
    if task not in TASKS:
        raise DataError(f"unknown task {task!r}: use one of {', '.join(TASKS)}")
    try:
        if task in EDIT_TASKS:
            records = [Record(r["id"], task, r["input"], r["instruction"], group=r["source"])
                       for r in read_jsonl(folder / EDIT_TASKS[task])]
        elif task == FIX_TASK:
            return [fix_record(r) for r in read_jsonl(folder / FIX_FILE)] if split == "eval" else []
        elif task == PRESERVE_TASK:
            return preserve_records() if split == "eval" else []
        elif task == CANITEDIT_TASK:
            return canitedit_records(folder) if split == "eval" else []
        else:
            rows = read_jsonl(folder / "spec_bench_question.jsonl")
            categories = MT_BENCH if task == "mt-bench" else (SPEC_BENCH_TASKS[task],)
            records = [Record(str(r["question_id"]), task, r["turns"][-1] if task == "mt-bench" else r["turns"][0],
                              "", tuple(r["turns"][:-1]) if task == "mt-bench" else (), r["category"])
                       for r in rows if r["category"] in categories]
    except (KeyError, IndexError, TypeError) as error:
        raise DataError(f"benchmark data for {task!r} lacks a field: {error}") from error
    return [r for r in records if split_of(r.id) == split]


def fix_record(row: dict) -> Record:
    """The buggy function as a user would have it in a file (declaration, docstring, buggy body), and
    its tests ending with the call `check(NAME)` that runs them."""
    name, tests = row["entry_point"], row["test"]
    call = f"check({name})"
    if not tests.rstrip().endswith(call):
        tests += f"\n\n{call}\n"
    return Record(row["task_id"], FIX_TASK, row["prompt"] + row["buggy_solution"], f"Fix bugs in {name}.",
                  group=row["bug_type"], tests=tests, language="python")


def preserve_records(modules: tuple[str, ...] | list[str] = preserve.MODULES) -> list[Record]:
    """The `preserve` records of `modules` (the development set unless told), grouped by module, shortest module
    first, each module's instructions turned to start at its own."""
    try:
        found = preserve.records(modules)
    except preserve.PreserveError as error:
        raise DataError(str(error)) from error
    by_module: dict[str, list[Record]] = {}
    for r in found:
        by_module.setdefault(r.module, []).append(Record(r.id, PRESERVE_TASK, r.source, r.instruction, group=r.module,
                                                         language="python", module=r.module,
                                                         test_module=r.test_module))
    modules = sorted(by_module.values(), key=lambda records: len(records[0].document))
    return [record for turn, records in enumerate(modules)
            for record in records[turn % len(records):] + records[:turn % len(records)]]


def named_preserve_records(ids: set[str]) -> list[Record]:
    """The `preserve` records that `ids` name of modules outside the development set (`preserve-glob-type-hints`:
    any pure-Python standard-library module with tests of its own), so that a run can measure modules held out."""
    modules = sorted({found[0] for found in map(preserve.named, ids) if found is not None})
    return [record for record in preserve_records(modules) if record.id in ids] if modules else []


def canitedit_records(folder: Path = FOLDER) -> list[Record]:
    """Each problem whose packages are installed, asked with each instruction (`canitedit.INSTRUCTIONS`)."""
    return [Record(f"canitedit-{row['full_name']}-{kind}", CANITEDIT_TASK, row["before"], row[field_name],
                   group=kind, tests=row["tests"], language="python")
            for row in read_jsonl(folder / canitedit.FILE) if not canitedit.missing(row["requires"])
            for kind, field_name in canitedit.INSTRUCTIONS.items()]


def left_out(task: str, folder: Path = FOLDER) -> dict[str, list[str]]:
    """The problems of `task` that cannot run here, each with the packages it lacks (only CanItEdit's
    problems need packages)."""
    if task != CANITEDIT_TASK:
        return {}
    rows = read_jsonl(folder / canitedit.FILE)
    return {row["full_name"]: canitedit.missing(row["requires"]) for row in rows if canitedit.missing(row["requires"])}


def sample(records: list[Record], count: int) -> list[Record]:
    """The first `count` records taken in turn from each group (in file order within a group), so that
    a small sample spans every source of a task rather than the first one in the file."""
    groups: dict[str, list[Record]] = {}
    for record in records:
        groups.setdefault(record.group, []).append(record)
    in_turn = [group[i] for i in range(max(map(len, groups.values()), default=0)) for group in groups.values()
               if i < len(group)]
    return in_turn[:count]
