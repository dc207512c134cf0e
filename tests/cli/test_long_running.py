"""Issue 39: the long-running commands (``memory ingest --watch``, ``mcp``, ``worker``,
``chat``) at a terminal: each prints one start line saying what it serves or watches and how to
stop it, stops on the first Ctrl-C with exit status 130 after saying what was saved, and turns
bind and argument errors into one ``Error:`` line. Driven in a pseudo-terminal."""

from __future__ import annotations

import importlib.util
import json
import socket
import time
from pathlib import Path

import pytest
from cli_workspaces import invoke
from ingest_fixtures import codex_session_one
from pty_run import PtyCommand

#: the MCP server's tests need the `mcp` extra (`make test-min` runs tests/cli without it)
needs_mcp = pytest.mark.skipif(
    importlib.util.find_spec("mcp") is None, reason="needs the mcp extra"
)


def test_watch_says_what_it_watches_and_what_ctrl_c_saved(tmp_path: Path) -> None:
    ws, src = tmp_path / "ws", tmp_path / "codex"
    src.mkdir()
    ws.mkdir()
    with PtyCommand("memory", "ingest", "-w", ws, "--watch", src, "--interval", "0.2") as cmd:
        cmd.expect(r"watching .*codex for transcripts .*Ctrl-C stops")
        exp = codex_session_one(src)
        cmd.expect(r"ingested 2 segment\(s\)")
        cmd.ctrl_c()
        assert cmd.wait() == 130
        cmd.expect(r"stopped watching: 2 segment\(s\) recorded while watching, all saved")
    assert (ws / "sessions" / f"codex-{exp.session_id}.jsonl").is_file()


def test_watch_of_a_directory_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    with PtyCommand("memory", "ingest", "-w", tmp_path, "--watch", tmp_path / "nope") as cmd:
        assert cmd.wait() == 2
        assert "Error: Invalid value for '--watch'" in cmd.output


# ---------------------------------------------------------------- sandmem mcp

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "pty-test", "version": "1"},
        },
    }
)


def _layout(ws: Path) -> Path:
    (ws / "memories").mkdir(parents=True)
    (ws / "memories" / "MEMORY.md").write_text("# Memory\n")
    return ws


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@needs_mcp
def test_mcp_stdio_says_what_it_serves_and_stops_on_the_first_ctrl_c(tmp_path: Path) -> None:
    ws = _layout(tmp_path / "ws")
    with PtyCommand("mcp", "-w", ws) as cmd:
        line = cmd.expect(r"sandmem mcp: serving the memory of (.*) over stdio; tools: (.*)\n")
        assert line.group(1) == f"{ws} (memories/)"
        assert "memory_search" in line.group(2) and "memory_forget" not in line.group(2)
        assert "Ctrl-C" in line.group(0)
        cmd.type(INITIALIZE + "\n")
        cmd.expect(r'"serverInfo"')  # a client session is open: the SDK reads stdin in a thread
        cmd.ctrl_c()
        assert cmd.wait() == 130
        cmd.expect(r"stopped \(Ctrl-C\): every note and edit made through the server is saved")


@needs_mcp
def test_mcp_http_names_the_mcp_endpoint_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    ws = _layout(tmp_path / "ws")
    port = _free_port()
    with PtyCommand("mcp", "-w", ws, "--http", f"127.0.0.1:{port}", "--read-only") as cmd:
        line = cmd.expect(r"sandmem mcp: serving .* at (\S+) \(Streamable HTTP.*Ctrl-C stops")
        assert line.group(1) == f"http://127.0.0.1:{port}/mcp"
        assert "memory_remember" not in line.group(0)  # --read-only
        _wait_listening(port, cmd)
        # a second server on the same port: one error line, exit 2
        busy = invoke("mcp", "-w", ws, "--http", f"127.0.0.1:{port}")
        assert busy.exit_code == 2
        assert busy.stderr.startswith(f"Error: cannot serve on 127.0.0.1:{port}: address ")
        assert "another server listens there" in busy.stderr
        assert len(busy.stderr.splitlines()) == 1
        cmd.ctrl_c()
        assert cmd.wait() == 130
        cmd.expect(r"stopped \(Ctrl-C\)")


def _wait_listening(port: int, cmd: PtyCommand) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert cmd.proc.poll() is None, cmd.output
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}:\n{cmd.output}")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("localhost:99999", "the port must be 1 to 65535"),
        ("127.0.0.1:0", "the port must be 1 to 65535"),
        ("8765", "give HOST:PORT"),
        ("localhost:http", "give HOST:PORT"),
        ("no-such-host.invalid:8765", "unknown host"),
        ("192.0.2.1:8765", "cannot serve on 192.0.2.1:8765"),  # an address not on this machine
    ],
)
def test_mcp_a_bad_address_is_one_error_line(tmp_path: Path, given: str, says: str) -> None:
    ws = _layout(tmp_path / "ws")
    result = invoke(
        "mcp", "-w", ws, "--http", given, "--token-env", "TOKEN", env={"TOKEN": "t" * 32}
    )
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and says in errors[0], result.stderr
    assert "Traceback" not in result.stderr


@needs_mcp
def test_mcp_refuses_an_empty_directory_unless_asked(tmp_path: Path) -> None:
    result = invoke("mcp", "-w", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: no memory in {tmp_path}")
    assert "--create" in result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created
    with PtyCommand("mcp", "-w", tmp_path, "--create") as cmd:
        cmd.expect(r"sandmem mcp: serving the memory of")
        cmd.type(INITIALIZE + "\n")
        cmd.expect(r'"serverInfo"')
        assert (tmp_path / "memories").is_dir()
        cmd.ctrl_c()
        assert cmd.wait() == 130
