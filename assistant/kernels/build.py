"""Building and loading the C++ kernels: each source beside this file is compiled once per machine
into the cache with the system's g++ and loaded through ctypes (which releases the GIL).

Invariant: a library is loaded only when it is whole and was built from this source with these flags
by this compiler. The file name carries a stamp of all three, a build is written to a temporary file
and renamed into place, and a cached library is checked (its ELF header, its size against the
record written beside it, and its sha256) before it is mapped; a damaged one is built again over
it. Two processes that build at once build once: the second waits on the first's lock.

This is the one module below the engine that reads `config.settings()` (the cache folder and CXX)
itself: a kernel is a process-wide library built lazily at its first use, deep inside a format check,
a packing or a forward pass, and what it needs is the machine's, not a model's or a request's; passing
a folder and a compiler through every product to the one call that builds would thread two settings
through the whole model layer for nothing.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path

from assistant import config, files

log = logging.getLogger("assistant")


class KernelError(RuntimeError):
    """A kernel cannot run here; the message says why."""


def cpu_flags() -> set[str]:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return set()
    return set(flags.split(":", 1)[1].split())


class Kernel:
    """A C++ source beside this file, compiled once per machine into the cache with the system's g++
    and loaded through ctypes (which releases the GIL), on CPUs with `needs` (/proc/cpuinfo's flags).
    `ready(library)` says why a built library cannot run here after all, or None."""

    def __init__(self, source: str, flags: list[str], needs: set[str], signatures: dict, ready=lambda library: None):
        self.source, self.flags, self.needs = Path(__file__).with_name(source), flags, needs
        self.signatures, self.ready = signatures, ready
        self._lock = threading.Lock()
        self._library: ctypes.CDLL | None = None
        self._failure: str | None = None

    def library(self) -> ctypes.CDLL:
        """The compiled kernel, built into the cache on first use; raises KernelError where it cannot be."""
        if self._library is not None:  # asked on every step (`attention`): no lock once built
            return self._library
        with self._lock:
            if self._library is None and self._failure is None:
                try:
                    library = self.build(config.settings().cache / "kernels")
                    if (why := self.ready(library)) is not None:
                        raise KernelError(why)
                    self._library = library
                except (KernelError, OSError) as error:
                    self._failure = str(error)
                    log.info("no %s kernel here: %s", self.source.stem, self._failure)
            if self._library is None:
                raise KernelError(self._failure)
            return self._library

    def usable(self) -> bool:
        try:
            self.library()
        except KernelError:
            return False
        return True

    def failure(self) -> str | None:
        """Why the kernel cannot run here, once `library` was tried; None where it runs."""
        return self._failure

    def stamp(self, compiler: str = "") -> str:
        """Names the source and flags (and compiler): what was built or measured with another is not used."""
        return hashlib.sha256(self.source.read_bytes() + repr((compiler, self.flags)).encode()).hexdigest()[:16]

    def build(self, folder: Path) -> ctypes.CDLL:
        """The library from `folder`, compiled there first unless a whole one is there already."""
        if missing := self.needs - cpu_flags():
            raise KernelError(f"{self.source.name} needs a CPU with {', '.join(sorted(missing))}")
        compiler = config.settings().compiler or shutil.which("g++") or shutil.which("c++")
        if compiler is None:
            raise KernelError(f"{self.source.name} needs a C++ compiler (g++) to be built once")
        path = folder / f"{self.source.stem}-{self.stamp(compiler)}.so"
        folder.mkdir(parents=True, exist_ok=True)
        if not whole(path):
            with files.locked(folder / f"{path.name}.lock"):
                if not whole(path):  # another process may have built it while this one waited
                    if path.exists():
                        log.warning("the kernel library %s is damaged or unrecorded; building it again", path)
                    self.compile(compiler, path)
        library = ctypes.CDLL(str(path))
        for name, (argtypes, restype) in self.signatures.items():
            getattr(library, name).argtypes, getattr(library, name).restype = argtypes, restype
        return library

    def compile(self, compiler: str, path: Path) -> None:
        """Build the library at `path`, then record its size and sha256 beside it (`whole` checks them)."""
        log.info("building %s (once on this machine)", self.source.name)
        with files.temporary_beside(path) as temporary:
            done = subprocess.run([compiler, *self.flags, str(self.source), "-o", str(temporary)],
                                  check=False, capture_output=True, text=True)
            if done.returncode != 0:
                raise KernelError(f"building {self.source.name} failed: {done.stderr.strip()[-2000:]}")
            data = temporary.read_bytes()
            os.replace(temporary, path)
        record = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        files.write_atomically(record_of(path), json.dumps(record).encode())


def record_of(library: Path) -> Path:
    return library.with_name(library.name + ".json")


def whole(library: Path) -> bool:
    """Whether `library` is an ELF file of exactly the size and sha256 recorded when it was built. A
    truncated or foreign library mapped by ctypes kills the process (SIGBUS) when the missing pages are
    touched, so one that is not whole is never mapped: it is built again over, under the lock. This
    only reads: a library another process has renamed into place but not yet recorded is left to it."""
    record = files.read_json(record_of(library))
    try:
        data = library.read_bytes()
    except OSError:
        return False
    return (isinstance(record, dict) and data[:4] == b"\x7fELF" and record.get("size") == len(data)
            and record.get("sha256") == hashlib.sha256(data).hexdigest())


def flags(*isa: str) -> list[str]:
    """g++'s flags for a kernel using the instruction sets `isa` (-m...): every kernel's are these."""
    return ["-O3", *isa, "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared", "-std=c++20"]


