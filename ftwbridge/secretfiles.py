"""Secrets read from files: `mesh_key_file`, `kek_file`, `database_url_file`, and a folder of
secrets (`secrets_dir`) holding files named `mesh_key`, `kek` and `database_url`, as
container runtimes (`/run/secrets`) and systemd's credentials (`$CREDENTIALS_DIRECTORY`,
`LoadCredential=`) hand them over.

A secret's file holds the value alone; whitespace at its ends (the newline an editor or `echo`
adds) is dropped. Every way a file can be unusable is one sentence naming the setting and the
file, never its content (docs/operations.md, "Secrets in files").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FILE_SECRETS = ("mesh_key", "kek", "database_url")
"""The secrets that may come from a file: `<name>_file`, or `<name>` in `secrets_dir`."""
MAX_SECRET_BYTES = 4096
"""The largest secret file read, bytes: a key is 64 characters, a libpq URL a few hundred."""


def read_secret(setting: str, path: Path) -> str:
    """The secret in the file `path` for `setting`, its ends stripped of whitespace.

    Raises:
        ValueError: the file is missing, a folder, unreadable, too large, not UTF-8 or empty;
            one sentence naming `setting` and `path`, never the content.
    """
    where = f"{setting} is read from {path}, which"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SECRET_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{where} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{where} is a folder, not a file") from None
    except OSError as exc:
        raise ValueError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise ValueError(f"{where} is larger than {MAX_SECRET_BYTES} bytes: not a secret's file")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{where} is empty")
    return text


def _given(data: dict[str, Any], key: str) -> bool:
    value = data.get(key)
    return value is not None and not (
        isinstance(value, str) and value.strip().lower() in ("", "none")
    )


def read_secret_files(data: dict[str, Any], origin: dict[str, str]) -> None:
    """Put into `data` (raw settings: the file's, then the variables') each secret its
    `<name>_file` or `secrets_dir` names, and into `origin` where it came from, so that
    pydantic's checks of the value name the file. A secret given directly wins over
    `secrets_dir`, which only fills in what is not set.

    Raises:
        ValueError: a secret given both directly and by `<name>_file`; a `secrets_dir` that
            is not a folder; a file `read_secret` refuses. One sentence each.
    """
    folder = Path(str(data["secrets_dir"])) if _given(data, "secrets_dir") else None
    if folder is not None and not folder.is_dir():
        raise ValueError(
            f"secrets_dir {folder} (from {origin.get('secrets_dir', 'the defaults')})"
            " is not a folder"
        )
    for name in FILE_SECRETS:
        file_key = f"{name}_file"
        if _given(data, file_key):
            if _given(data, name):
                raise ValueError(
                    f"{name} is set in {origin[name]} and {file_key} in {origin[file_key]};"
                    " set only one of them"
                )
            path = Path(str(data[file_key]))
            data[name] = read_secret(file_key, path)
            origin[name] = f"{path} ({file_key} in {origin[file_key]})"
        elif folder is not None and not _given(data, name) and (folder / name).exists():
            data[name] = read_secret(name, folder / name)
            origin[name] = f"{folder / name} (secrets_dir)"
