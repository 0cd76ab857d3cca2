"""Files replaced whole or not at all, for the bridge's state and the stub box's.

`write_atomic(path, data)` writes a unique temporary file in the same folder, flushes and
fsyncs it, renames it over `path`, then fsyncs the folder: a crash leaves the old file or the
new one, never a mix (POSIX rename(2) is atomic within one filesystem). It holds no lock:
callers serialize writes to one file themselves.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (bytes) atomically, creating its folder if needed; the new
    file has mode 0600 (`mkstemp`'s). Blocks: from trio, call it through `trio.to_thread`.

    Raises:
        OSError: the folder cannot be written (the old file, if any, is left as it was).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
