"""Streamable HTTP for the memory server: the bind rule (loopback, or a bearer token), the
token check in front of the SDK's app, the Host and Origin check on every address served
without a token (DNS rebinding: a web page whose name resolves to a loopback address must not
reach the server through the user's browser), and serving it with uvicorn."""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sandmem._errors import UserError

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

#: the path the MCP endpoint is served at
MCP_PATH = "/mcp"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve on an address that is not loopback without a bearer token."""
    if token is not None and not token.strip():
        raise UserError("the bearer token is empty; set a long random token or none at all")
    if token is None and not is_loopback(host):
        raise UserError(
            f"refusing to serve memory on {host}, which is not a loopback address, without a "
            "bearer token: set one (sandmem mcp --token-env VAR, with the token in $VAR) or "
            "bind to 127.0.0.1"
        )


class BearerTokenCheck:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` gets 401."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = b""
            for key, value in scope.get("headers", ()):
                if key.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, self._expected):
                body = json.dumps({"error": "a valid bearer token is required"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


#: the names a loopback server answers to besides the address it is bound to
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_names(host: str) -> frozenset[str]:
    """The host names (lower case, IPv6 without brackets) a request to a server bound to
    ``host`` may carry in its ``Host`` and ``Origin`` headers."""
    return _LOOPBACK_NAMES | {host.strip("[]").lower()}


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower case and
    without brackets; ``None`` when it is malformed."""
    if header.startswith("["):
        name, bracket, rest = header[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return name.lower()
    name, colon, port = header.rpartition(":")
    if not colon:
        name = header
    elif not port.isdigit() or ":" in name:
        return None
    return name.lower() or None


def origin_allowed(origin: str, names: frozenset[str]) -> bool:
    """An ``Origin`` header from a page served by the loopback server itself (a browser's
    request from any other page, ``null`` included, is refused)."""
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises for a malformed port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and hostname is not None and hostname in names


class HostCheck:
    """ASGI middleware for a server without a token: a request whose ``Host`` is not the
    address served (or a loopback name) gets 421, one with a foreign ``Origin`` 403 — on every
    path and method, before the SDK's app sees it."""

    def __init__(self, app: Any, host: str) -> None:
        self.app = app
        self._names = allowed_names(host)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = {k.lower(): v for k, v in scope.get("headers", ())}
            host = headers.get(b"host", b"").decode("latin-1")
            origin = headers.get(b"origin")
            if host_name(host) not in self._names:
                await _refuse(send, 421, "the Host header names another server")
                return
            if origin is not None and not origin_allowed(origin.decode("latin-1"), self._names):
                await _refuse(send, 403, "requests from other web pages are refused")
                return
        await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, reason: str) -> None:
    body = json.dumps({"error": reason}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def http_app(server: Server[Any], host: str, token: str | None) -> Any:
    """The SDK's Streamable HTTP app for ``server``: behind the token check when there is a
    token, else behind ``HostCheck`` (the SDK's own rebinding protection covers only
    ``127.0.0.1``, ``localhost`` and ``::1``; ours every loopback address served)."""
    if token is not None:
        app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
        return BearerTokenCheck(app, token)
    from mcp.server.transport_security import TransportSecuritySettings

    names = sorted(f"[{n}]" if ":" in n else n for n in allowed_names(host))
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*names, *(f"{n}:*" for n in names)],
        allowed_origins=[
            f"{s}://{n}{p}" for s in ("http", "https") for n in names for p in ("", ":*")
        ],
    )
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=security
    )
    return HostCheck(app, host)


async def serve_app(app: Any, host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
