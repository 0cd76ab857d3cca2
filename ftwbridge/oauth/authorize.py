"""The checks of an authorization request before a consent request opens (OAuth 2.1 section
4.1.1, RFC 7636, RFC 8707): which redirect URI it names, and its state, response type, PKCE
challenge and resource. Each refusal is an `OAuthError` the person sees as a page."""

from __future__ import annotations

from .model import MAX_STATE_CHARS, OAuthError, valid_challenge
from .redirects import matching_redirect, redirect_kind


def redirect_of(registered: list[str], asked: str | None) -> str:
    """The redirect URI of an authorization request: the one asked, if it matches one the
    client registered (`redirects.matching_redirect`), or the client's only one when none is
    asked and it is not a loopback one (OAuth 2.1 section 4.1.1).

    Raises:
        OAuthError: none asked where one is needed, or one the client did not register.
    """
    if asked is None and len(registered) == 1 and redirect_kind(registered[0]) != "loopback":
        return registered[0]  # OAuth 2.1 section 4.1.1: optional with one URI
    if asked is None:
        raise OAuthError("invalid_request", "redirect_uri is required for this client")
    found = matching_redirect(registered, asked)
    if found is None:
        raise OAuthError("invalid_request", "redirect_uri is not one the client registered")
    return found


def checked_request(params: dict[str, str], resource: str) -> tuple[str | None, str]:
    """The request's `state` and PKCE `code_challenge`, once the rest checks out: a state
    within `MAX_STATE_CHARS`, `response_type=code`, PKCE S256 (RFC 7636), and our `/mcp` as
    `resource` when given (RFC 8707).

    Raises:
        OAuthError: the first of these the request breaks.
    """
    state = params.get("state")
    if state is not None and len(state) > MAX_STATE_CHARS:
        raise OAuthError("invalid_request", "state is too long")
    if params.get("response_type") != "code":
        raise OAuthError("unsupported_response_type", "response_type must be code")
    challenge = params.get("code_challenge", "")
    if params.get("code_challenge_method") != "S256" or not valid_challenge(challenge):
        raise OAuthError("invalid_request", "PKCE with code_challenge_method S256 is required")
    if params.get("resource", resource) != resource:
        raise OAuthError("invalid_target", "resource must be this bridge's /mcp URL")
    return state, challenge
