"""The protocol core's exceptions: one family, split by whose fault it is (h11's model)."""

from __future__ import annotations

from typing import Any

from .names import Code


class ProtocolError(Exception):
    """Base of every error the protocol core raises.

    Attributes:
        code: the registry code that best names the failure, or None when no code fits.
        args_: the code's arguments (dict, CBOR-safe), sent as `args` in an `error` body.
    """

    def __init__(self, message: str, *, code: Code | None = None, **args: Any) -> None:
        super().__init__(message)
        self.code = code
        self.args_ = args


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that break the contract (bad frame, envelope, roster, MAC, replay)."""


class LocalProtocolError(ProtocolError):
    """We were asked to do something the contract forbids (oversize frame, spent nonce, ...)."""
