"""The cluster's assistant signs in for real, through HAProxy (sign-in across
instances): one client registration (RFC 7591), then for each home `/authorize` with PKCE
S256, the consent form with the claim code the stub home shows, the owner's approval at home
(the stubs run `--approve-all`), the waiting page, and the token exchange. HAProxy sends
each request round robin, so the steps land on different instances, and the home's uplink is
at whichever instance its box dialed.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from typing import TYPE_CHECKING, Any

import httpx2
import trio

from devtools.rig import console
from ftwbridge.mcp.affinity import tag_of
from ftwbridge.proto.claim import code_hash
from ftwbridge.proto.registry import READ_SCOPES
from ftwbridge.store.base import hash_token

from .procs import CannotStart

if TYPE_CHECKING:
    from .homes import Home
    from .rig import Cluster

REDIRECT = "http://127.0.0.1:9/callback"
"""The assistant's registered redirect URI (a loopback one; the script reads the code from the
redirect itself, nothing listens there)."""
SIGN_IN_S = 30.0
"""Bound on one home's whole sign-in, seconds (a loaded 2-core machine)."""
LOOK_S = 0.05
"""How often the browser looks at the waiting page again, seconds (a script is quicker than
the page's own 2 s reload)."""


def _pkce() -> tuple[str, str]:
    """A PKCE (verifier, S256 challenge) pair (RFC 7636 section 4)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _fail(step: str, r: httpx2.Response) -> CannotStart:
    return CannotStart(
        f"the sign-in through HAProxy failed at {step}: {r.status_code} {r.text[:200]}"
    )


async def register(cluster: Cluster) -> str:
    """Register the cluster's assistant as a public client through HAProxy; its client id.

    Raises:
        CannotStart: the registration was refused (its answer).
    """
    meta = {
        "redirect_uris": [REDIRECT],
        "client_name": "Cluster assistant",
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none",
    }
    async with httpx2.AsyncClient(timeout=SIGN_IN_S) as http:
        r = await http.post(cluster.base + "/oauth/register", json=meta)
    if r.status_code != 201:
        raise _fail("/oauth/register", r)
    return str(r.json()["client_id"])


async def sign_in(cluster: Cluster, home: Home, client_id: str) -> dict[str, Any]:
    """The whole sign-in of the cluster's assistant at `home`, through HAProxy; returns the
    token response (RFC 6749 section 5.1), and fills in `home.token`, `home.key` and
    `home.agent_id` (from the access token's record).

    Raises:
        CannotStart: a step answered other than the flow says, or the whole took longer than
            `SIGN_IN_S`.
    """
    verifier, challenge = _pkce()
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": secrets.token_urlsafe(8),
        "scope": " ".join(sorted(s.value for s in READ_SCOPES)),
    }
    base = cluster.base
    began = trio.current_time()
    with trio.move_on_after(SIGN_IN_S):
        async with httpx2.AsyncClient(timeout=SIGN_IN_S, follow_redirects=False) as http:
            page = await http.get(base + "/authorize", params=params)
            fields = dict(re.findall(r'name="(req|csrf)" value="([^"]+)"', page.text))
            if page.status_code != 200 or set(fields) != {"req", "csrf"}:
                raise _fail("/authorize", page)
            code = str((await console(home.console, {"op": "claim", "home": home.name}))["code"])
            digest = code_hash(code)
            assert digest is not None
            await cluster.wait_offer(home.name, digest)  # the box offered it: it shows it
            posted = await http.post(base + "/authorize", data=fields | {"code": code})
            if posted.status_code != 303:
                raise _fail("the consent form", posted)
            while True:  # the owner approves at home (--approve-all)
                waited = await http.get(base + posted.headers["location"])
                if waited.status_code == 303:
                    break
                if waited.status_code != 200:
                    raise _fail("the waiting page", waited)
                await trio.sleep(LOOK_S)
            back = httpx2.URL(waited.headers["location"])
            if "code" not in back.params or back.params.get("state") != params["state"]:
                raise _fail("the redirect to the assistant", waited)
            tokens = await http.post(
                base + "/oauth/token",
                data={
                    "grant_type": "authorization_code",
                    "code": back.params["code"],
                    "client_id": client_id,
                    "redirect_uri": REDIRECT,
                    "code_verifier": verifier,
                },
            )
            if tokens.status_code != 200:
                raise _fail("/oauth/token", tokens)
        out: dict[str, Any] = tokens.json()
        home.token = str(out["access_token"])
        if tag_of(home.token) is None:  # HAProxy would send this home's calls round robin
            raise CannotStart(
                f"the token of {home.name} carries no home tag: the balancer cannot send its"
                " calls to the instance holding its uplink (docs/operations.md, 'Calls at the"
                " holder')"
            )
        home.sign_in_s = trio.current_time() - began
        held = await cluster.store.token(hash_token(home.token))
        if held is not None:
            home.key, home.agent_id = held.agent_key, held.agent_id
        return out
    raise CannotStart(f"the sign-in of {home.name} through HAProxy took over {SIGN_IN_S:g} s")
