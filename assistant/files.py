"""Writing files whole or not at all, reading them without trusting them, and taking turns.

Every writer (the command line, the model cache, the measured forward costs, the tuned
settings) gets these from here, so there is one way to do each:

- a file is written to a temporary file beside it (beside a link's target, for a link), synced,
  given the old file's owner, group and mode, then renamed over it (atomic on POSIX), so a reader
  or a crash sees the old file or the new one, never half of one, and the temporary file is
  removed whatever happens; its old text may be kept first as a backup (PATH~), itself written
  whole or not at all;
- a file with several hard links is the exception: a rename would give one of its names a new
  file and leave the others on the old one, so it is written over in place, that every name
  sees the new text (as Vim's `backupcopy=auto` and Emacs's `backup-by-copying-when-linked`
  do), after its old text is copied beside it, where a failed write leaves it;
- a JSON file the program wrote earlier is read as "maybe": missing, unreadable or corrupt
  reads as None and the caller rebuilds it;
- a lock is an fcntl lock on a file, released by the kernel when its holder dies, so a killed
  process never blocks the next one.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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


class WriteError(OSError):
    """A file that could not be written; the message names it, and where its old text is if a write over a
    hard-linked file failed half-way."""


class BackupError(WriteError):
    """The copy of a file's old text could not be made; nothing was written."""


def write_atomically(path: Path, data: bytes, backup: bool = False) -> list[str]:
    """Replace the file at `path` (a link's target, for a link) by `data` in one step, keeping its owner, group
    and mode (a new file gets the umask's), after copying its old text to PATH~ when `backup` is asked; a file
    with several hard links is written over in place instead (`write_linked`). Returns what of the owner and
    mode could not be kept (a user may not give a file to another owner)."""
    target = Path(os.path.realpath(path))
    if target.exists() and os.stat(target).st_nlink > 1:
        write_linked(target, data, backup)
        return []  # the same inode: its owner and mode stay
    with temporary_beside(target) as temporary:
        write_synced(temporary, data)
        lost = keep_owner_and_mode(temporary, target)
        if backup and target.exists():
            keep_backup(target)
        os.replace(temporary, target)
    return lost


def keep_owner_and_mode(new: Path, old: Path) -> list[str]:
    """Give `new` the owner, group and mode of `old` (a new file's mode if there is none); what could not be
    kept, said in words."""
    if not old.exists():
        os.chmod(new, new_file_mode())
        return []
    was, lost = os.stat(old), []
    try:
        os.chown(new, was.st_uid, was.st_gid)
    except PermissionError:
        lost.append(f"its owner and group ({was.st_uid}:{was.st_gid})")
    os.chmod(new, stat.S_IMODE(was.st_mode))  # after chown, which may clear the set-id bits
    if stat.S_IMODE(os.stat(new).st_mode) != stat.S_IMODE(was.st_mode):
        lost.append(f"its mode ({stat.S_IMODE(was.st_mode):o})")
    return lost


def write_linked(target: Path, data: bytes, backup: bool) -> None:
    """Write `data` over a file with several hard links, in place, so that every name sees it. Its old text is
    copied first (PATH~, or without `backup` a hidden copy, removed once the new text is synced); a write that
    fails leaves the copy and says where it is."""
    copy = keep_backup(target, None if backup else target.with_name(f".{target.name}.original"))
    try:
        with open(target, "r+b") as file:
            file.write(data)
            file.truncate()
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        raise WriteError(f"{target}: writing it in place failed ({error.strerror or error}); its old text is "
                         f"in {copy}") from None
    if not backup:
        copy.unlink()


def keep_backup(target: Path, backup: Path | None = None) -> Path:
    """Copy `target` to `backup` (PATH~ unless named; mode and times kept) in one step; a failed copy leaves
    nothing. Returns the copy."""
    backup = backup or target.with_name(target.name + "~")
    try:
        with temporary_beside(backup) as copy:
            shutil.copy2(target, copy)
            os.replace(copy, backup)
    except OSError as error:
        raise BackupError(f"{target}: cannot write the backup {backup} ({error.strerror or error}); nothing "
                          f"written") from None
    return backup


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
