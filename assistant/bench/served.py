"""Servers on the benchmark's edits: each record sent as a streamed chat completion (the doors' request,
`RemoteAssistant`: the engine's edit prompt, `prediction` = the original text) to each server, one
after another, and timed end to end on the client.

    python -m assistant.bench.served --serve http://127.0.0.1:8000 [--vllm http://127.0.0.1:8300] --samples 3

Against `assistant serve` every record runs twice, with the server's strategy (`serve:pld+h`, drafts from
the prompt that holds the prediction) and plainly (`serve:ar`, chosen by the extension field): the texts
must be the same, and the ratio of their times is the speed-up. A vLLM server runs its own n-gram
speculation (`vllm:ngram`) on the same requests; its texts differ (it renders the messages itself and
the answer is not begun with the code fence). For `serve:pld+h`, the attribution computed by alignment
(what a door computes against a server other than ours) is scored against the engine's own (j*):
coverage, the share of j*-attributed characters it attributes; precision, the share of its attributed
characters whose source is j*'s.
"""

from __future__ import annotations

import argparse
import json
import time

from assistant.bench import data
from assistant.bench.attribution_quality import attributed_sources
from assistant.engine.alignment import copied_spans
from assistant import RemoteError
from assistant.engine.remote import RemoteAssistant

SIZE = (400, 1200)  # characters of a document measured


def timed(remote: RemoteAssistant, record: data.Record, strategy: str | None) -> dict:
    """One request's answer and figures; a server that failed it is noted, and the run goes on."""
    options = {"strategy": strategy} if strategy else {}
    started = time.perf_counter()
    try:
        result = remote.rewrite_text(record.document, record.instruction, **options)
    except RemoteError as error:
        return {"error": str(error)}
    seconds = time.perf_counter() - started
    return {"text": result.text, "seconds": seconds, "stopped": result.stopped, "new_tokens": result.stats.new_tokens,
            "accepted": result.stats.accepted, "drafted": result.stats.drafted, "spans": result.spans}


def agreement(document: str, text: str, engine_spans) -> tuple[int, int, int, int]:
    """(j*-attributed characters, of which the alignment attributes, alignment-attributed, of which as j*)."""
    engine = attributed_sources(text, engine_spans)
    aligned = attributed_sources(text, copied_spans(document, text))
    return (sum(e is not None for e in engine), sum(e is not None and a is not None for e, a in zip(engine, aligned)),
            sum(a is not None for a in aligned), sum(a is not None and a == e for e, a in zip(engine, aligned)))


def run(serve: str, vllm: str | None, records: list[data.Record]) -> dict:
    servers = {"serve:pld+h": (RemoteAssistant(serve), None), "serve:ar": (RemoteAssistant(serve), "ar")}
    if vllm:
        servers["vllm:ngram"] = (RemoteAssistant(vllm), None)
    for remote, strategy in servers.values():  # first-call costs (a prefill, a compilation) out of the timings
        remote.rewrite_text(records[0].document, records[0].instruction, max_new_tokens=8,
                            **({"strategy": strategy} if strategy else {}))
    rows, counts = [], [0, 0, 0, 0]
    for record in records:
        row = {"id": record.id, "task": record.task}
        for label, (remote, strategy) in servers.items():
            row[label] = timed(remote, record, strategy)
            print(record.id, label, row[label].get("error") or
                  f"{row[label]['seconds']:.2f} s, {row[label]['new_tokens']} tokens, "
                  f"{row[label]['accepted']} accepted", flush=True)
        if any("error" in row[label] for label in ("serve:pld+h", "serve:ar")):
            continue
        row["same_text"] = row["serve:pld+h"]["text"] == row["serve:ar"]["text"]
        print(record.id, "same text" if row["same_text"] else "TEXTS DIFFER", flush=True)
        counts = [a + b for a, b in zip(counts, agreement(record.document, row["serve:pld+h"]["text"],
                                                            row["serve:pld+h"]["spans"]))]
        rows.append(row)
    return {"rows": rows, "totals": totals(rows, list(servers)),
            "client_attribution": {"coverage": counts[1] / max(1, counts[0]), "precision": counts[3] / max(1, counts[2])}}


def totals(rows: list[dict], labels: list[str]) -> dict:
    """Over the records every server answered."""
    rows = [row for row in rows if not any("error" in row[label] for label in labels)]
    out = {"records": len(rows)}
    if not rows:
        return out
    for label in labels:
        seconds = sum(row[label]["seconds"] for row in rows)
        tokens = sum(row[label]["new_tokens"] for row in rows)
        out[label] = {"seconds": round(seconds, 2), "new_tokens": tokens, "tokens_per_second": round(tokens / seconds, 2),
                      "accepted_prediction_tokens": sum(row[label]["accepted"] for row in rows),
                      "finished": sum(row[label]["stopped"] in ("eos", "stop") for row in rows)}
    out["same_text"] = f"{sum(row['same_text'] for row in rows)}/{len(rows)}"
    out["speedup_over_ar"] = round(out["serve:ar"]["seconds"] / out["serve:pld+h"]["seconds"], 2)
    if "vllm:ngram" in labels:
        out["speedup_over_vllm"] = round(out["vllm:ngram"]["seconds"] / out["serve:pld+h"]["seconds"], 2)
    return out


def sized(records: list[data.Record]) -> list[data.Record]:
    """The records whose document has SIZE characters: whole answers of a few hundred tokens, a few minutes
    of decoding per server on 2 cores."""
    return [record for record in records if SIZE[0] <= len(record.document) <= SIZE[1]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", required=True, metavar="URL", help="an assistant serve")
    parser.add_argument("--vllm", metavar="URL", help="a vLLM server on the same model")
    parser.add_argument("--tasks", default="code-edit,text-edit")
    parser.add_argument("--samples", type=int, default=3, help="records per task (eval split, 400-1200 characters)")
    args = parser.parse_args(argv)
    records = [record for task in args.tasks.split(",") for record in sized(data.load(task))[:args.samples]]
    report = run(args.serve, args.vllm, records)
    print(json.dumps({"totals": report["totals"], "client_attribution": report["client_attribution"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
