"""TLS on the internal hop (docs/operations.md, "Trust across the internal hop").

An instance with `internal_certfile` and `internal_keyfile` serves its internal listener over
TLS (hypercorn's own `certfile`/`keyfile`); an instance with `mesh_cafile` forwards only over
`https://`, verifying the holder's certificate (chain and host name, `ssl`'s defaults for a
client) against the cluster's CA in that file and never the system's. `make cluster` makes
such a CA and one certificate per instance (`cluster/ca.py`).
"""

from __future__ import annotations

import ssl
from pathlib import Path


def client_context(cafile: Path) -> ssl.SSLContext:
    """A TLS client context that trusts only the CA certificates in `cafile` (PEM), checks
    the server's host name, and speaks TLS 1.2 or later.

    Raises:
        OSError, ssl.SSLError: the file cannot be read or holds no certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(cafile))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def server_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    """A TLS server context with the certificate chain in `certfile` and its key in `keyfile`
    (PEM), TLS 1.2 or later (for a listener that is not hypercorn's; hypercorn builds its own
    from the same files).

    Raises:
        OSError, ssl.SSLError: a file cannot be read, or the key does not fit the certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(certfile), str(keyfile))
    return context
