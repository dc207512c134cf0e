"""The MCP server's boundaries that are not tools: the Host and Origin check on every address
served without a token (DNS rebinding), the bound on ``memory_update``, and a client's
self-declared name (one printable line, redacted where it is recorded)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("mcp")

from sandmem.memory import MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.mcp import ServerOptions
from sandmem.memory.mcp._http import HostCheck, host_name, origin_allowed
from sandmem.memory.mcp._server import _caller
from sandmem.memory.mcp._tools import Caller, MemoryTools, ToolRefused

SANDMEM = str(Path(sys.executable).with_name("sandmem"))
SECRET = "ghp_" + "Zq9Xw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe9Dc8"
LOOPBACKS = ["127.0.0.2", "127.0.0.1", "localhost", "::1"]


# ---------------------------------------------------------------- Host and Origin


async def _ask(app: Any, headers: list[tuple[bytes, bytes]]) -> int:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    await app(scope, receive, send)
    return int(sent[0]["status"])


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _host(bound: str, port: int = 8765) -> bytes:
    return (f"[{bound}]:{port}" if ":" in bound else f"{bound}:{port}").encode()


@pytest.mark.parametrize("bound", LOOPBACKS)
@pytest.mark.parametrize(
    "host",
    [
        b"evil.example",
        b"evil.example:8765",
        b"127.0.0.2.evil.example:8765",
        b"localhost.evil.example",
        b"127.0.0.1@evil.example",
        b"",
        b"[::1",
        b"127.0.0.3:8765",
    ],
)
async def test_a_foreign_host_is_refused(bound: str, host: bytes) -> None:
    check = HostCheck(_ok, bound)
    assert await _ask(check, [(b"host", host)] if host else []) == 421
    assert await _ask(check, [(b"host", _host(bound))]) == 200


@pytest.mark.parametrize("bound", LOOPBACKS)
@pytest.mark.parametrize(
    "origin",
    [b"http://evil.example", b"https://evil.example:8765", b"null", b"http://127.0.0.1.evil.x"],
)
async def test_a_foreign_origin_is_refused(bound: str, origin: bytes) -> None:
    check = HostCheck(_ok, bound)
    own = [(b"host", _host(bound))]
    assert await _ask(check, [*own, (b"origin", origin)]) == 403
    assert await _ask(check, [*own, (b"origin", b"http://" + _host(bound))]) == 200


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.2:80", "127.0.0.2"),
        ("LOCALHOST", "localhost"),
        ("[::1]:8080", "::1"),
        ("[::1]", "::1"),
        ("[::1]x", None),
        ("a:b:c", None),
        ("host:port", None),
        (":80", None),
    ],
)
def test_host_header_parsing(header: str, name: str | None) -> None:
    assert host_name(header) == name


def test_an_origin_with_a_malformed_port_is_refused() -> None:
    assert not origin_allowed("http://127.0.0.1:99999999", frozenset({"127.0.0.1"}))


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module", params=["127.0.0.2", "127.0.0.1"])
def tokenless_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    """``sandmem mcp --http HOST:P`` without a token: on 127.0.0.2 (a loopback address the
    SDK's own rebinding protection does not know) and on the usual loopback names."""
    host = request.param
    address = "127.0.0.1" if host == "localhost" else host
    workspace = tmp_path_factory.mktemp("mcp-guard")
    port = _free_port(address)
    argv = [SANDMEM, "mcp", "-w", str(workspace), "--create", "--http", f"{host}:{port}"]
    env = {k: v for k, v in os.environ.items() if k != "SANDMEM_MCP_TOKEN"}
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with socket.socket() as sock:
                if sock.connect_ex((address, port)) == 0:
                    break
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield host, port
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def _post(address: tuple[str, int], headers: dict[str, str]) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    host, port = address
    connection = http.client.HTTPConnection(
        "127.0.0.1" if host == "localhost" else host, port, timeout=10
    )
    try:
        connection.putrequest("POST", "/mcp", skip_host=True)
        for key, value in {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Content-Length": str(len(body)),
            **headers,
        }.items():
            connection.putheader(key, value)
        connection.endheaders(body.encode())
        return connection.getresponse().status
    finally:
        connection.close()


def test_a_tokenless_server_refuses_a_foreign_host(
    tokenless_server: tuple[str, int],
) -> None:
    host, port = tokenless_server
    assert _post(tokenless_server, {"Host": "evil.example"}) == 421
    assert _post(tokenless_server, {"Host": f"evil.example:{port}"}) == 421
    own = {"Host": f"{host}:{port}"}
    assert _post(tokenless_server, {**own, "Origin": "http://evil.example"}) == 403
    assert _post(tokenless_server, own) not in (403, 421)  # reaches the MCP endpoint


# ---------------------------------------------------------------- memory_update's bound


def _options(root: Path, **kwargs: Any) -> ServerOptions:
    (root / "memories").mkdir(exist_ok=True)
    (root / "memories" / "MEMORY.md").write_text("# Memory\n")
    return ServerOptions(str(root), MemoryLayoutConfig(), MemoryGenerateConfig(), **kwargs)


def _patch(lines: int, width: int = 60) -> str:
    body = "".join(f"+- {'x' * width} {n}\n" for n in range(lines))
    head = "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n # Memory\n"
    return f"{head}{body}*** End Patch\n"


@pytest.mark.parametrize(("limit", "lines"), [(65_536, 2000), (1000, 20), (200, 3)])
async def test_memory_update_refuses_a_patch_over_its_bound(
    tmp_path: Path, limit: int, lines: int
) -> None:
    tools = MemoryTools(_options(tmp_path, max_update_chars=limit))
    big = _patch(lines)
    assert len(big) > limit
    with pytest.raises(ToolRefused, match="at most"):
        await tools.call("memory_update", {"patch": big}, Caller())
    assert (tmp_path / "memories" / "MEMORY.md").read_text() == "# Memory\n"
    small = _patch(1, width=10)
    assert len(small) <= limit
    await tools.call("memory_update", {"patch": small}, Caller())
    assert "xxxxxxxxxx 0" in (tmp_path / "memories" / "MEMORY.md").read_text()


def test_the_bound_must_be_positive(tmp_path: Path) -> None:
    from sandmem import UserError

    with pytest.raises(UserError):
        _options(tmp_path, max_update_chars=0)


async def test_memory_remember_is_bounded(tmp_path: Path) -> None:
    tools = MemoryTools(_options(tmp_path))
    with pytest.raises(ToolRefused, match="text"):
        await tools.call("memory_remember", {"text": "x" * 8001}, Caller())


# ---------------------------------------------------------------- the client's name


def _ctx(name: Any, version: Any = None) -> Any:
    info = SimpleNamespace(name=name, version=version)
    return SimpleNamespace(
        session=SimpleNamespace(client_params=SimpleNamespace(client_info=info)),
        meta=None,
        request=None,
    )


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("cursor\x1b]52;c;ZWNobyBwd24=\x07", "cursor"),
        ("a\rforged line\n2 consolidation", "a forged line 2 consolidation"),
        ("\u202eevil", "evil"),
        ("x" * 5000, "x" * 200),
        ("", "unknown client"),
        (None, "unknown client"),
    ],
)
def test_a_client_name_is_one_printable_line(name: Any, shown: str) -> None:
    assert _caller(_ctx(name, "1.0\x1b[2J")).client == shown
    assert _caller(_ctx(name, "1.0\x1b[2J")).version == "1.0"


async def test_a_secret_in_a_client_name_never_reaches_the_history(tmp_path: Path) -> None:
    from sandmem import memory as api

    tools = MemoryTools(_options(tmp_path))
    caller = _caller(_ctx(f"evil-client {SECRET}"))
    await tools.call("memory_update", {"patch": _patch(1, width=10)}, caller)
    history = tmp_path / "memories" / ".history"
    assert not any(SECRET in p.read_text() for p in history.rglob("*.json"))
    [head] = await api.log(tmp_path, limit=1)
    assert head.kind == "mcp_write" and "evil-client [REDACTED:github-token]" in (head.client or "")
