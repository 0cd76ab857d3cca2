"""The packaged contract stays byte-identical to ../shared/contract, and names are generated."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest

from ftwbridge.proto import gen, names, registry

SHARED = Path(__file__).resolve().parents[3] / "shared" / "contract"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["registry.yaml", "agents.yaml"])
def test_packaged_contract_is_byte_identical(name: str) -> None:
    if not SHARED.is_dir():
        pytest.skip("../shared/contract is not beside this checkout")
    packaged = (files("ftwbridge.proto") / "contract" / name).read_bytes()
    assert packaged == (SHARED / name).read_bytes()


@pytest.mark.parametrize(
    "name", ["webapp-vectors.json", "cacophony-IK_25519_ChaChaPoly_SHA256.json"]
)
def test_vector_copies_are_byte_identical(name: str) -> None:
    if not SHARED.is_dir():
        pytest.skip("../shared/contract is not beside this checkout")
    assert (ROOT / "tests" / "vectors" / name).read_bytes() == (SHARED / name).read_bytes()


def test_names_module_is_generated_from_the_contract() -> None:
    assert (ROOT / "ftwbridge" / "proto" / "names.py").read_text() == gen.render()


def test_tables_cover_every_name() -> None:
    assert set(registry.CODES) == set(names.Code)
    assert set(registry.READS) == set(names.Read)
    assert set(registry.CAPS) == set(names.Cap)
    assert registry.CODES[names.Code.E_RATE_LIMITED].retryable
    assert not registry.CODES[names.Code.E_GRANT_EXPIRED].retryable
    assert registry.READS[names.Read.HIST_QUERY].scope is names.Scope.FTW_HISTORY_READ
    assert registry.ROSTER_CONTEXT == b"ftw.roster.v1\x00"
    assert registry.SESSION_PROLOGUE == b"ftw.session.v1:"
