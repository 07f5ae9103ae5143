"""Files written whole: beside their place under a hidden name, then renamed
over it, so that a reader (or the next run, after a crash) finds the old
file or the whole new one, never part of one; nothing is left behind when
the writing fails. And JSON files read as untrusted input."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def written_whole(path: str | Path, mode: str = "wb", durable: bool = False) -> Iterator[IO]:
    """The file to write `path`'s new contents to; renamed over `path` when
    the block ends without an error. `durable`: on the disk before the
    rename (a checkpoint, a shard), not only in the page cache. The file
    gets the permissions a plain open would give it (0644), not a temporary
    file's 0600."""
    path = Path(path)
    f = tempfile.NamedTemporaryFile(mode, dir=path.parent, prefix=f".{path.name}.", delete=False)
    try:
        with f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(f.name, 0o644)
        os.replace(f.name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f.name)
        raise


class Unreadable(ValueError):
    """Why a file could not be read as JSON, in words for its reader."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = {}
    for key, value in pairs:
        if key in out:
            raise Unreadable(f"names {key!r} twice in one object")
        out[key] = value
    return out


def parse_json(text: str) -> Any:
    """json.loads, refusing an object that names a key twice: JSON leaves
    that open and Python keeps the last silently, so one of two settings a
    person wrote would be dropped unseen."""
    return json.loads(text, object_pairs_hook=_unique)


def read_json(path: str | Path) -> Any:
    """The value of a JSON file, or Unreadable: it cannot be read, is not
    UTF-8 text, is not JSON, or names a key twice in an object."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as error:
        raise Unreadable(f"cannot be read ({error.strerror})") from None
    except UnicodeDecodeError:
        raise Unreadable("is not UTF-8 text") from None
    try:
        return parse_json(text)
    except json.JSONDecodeError as error:
        raise Unreadable(f"is not JSON ({error.msg} at line {error.lineno})") from None
