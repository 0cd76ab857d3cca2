"""A small cluster CA for `make cluster` and the cluster tests: one CA certificate and, for
each instance, a certificate for its internal listener signed by it (docs/operations.md, "Trust
across the internal hop").

Made with the `cryptography` package: ECDSA P-256 keys, SHA-256 signatures, the CA limited to
signing (path length 0), each leaf valid for `127.0.0.1` and `localhost` (where the instances
listen here) and for server authentication only, all valid for `DAYS` days. Keys are written
0600. A throwaway CA of a run's folder: never a production one.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAYS: Final = 7
"""How long the certificates are valid, days (a run's, not a deployment's)."""


@dataclass(frozen=True, slots=True)
class Leaf:
    """One instance's certificate and key files (PEM)."""

    certfile: Path
    keyfile: Path


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


class ClusterCA:
    """A CA in `folder`: `ca.pem` (its certificate, what `mesh_cafile` names) and its key kept
    in memory only; `leaf(name)` writes `<name>.pem` and `<name>.key` signed by it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name("ftwbridge cluster CA"))
            .issuer_name(_name("ftwbridge cluster CA"))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cafile = folder / "ca.pem"
        self.cafile.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def leaf(self, name: str) -> Leaf:
        """A server certificate for instance `name` (for 127.0.0.1 and localhost)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=DAYS))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        leaf = Leaf(self.folder / f"{name}.pem", self.folder / f"{name}.key")
        leaf.certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(leaf.keyfile, key)
        return leaf

    def settings(self, name: str) -> dict[str, str]:
        """An instance's TLS settings: its leaf's files and the CA to verify the others by."""
        leaf = self.leaf(name)
        return {
            "internal_certfile": str(leaf.certfile),
            "internal_keyfile": str(leaf.keyfile),
            "mesh_cafile": str(self.cafile),
        }
