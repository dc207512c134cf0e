"""Issue 39: the long-running commands (``memory ingest --watch``, ``mcp``, ``worker``,
``chat``) at a terminal: each prints one start line saying what it serves or watches and how to
stop it, stops on the first Ctrl-C with exit status 130 after saying what was saved, and turns
bind and argument errors into one ``Error:`` line. Driven in a pseudo-terminal."""

from __future__ import annotations

from pathlib import Path

from ingest_fixtures import codex_session_one
from pty_run import PtyCommand


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
