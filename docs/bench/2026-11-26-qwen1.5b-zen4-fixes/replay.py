"""Replays this run's first answers (the `pld+h@repairs=0` rows) through the repair of the current code.

Greedy decoding gives the same first answer to the same prompt, so what the current code's repair
makes of these answers is what it would make of them in a new run, as long as no model pass is
needed: a model pass is refused here and counted. Every answer whose text the repair changed is run
against its module's own tests in the bench's sandbox. Run from the repository root:
`.venv/bin/python docs/bench/2026-11-26-qwen1.5b-zen4-fixes/replay.py > docs/bench/2026-11-26-qwen1.5b-zen4-fixes/replay.txt`
"""

import json
import subprocess
import sys
import time
from pathlib import Path

from assistant.bench import preserve
from assistant.engine.events import Result, Stats
from assistant.engine.repair import Edit, checked

ROWS = Path(__file__).with_name("rows.jsonl")


def no_model(edit):
    raise ValueError("a model pass was needed")


def replay(row: dict) -> tuple[Result, float, preserve.PreserveRecord]:
    module = row["id"].split("-")[1]
    [record] = [record for record in preserve.records([module]) if record.id == row["id"]]
    first = Result(row["text"], [], Stats(row["new_tokens"], 1, row["seconds"], 1, 0, 0, 0.0), "eos", "m", "w", [])
    started = time.perf_counter()
    events = list(checked(Edit(record.source, record.instruction, language="python"), (e for e in [first]), no_model,
                          2, None))
    return events[-1], time.perf_counter() - started, record


def main() -> None:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    print(f"replay at {commit} of {ROWS.parent.name}'s pld+h@repairs=0 rows")
    kept = touched_seconds = fix_seconds = 0.0
    rows = [json.loads(line) for line in ROWS.open()]
    first_answers = [row for row in rows if row["task"] == "preserve" and row["strategy"] == "pld+h@repairs=0"]
    for row in first_answers:
        result, seconds, record = replay(row)
        if result.text == row["text"]:
            passed, outcome = row["kept_passing"], "unchanged: " + row["test_outcome"][:60]
        else:
            test = preserve.run_tests(record.module, result.text, record.test_module)
            passed, outcome = test.passed, "repaired: " + test.reason[:60]
            touched_seconds, fix_seconds = touched_seconds + row["seconds"], fix_seconds + seconds
        kept += bool(passed)
        notes = "; ".join(result.check.notes)  # "no repair: a model pass was needed" where one was
        print(f"{row['id']}: {len(row['problems'])} problems -> {len(result.problems)} in {seconds:.3f} s; "
              f"{notes + '; ' if notes else ''}{outcome}")
    print(f"kept passing: {kept:.0f} of {len(first_answers)}; repair adds {100 * fix_seconds / touched_seconds:.2f}% "
          f"to the {touched_seconds:.0f} s of the edits it touched")


if __name__ == "__main__":
    sys.exit(main())
