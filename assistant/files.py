"""Writing files whole or not at all, reading them without trusting them, and taking turns.

Every writer (the command line, the model cache, the measured forward costs, the tuned
settings) gets these from here, so there is one way to do each:

- a file is written to a temporary file beside it, synced, then renamed over it (atomic on
  POSIX), so a reader or a crash sees the old file or the new one, never half of one, and the
  temporary file is removed whatever happens;
- a JSON file the program wrote earlier is read as "maybe": missing, unreadable or corrupt
  reads as None and the caller rebuilds it;
- a lock is an fcntl lock on a file, released by the kernel when its holder dies, so a killed
  process never blocks the next one.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def temporary_beside(path: Path) -> Iterator[Path]:
    """A new empty file in `path`'s folder, removed on leaving unless it was renamed away meanwhile."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def write_atomically(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace `path` by `data` in one step; `mode` defaults to what a new file gets under the umask."""
    with temporary_beside(path) as temporary:
        write_synced(temporary, data)
        os.chmod(temporary, new_file_mode() if mode is None else mode)
        os.replace(temporary, path)


def new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def read_json(path: Path):
    """What `path` holds as JSON, or None when it is missing, unreadable or not JSON."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


@contextmanager
def locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on the file `path` (created if needed) while inside.

    Without `wait`, yields False at once (and holds nothing) when another holder has it."""
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(handle)
