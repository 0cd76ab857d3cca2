"""The metadata-document fetch connects to the address it checked: the host
is resolved once, and the connection dials that address without a second lookup, so a
DNS-rebinding host cannot swap in an inside address between the check and the connection."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
import trio

from ftwbridge.oauth.cimd import DocumentRefused, MetadataDocuments
from ftwbridge.oauth.pinned import pinned_transport
from tests.oauth.helpers import serve_tiny_http


async def document_server(nursery: trio.Nursery, body: dict[str, Any]) -> int:
    """A plain HTTP/1.1 server on 127.0.0.1 answering every request with `body` as JSON."""
    return await serve_tiny_http(nursery, lambda _: (json.dumps(body).encode(), "application/json"))


class Rebinding(trio.abc.HostnameResolver):
    """A DNS that answers `host` with a public address the first time and loopback after."""

    def __init__(self, host: str) -> None:
        self.host, self.asked = host, 0

    async def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in (self.host, self.host.encode()):
            self.asked += 1
            ip = "93.184.215.14" if self.asked == 1 else "127.0.0.1"
            return [(trio.socket.AF_INET, trio.socket.SOCK_STREAM, 6, "", (ip, int(port)))]
        raise trio.socket.gaierror(trio.socket.EAI_NONAME, "unknown host")

    async def getnameinfo(self, *args: Any) -> Any:
        raise NotImplementedError


async def test_the_transport_dials_the_pinned_address_only(nursery: trio.Nursery) -> None:
    port = await document_server(nursery, {"client_id": "x"})
    # doc.example never resolves: the answer can only come from the pinned 127.0.0.1
    async with httpx2.AsyncClient(transport=pinned_transport("doc.example", "127.0.0.1")) as http:
        r = await http.get(f"http://doc.example:{port}/cimd")
        assert r.status_code == 200 and r.json() == {"client_id": "x"}
        with pytest.raises(httpx2.ConnectError):
            await http.get(f"http://other.example:{port}/cimd")
    docs = MetadataDocuments()
    url = f"http://doc.example:{port}/cimd"
    with pytest.raises(DocumentRefused):  # its client_id is not its URL
        await docs._get(url, "127.0.0.1")


async def test_one_resolution_and_the_checked_address_is_the_one_dialled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dns = Rebinding("rebind.example")
    previous = trio.socket.set_custom_hostname_resolver(dns)
    try:
        docs = MetadataDocuments()
        dialled: list[tuple[str, str | None]] = []

        async def get(url: str, address: str | None) -> tuple[dict[str, Any], str]:
            dialled.append((url, address))
            return {"client_id": url, "redirect_uris": ["https://a.example/cb"]}, "no-store"

        monkeypatch.setattr(docs, "_get", get)
        url = "https://rebind.example/client.json"
        doc = await docs.fetch(url)
        assert doc["client_id"] == url
        assert dns.asked == 1  # resolved once, for the check
        assert dialled == [(url, "93.184.215.14")]  # and the checked address is dialled
        with pytest.raises(DocumentRefused):  # the next lookup rebinds to loopback: refused
            await docs.fetch(url)
        assert dns.asked == 2 and len(dialled) == 1
    finally:
        trio.socket.set_custom_hostname_resolver(previous)
