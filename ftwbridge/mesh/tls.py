"""TLS on the internal hop (docs/operations.md, "Trust across the internal hop").

A process with `internal_certfile` and `internal_keyfile` serves TLS on its internal network:
an instance's internal listener (hypercorn's own `certfile`/`keyfile`), or a keys service's
TCP listener (`server_context`). A process with `mesh_cafile` speaks to the others only over
TLS (forwards to `https://` holders, the keys channel wrapped in TLS), verifying the peer's
certificate (chain and host name, `ssl`'s defaults for a client) against the cluster's CA in
that file and never the system's. `make cluster` makes such a CA and one certificate per
process (`cluster/ca.py`).
"""

from __future__ import annotations

import ssl
from pathlib import Path


def client_context(cafile: Path) -> ssl.SSLContext:
    """A TLS client context that trusts only the CA certificates in `cafile` (PEM), checks
    the server's host name, and speaks TLS 1.2 or later, never renegotiated
    (`ssl.OP_NO_RENEGOTIATION`: a renegotiation is refused with an alert).

    Raises:
        OSError, ssl.SSLError: the file cannot be read or holds no certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(cafile))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION  # TLS 1.2's: a read never has to write
    return context


def client_of(cafile: Path | None) -> ssl.SSLContext | None:
    """`client_context(cafile)`, or None when `cafile` is None (plain TCP)."""
    return None if cafile is None else client_context(cafile)


def server_of(certfile: Path | None, keyfile: Path | None) -> ssl.SSLContext | None:
    """`server_context(certfile, keyfile)`, or None when they are not set (plain TCP)."""
    if certfile is None or keyfile is None:
        return None
    return server_context(certfile, keyfile)


def server_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    """A TLS server context with the certificate chain in `certfile` and its key in `keyfile`
    (PEM), TLS 1.2 or later and never renegotiated (for a listener that is not hypercorn's;
    hypercorn builds its own from the same files).

    Raises:
        OSError, ssl.SSLError: a file cannot be read, or the key does not fit the certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_RENEGOTIATION  # TLS 1.2's: a read never has to write
    context.load_cert_chain(str(certfile), str(keyfile))
    return context
