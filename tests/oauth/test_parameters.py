"""Parameters and error codes (docs/auth.md, "Parameters and error codes"), sent as raw requests the way a careless or
hostile client sends them: empty parameters count as omitted (RFC 6749 section 3.1), unknown
ones are ignored, and each refusal has the code RFC 6749 section 5.2, RFC 7009 section 2.2 or
RFC 7591 section 3.2.2 gives it. One bridge serves every case."""

from __future__ import annotations

import base64

import httpx2

from devtools.signin import consent_as_person
from ftwbridge.proto.registry import READ_SCOPES
from tests.e2e.env import REAL_WAIT_S, Env
from tests.oauth.helpers import authorize_params, pkce
from tests.oauth.test_flow import REDIRECT

FORM = {"content-type": "application/x-www-form-urlencoded"}


async def test_registration_answers(env: Env) -> None:
    url = env.bridge.site.public_url + "/oauth/register"
    ok = {"redirect_uris": ["https://app.example/cb"]}
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        refusals = [
            (b"{not json", "invalid_client_metadata"),
            (b"[1, 2]", "invalid_client_metadata"),
            (b'{"redirect_uris": "https://app.example/cb"}', "invalid_redirect_uri"),
            (b'{"redirect_uris": ["javascript:alert(1)//"]}', "invalid_redirect_uri"),
            (b'{"redirect_uris": ["https://a.example/cb", "https://a.example/cb"]}', "invalid_redirect_uri"),
            (b'{"redirect_uris": [' + b",".join([b'"https://a.example/%d"' % i for i in range(9)]) + b"]}", "invalid_redirect_uri"),
            (b'{"redirect_uris": ["https://a.example/cb"], "token_endpoint_auth_method": "private_key_jwt"}', "invalid_client_metadata"),
            (b'{"redirect_uris": ["https://a.example/cb"], "grant_types": ["client_credentials"]}', "invalid_client_metadata"),
            (b'{"redirect_uris": ["https://a.example/cb"], "grant_types": "authorization_code"}', "invalid_client_metadata"),
            (b'{"redirect_uris": ["https://a.example/cb"], "response_types": ["token"]}', "invalid_client_metadata"),
        ]  # fmt: skip
        for body, error in refusals:
            r = await http.post(url, content=body, headers={"content-type": "application/json"})
            assert r.status_code == 400 and r.json()["error"] == error, (body, r.text)
            assert r.headers["cache-control"] == "no-store"
        r = await http.post(url, json={"redirect_uris": ["http://evil.example/cb"]})
        assert "only to 127.0.0.1" in r.json()["error_description"]  # the reason, in words
        # a confidential method asked: registered public, and the answer says so (RFC 7591 3.2.1)
        for method in ("client_secret_post", "client_secret_basic"):
            r = await http.post(url, json=ok | {"token_endpoint_auth_method": method})
            assert r.status_code == 201 and r.json()["token_endpoint_auth_method"] == "none"
            assert "client_secret" not in r.json()
        # empty members count as omitted; unknown ones are ignored; what was kept is echoed
        r = await http.post(
            url,
            json=ok
            | {
                "client_name": "",
                "client_uri": "",
                "scope": "",
                "token_endpoint_auth_method": "",
                "logo_uri": "https://app.example/logo.png",
                "software_statement": "eyJ.not.checked",
                "x-vendor": {"nested": [1, 2, 3]},
                "grant_types": ["authorization_code", "refresh_token", "implicit"],
            },
        )
        kept = r.json()
        assert r.status_code == 201, r.text
        assert "client_uri" not in kept and "scope" not in kept and "logo_uri" not in kept
        assert kept["grant_types"] == ["authorization_code", "refresh_token"]
        assert kept["token_endpoint_auth_method"] == "none"


async def test_token_and_revocation_error_codes(env: Env) -> None:
    base = env.bridge.site.public_url
    token, revoke = base + "/oauth/token", base + "/oauth/revoke"
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        cases = [
            (b"", "invalid_request"),  # no grant_type at all (RFC 6749 5.2)
            (b"grant_type=", "invalid_request"),  # empty is omitted
            (b"grant_type=&code=x", "invalid_request"),
            (b"grant_type=password&username=a&password=b", "unsupported_grant_type"),
            (b"grant_type=client_credentials", "unsupported_grant_type"),
            (b"grant_type=authorization_code", "invalid_request"),  # no code
            (b"grant_type=authorization_code&code=&client_id=c&code_verifier=v", "invalid_request"),
            (b"grant_type=authorization_code&code=x&client_id=c", "invalid_request"),  # no verifier
            (b"grant_type=authorization_code&code=x&client_id=c&code_verifier=" + b"v" * 43, "invalid_grant"),
            (b"grant_type=refresh_token&refresh_token=x", "invalid_request"),  # no client_id
            (b"grant_type=refresh_token&refresh_token=x&client_id=c", "invalid_grant"),
            (b"grant_type=refresh_token&refresh_token=x&client_id=c&resource=https://x.example/mcp", "invalid_target"),
            (b"grant_type=refresh_token&refresh_token=x&client_id=c&unknown=1&resource=", "invalid_grant"),
            (b"\xff\xfe=\x00", "invalid_request"),
        ]  # fmt: skip
        for body, error in cases:
            r = await http.post(token, content=body, headers=FORM)
            assert r.status_code == 400 and r.json()["error"] == error, (body, r.text)
            assert r.headers["cache-control"] == "no-store"
        # client_id may come in an Authorization: Basic header (RFC 6749 2.3.1); the secret
        # is ignored, an unreadable header too, and two different ids are refused
        refresh = b"grant_type=refresh_token&refresh_token=x"
        for header, error in (
            ("Basic " + base64.b64encode(b"c%3Aid:secret").decode(), "invalid_grant"),
            ("Basic " + base64.b64encode(b"c:").decode(), "invalid_grant"),
            ("Basic !!!", "invalid_request"),
            ("Bearer c", "invalid_request"),
        ):
            r = await http.post(token, content=refresh, headers=FORM | {"authorization": header})
            assert r.json()["error"] == error, (header, r.text)
        r = await http.post(
            token,
            content=refresh + b"&client_id=a",
            headers=FORM | {"authorization": "Basic " + base64.b64encode(b"b:").decode()},
        )
        assert r.json()["error"] == "invalid_request" and "differs" in r.text
        r = await http.post(token, json={"grant_type": "refresh_token"})  # JSON is not a form
        assert r.status_code == 400 and r.json()["error"] == "invalid_request"
        for body in (b"", b"token=", b"token_type_hint=access_token"):
            r = await http.post(revoke, content=body, headers=FORM)
            assert r.status_code == 400 and r.json()["error"] == "invalid_request", body
        # an unknown token, with any hint, is not an error (RFC 7009 section 2.2)
        for body in (b"token=nothing", b"token=nothing&token_type_hint=refresh_token",
                     b"token=nothing&token_type_hint=bogus"):  # fmt: skip
            r = await http.post(revoke, content=body, headers=FORM)
            assert r.status_code == 200, (body, r.text)


async def test_authorize_treats_empty_parameters_as_omitted(env: Env) -> None:
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S, follow_redirects=False) as http:
        one_https = (
            await http.post(
                base + "/oauth/register", json={"redirect_uris": ["https://a.example/cb"]}
            )
        ).json()["client_id"]
        loopback = (
            await http.post(
                base + "/oauth/register", json={"redirect_uris": ["http://127.0.0.1/cb"]}
            )
        ).json()["client_id"]
        _, challenge = pkce()
        good = {
            "response_type": "code",
            "client_id": one_https,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        for extra in (
            {"scope": "", "resource": "", "state": ""},
            {"redirect_uri": "https://a.example/cb", "scope": "openid offline_access"},
            {"redirect_uri": "https://a.example/cb", "resource": env.url, "unknown": "x"},
        ):
            r = await http.get(base + "/authorize", params=good | extra)
            assert r.status_code == 200 and "Connect an assistant" in r.text, (extra, r.text)
            assert r.text.count("<li>") == len(READ_SCOPES)  # every read: unknown ones ignored
        r = await http.get(
            base + "/authorize", params=good | {"scope": "ftw.mode.write"}
        )  # an owner-only scope
        assert r.status_code == 400 and "location" not in r.headers
        # a loopback client must name its redirect (its port varies), even when it has one
        r = await http.get(base + "/authorize", params=good | {"client_id": loopback})
        assert r.status_code == 400 and "redirect_uri is required" in r.text
        r = await http.get(
            base + "/authorize",
            params=good | {"client_id": loopback, "redirect_uri": "http://127.0.0.1:4711/cb"},
        )
        assert r.status_code == 200 and "a program on your device" in r.text
        csp = r.headers["content-security-policy"]
        assert "form-action 'self' http://127.0.0.1:*;" in csp


async def test_no_refresh_token_for_a_client_without_that_grant(env: Env) -> None:
    home = await env.add_home("h1", "--approve-all")
    base = env.bridge.site.public_url
    async with httpx2.AsyncClient(timeout=REAL_WAIT_S) as http:
        reg = await http.post(
            base + "/oauth/register",
            json={"redirect_uris": [REDIRECT], "grant_types": ["authorization_code"]},
        )
        kept = reg.json()
        assert kept["grant_types"] == ["authorization_code"]
        verifier, challenge = pkce()
        url = httpx2.URL(
            base + "/authorize", params=authorize_params(kept["client_id"], REDIRECT, challenge)
        )
        seen = await consent_as_person(base, str(url), home.console_port, home.name)
        r = await http.post(
            base + "/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": seen.query["code"][0],
                "client_id": kept["client_id"],
                "redirect_uri": REDIRECT,
                "code_verifier": verifier,
            },
        )
        assert r.status_code == 200 and r.json()["access_token"]
        assert "refresh_token" not in r.json()
