"""The owner's side of a stub home: the home key, the Noise key, and the roster it signs.

Every change to the agent rows (add, change, drop) signs a new roster with the next `seq`
(PROTOCOL.md part B). Keys here are test keys made from a seed, never for production.
`restore` takes back a roster the owner signed before a restart (stubbox/state.py), so the
next change goes on from its `seq`.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from nacl.signing import SigningKey

from ftwbridge.proto.names import Role
from ftwbridge.proto.noise import public_key
from ftwbridge.proto.roster import AgentGrant, Device, Roster, sign_roster


def derive_key(seed: str, purpose: str) -> bytes:
    """A 32-byte key deterministically derived from a text seed and a purpose (test keys only)."""
    return hashlib.sha256(f"stubbox:{purpose}:{seed}".encode()).digest()


class Owner:
    """Holds a home's signing key and roster; each change returns the new SignedRoster bytes.

    Args:
        home: the home id.
        seed: text the home key, Noise key and phone key are derived from.
        noise: False for a box that takes no assistants yet (no `noise` in its roster).
        issued_at_ms: wall-clock ms for the first roster's `issuedAtMs`.
    """

    def __init__(self, home: str, *, seed: str, noise: bool = True, issued_at_ms: int = 0) -> None:
        self.home = home
        self.signing_key = SigningKey(derive_key(seed, "home"))
        self.noise_private = derive_key(seed, "noise")
        self.noise_public = public_key(self.noise_private)
        phone = public_key(derive_key(seed, "phone"))
        self.roster = Roster(
            home=home,
            seq=1,
            issued_at_ms=issued_at_ms,
            noise=self.noise_public if noise else None,
            devices=(Device(phone, Role.OWNER, True, ()),),
        )
        self.signed = sign_roster(self.roster, self.signing_key)

    def restore(self, roster: Roster) -> None:
        """Go on from `roster`, one this home signed earlier and kept (verified by the caller
        with `home_public_key`; its `signed` holds the bytes): the next change signs
        `roster.seq + 1`. Its `noise` stands, whatever `noise` this owner was made with.
        """
        self.roster = replace(roster, signed=b"")
        self.signed = roster.signed

    @property
    def home_public_key(self) -> bytes:
        """The home's Ed25519 public key (32 bytes), which the bridge enrolls."""
        return bytes(self.signing_key.verify_key)

    def _publish(self, devices: tuple[Device, ...], now_ms: int, **changes: object) -> bytes:
        self.roster = replace(
            self.roster,
            seq=self.roster.seq + 1,
            issued_at_ms=now_ms,
            devices=devices,
            **changes,  # type: ignore[arg-type]
        )
        self.signed = sign_roster(self.roster, self.signing_key)
        return self.signed

    def put_agent(self, key: bytes, grant: AgentGrant, *, now_ms: int) -> bytes:
        """Add or replace the agent row for `key` (32 bytes); returns the new signed roster."""
        rows = tuple(d for d in self.roster.devices if d.key != key)
        return self._publish((*rows, Device(key, Role.AGENT, False, (), grant)), now_ms)

    def drop_agent(self, key: bytes, *, now_ms: int) -> bytes:
        """Remove the row for `key`; returns the new signed roster."""
        rows = tuple(d for d in self.roster.devices if d.key != key)
        return self._publish(rows, now_ms)

    def set_noise(self, enabled: bool, *, now_ms: int) -> bytes:
        """Publish the box's Noise key (or withdraw it); returns the new signed roster."""
        noise = self.noise_public if enabled else None
        return self._publish(self.roster.devices, now_ms, noise=noise)
