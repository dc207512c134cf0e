"""``sandmem memory ingest`` errors: a missing path is a usage error, a file not read says why,
a wrong format says every line was dropped."""

from __future__ import annotations

import os
from pathlib import Path

from cli_workspaces import error_lines, invoke

# ---------------------------------------------------------------- 6: ingest errors


def test_ingest_of_a_path_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "gone.jsonl")
    (tmp_path / "ws").mkdir()
    for missing, says in (("nope.jsonl", "no such file"), ("link.jsonl", "a broken link")):
        result = invoke("memory", "ingest", "-w", tmp_path / "ws", tmp_path / missing)
        assert result.exit_code == 2, result.output
        [line] = error_lines(result.stderr)
        assert str(tmp_path / missing) in line and says in line
    assert not any((tmp_path / "ws").iterdir())  # nothing made by a command that did not start


def test_ingest_says_why_a_file_was_not_read(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "notes.json").write_text("{ not json at all")
    result = invoke(
        "memory",
        "ingest",
        "-w",
        tmp_path / "ws",
        tmp_path / "pipe.jsonl",
        tmp_path / "pyproject.toml",
        tmp_path / "notes.json",
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "pipe.jsonl: skipped: not a regular file (a device, FIFO or socket)" in out
    assert "pyproject.toml: skipped: not a transcript: not JSON" in out
    assert "notes.json: skipped: not a transcript: not JSON" in out
    assert "JSONDecodeError" not in out + result.stderr


def test_a_wrong_format_says_every_line_was_dropped(tmp_path: Path) -> None:
    from ingest_fixtures import claude_session_one, codex_session_one

    (tmp_path / "ws").mkdir()
    claude = claude_session_one(tmp_path / "claude")
    codex = codex_session_one(tmp_path / "codex")
    for wrong, source in (("codex", claude.path), ("claude-code", codex.path)):
        result = invoke("memory", "ingest", "-w", tmp_path / "ws", "--format", wrong, source)
        assert result.exit_code == 0, result.output
        assert f"nothing recorded: every new line was dropped — is it really {wrong}?" in (
            result.stdout
        )
        assert "nothing new" not in result.stdout
    right = invoke("memory", "ingest", "-w", tmp_path / "ws", claude.path)
    assert "1 segment" in right.stdout or "segment(s)," in right.stdout
    again = invoke("memory", "ingest", "-w", tmp_path / "ws", claude.path)
    assert ": nothing new" in again.stdout  # nothing appended: no drop, no warning
