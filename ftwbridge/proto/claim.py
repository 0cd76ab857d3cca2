"""Home-claim codes (PROTOCOL.md part C): 8 Crockford base32 characters shown as XXXX-XXXX.

The box shows the code to its owner and sends only `claim.offer {codeHash, expiresAtMs}`, the
SHA-256 of the normalised code. Normalising upper-cases, drops dashes and spaces, and reads
I and L as 1 and O as 0, as Crockford's alphabet does.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
CODE_CHARS: Final = 8
_READS_AS: Final = str.maketrans({"I": "1", "L": "1", "O": "0"})


def new_code() -> str:
    """A fresh code as shown to the owner, e.g. `7K3M-Q9ZD` (from the OS's randomness)."""
    raw = "".join(secrets.choice(ALPHABET) for _ in range(CODE_CHARS))
    return f"{raw[:4]}-{raw[4:]}"


def normalise(code: str) -> str | None:
    """The 8 code characters of what a person typed, or None when it cannot be a code."""
    text = code.upper().replace("-", "").replace(" ", "").translate(_READS_AS)
    if len(text) != CODE_CHARS or any(ch not in ALPHABET for ch in text):
        return None
    return text


def code_hash(code: str) -> bytes | None:
    """SHA-256 (32 bytes) of the normalised code, or None when it cannot be a code."""
    text = normalise(code)
    return None if text is None else hashlib.sha256(text.encode("ascii")).digest()
