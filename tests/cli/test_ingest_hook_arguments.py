"""A hook's payload names a path, never an option: ``transcript_path: "--watch=DIR"`` must not
start a watcher (or change any other setting of the detached ingest)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sandmem.cli import cli
from sandmem.memory.ingestion._hooks import claude_hook_paths


def _spawned(monkeypatch: pytest.MonkeyPatch, ws: Path, transcript: str) -> list[str]:
    """The argv of the detached ingest the Claude Code hook starts for ``transcript``."""
    started: list[list[str]] = []

    def fake_popen(argv: list[str], **kwargs: Any) -> None:
        started.append(argv)

    monkeypatch.setattr("sandmem.cli._ingest_cmd.subprocess.Popen", fake_popen)
    payload = json.dumps({"transcript_path": transcript, "hook_event_name": "SessionEnd"})
    args = ["memory", "ingest", "--workspace", str(ws), "--hook", "claude-code"]
    result = CliRunner().invoke(cli, args, input=payload, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    monkeypatch.undo()
    [argv] = started
    return argv


@pytest.mark.parametrize(
    "evil",
    [
        "--watch={watched}",
        "--workspace={watched}",
        "--generate",
        "-h",
        "--memories-dir=../../etc",
    ],
)
def test_a_hook_path_that_looks_like_an_option_is_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, evil: str
) -> None:
    ws, watched = tmp_path / "ws", tmp_path / "watched"
    ws.mkdir()
    watched.mkdir()
    transcript = evil.format(watched=watched)
    argv = _spawned(monkeypatch, ws, transcript)
    cut = argv.index("--")
    assert all(not a.startswith("-") for a in argv[cut + 1 :])  # no option after "--"
    assert "--watch" not in argv[:cut] and not any(a.startswith("--watch") for a in argv[:cut])
    if evil.startswith("--watch"):
        # run what the hook would have started: it ends at once (a watcher would never end),
        # reads nothing from the watched directory and writes nothing outside the workspace
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert "Usage" not in done.stdout
        assert list(watched.iterdir()) == []
        assert not (tmp_path / "etc").exists()


@pytest.mark.parametrize("given", ["--watch=/tmp", "-x", "relative/t.jsonl", "~/t.jsonl"])
def test_claude_hook_paths_are_absolute(given: str) -> None:
    [path] = claude_hook_paths(json.dumps({"transcript_path": given}))
    assert path.is_absolute() and not str(path).startswith("-")


def test_a_hook_without_a_payload_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "sandmem.cli._ingest_cmd.subprocess.Popen",
        lambda *a, **k: pytest.fail("nothing may start"),
    )
    args = ["memory", "ingest", "--workspace", str(tmp_path), "--hook", "claude-code"]
    bad = CliRunner().invoke(cli, args, input='{"transcript_path": ""}')
    assert bad.exit_code != 0
