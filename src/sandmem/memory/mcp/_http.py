"""Streamable HTTP for the memory server: the bind rule (loopback, or a bearer token), the
token check in front of the SDK's app, and serving it with uvicorn."""

from __future__ import annotations

import hmac
import ipaddress
import json
from typing import TYPE_CHECKING, Any

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


def http_app(server: Server[Any], host: str, token: str | None) -> Any:
    """The SDK's Streamable HTTP app for ``server`` (DNS-rebinding protection on for
    loopback hosts), behind the token check when there is a token."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return BearerTokenCheck(app, token) if token is not None else app


async def serve_app(app: Any, host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
