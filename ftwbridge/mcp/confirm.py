"""Confirmation by the person before a command, where the client can ask (MCP 2026-07-28
multi round-trip requests, `basic/patterns/mrtr`).

The first `tools/call` of `ev_charge_now` from a client that declares `elicitation` answers
`input_required`: one form elicitation that says in plain words what will happen, and a
`requestState` that binds the confirmation to the agent, the tool and its arguments, a short
expiry and the `cmdId` the command will carry. The state is attacker-controlled input (MRTR
"Server Requirements" 4 and 5): it is HMAC-SHA256 signed with a key of this process, and
refused when the signature, the agent, the call or the expiry does not hold. Because the
`cmdId` rides in the state, a replayed acceptance sends the same command again and the box,
which acts once per `cmdId`, does nothing more (the "single use" the spec leaves to servers).

Consent parses closed (docs/control.md, "Consent parses closed"): only an `accept` whose
`content` is exactly the requested schema's `{"confirm": true}` is consent; and the first
answer given to a state is final (`ConfirmStates.settle`): after a decline or a cancel the
same state never acts. The same sealing, with another purpose, makes the confirmation token
of the preview for clients that cannot elicit (`mcp/preview.py`).

No I/O and no clock: callers pass `now_ms` (ms since the epoch).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any, Final, Literal

from .finals import Answer, FinalAnswers

CONFIRM_KEY: Final = "confirm"
"""The key of our one input request (MRTR `inputRequests` keys are the server's)."""
MAX_STATE_CHARS: Final = 1024

Purpose = Literal["elicit", "preview"]
"""What a sealed state is for: an MRTR `requestState`, or a preview's confirmation token. One
is never accepted as the other."""


@dataclass(frozen=True, slots=True)
class Confirmed:
    """A verified state: the `cmdId` it carries and when it expires (ms since the epoch)."""

    cmd_id: str
    expires_ms: int = 0
    principal: str = ""


class StateRefused(ValueError):
    """A `requestState` that is not one this bridge issued for this call (tampered, another
    agent's or call's, or not ours at all), or `inputResponses` that are not an object; the
    message says which, for the JSON-RPC error (-32602)."""


class StateExpired(ValueError):
    """A `requestState` past its expiry: the person is asked again."""


def wants_confirmation(capabilities: Any) -> bool:
    """Whether the request's client capabilities (`_meta` `clientCapabilities`) declare form
    elicitation: `elicitation: {}` (form, as 2025-11-25 reads an empty object) or with `form`."""
    if not isinstance(capabilities, dict):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, dict):
        return False
    return not elicitation or isinstance(elicitation.get("form"), dict)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ConfirmStates:
    """Seals and opens `requestState` values.

    Args:
        ttl_s: how long a confirmation may take, seconds.
        key: the HMAC key (32 random bytes of this process unless given: a state does not
            outlive a restart, and another instance refuses it).
    """

    def __init__(self, *, ttl_s: float, key: bytes | None = None) -> None:
        self._ttl_ms = int(ttl_s * 1000)
        self._key = key if key is not None else secrets.token_bytes(32)
        self._finals = FinalAnswers()

    @property
    def ttl_ms(self) -> int:
        """How long a state is good for, ms."""
        return self._ttl_ms

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, b"ftwbridge.confirm.v1\x00" + payload, hashlib.sha256).digest()

    def seal(
        self,
        *,
        principal: str,
        digest: str,
        cmd_id: str,
        now_ms: int,
        purpose: Purpose = "elicit",
    ) -> str:
        """A state for `principal` (home and agent), the call's `digest` (`cmdids.call_digest`)
        and `cmd_id`, good until `now_ms` plus the ttl, for `purpose` only."""
        body = {"p": principal, "d": digest, "c": cmd_id, "x": now_ms + self._ttl_ms, "k": purpose}
        payload = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        return _b64(payload) + "." + _b64(self._mac(payload))

    def open(
        self,
        state: Any,
        *,
        principal: str,
        digest: str,
        now_ms: int,
        purpose: Purpose = "elicit",
    ) -> Confirmed:
        """Verify `state` as sent by the client, for `purpose`.

        Raises:
            StateRefused: not text of our form, a signature that fails, another agent's or
                another call's state, or one sealed for the other purpose.
            StateExpired: the state's time is up (or it was made void: `mcp/finals.py`).
        """
        if not isinstance(state, str) or len(state) > MAX_STATE_CHARS or state.count(".") != 1:
            raise StateRefused("requestState is not one this bridge issued")
        head, _, sig = state.partition(".")
        try:
            payload, mac = _unb64(head), _unb64(sig)
        except (binascii.Error, ValueError):
            raise StateRefused("requestState is not one this bridge issued") from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise StateRefused("requestState was altered or is not one this bridge issued")
        body = json.loads(payload)
        if body.get("k") != purpose:
            raise StateRefused("requestState is not one this bridge issued for this question")
        if body.get("p") != principal:
            raise StateRefused("requestState belongs to another assistant")
        if body.get("d") != digest:
            raise StateRefused("requestState belongs to another call (tool or arguments differ)")
        expires = body.get("x")
        void = self._finals.void_to(principal)
        if not isinstance(expires, int) or now_ms >= expires or expires <= void:
            raise StateExpired("the confirmation ran out")
        return Confirmed(str(body.get("c")), expires, principal)

    def settle(self, opened: Confirmed, given: Answer, *, now_ms: int) -> Answer:
        """The final answer to the question `opened` asked: the first one given to it (`given`
        when this is the first, which is then kept until the state expires). A person's answer
        to one question is final: a decline or cancel is never followed by the same state
        acting, and an acceptance stands (it sends the same `cmdId` again)."""
        return self._finals.settle(
            opened.principal,
            opened.cmd_id,
            given,
            expires_ms=opened.expires_ms,
            now_ms=now_ms,
        )


@dataclass(frozen=True, slots=True)
class InputRequired:
    """An MRTR `InputRequiredResult` (MCP 2026-07-28): what to ask, and the state to echo."""

    input_requests: dict[str, Any]
    request_state: str

    def result(self) -> dict[str, Any]:
        """The JSON-RPC `result`."""
        return {
            "resultType": "input_required",
            "inputRequests": self.input_requests,
            "requestState": self.request_state,
        }


def question(message: str) -> dict[str, Any]:
    """The `inputRequests` map of one form elicitation asking the person `message` (MCP
    2026-07-28 `ElicitRequest`, form mode: a flat object schema of primitives)."""
    return {
        CONFIRM_KEY: {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": message,
                "requestedSchema": {
                    "type": "object",
                    "properties": {
                        "confirm": {
                            "type": "boolean",
                            "title": "Go ahead",
                            "description": message,
                            "default": True,
                        }
                    },
                    "required": ["confirm"],
                },
            },
        }
    }


def answer(input_responses: Any) -> Answer | None:
    """The person's answer in `inputResponses`, parsed closed: `accept` only for an
    `ElicitResult` `{"action": "accept", "content": {"confirm": true}}` (content exactly the
    requested schema: the one required boolean, true, nothing else; `_meta` aside), `decline`
    for a decline, a cancel, or any other acceptance (no content, `"false"`, `1`, extra
    fields), None when there is no answer to our question (then it is asked again).

    Raises:
        StateRefused: `inputResponses` is not an object (MRTR "Error Handling": an invalid
            `InputResponses` is a protocol error).
    """
    if input_responses is None:
        return None
    if not isinstance(input_responses, dict):
        raise StateRefused("inputResponses must be an object keyed by the input request")
    response = input_responses.get(CONFIRM_KEY)
    if not isinstance(response, dict):
        return None
    action = response.get("action")
    if action in ("decline", "cancel"):
        return "decline"
    if action != "accept":
        return None
    content = response.get("content")
    well_formed = (
        set(response) <= {"action", "content", "_meta"}
        and isinstance(content, dict)
        and set(content) == {CONFIRM_KEY}
        and content[CONFIRM_KEY] is True
    )
    return "accept" if well_formed else "decline"
