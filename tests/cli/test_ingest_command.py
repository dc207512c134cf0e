"""``sandmem memory ingest``: the command, the Claude Code ``SessionEnd`` hook, the Codex
``notify`` command (in this process and detached), and ``--watch``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_workspaces import invoke, invoke_json
from click.testing import CliRunner
from ingest_fixtures import (
    claude_session_one,
    codex_session_one,
    write_all,
)

from sandmem.cli import cli
from sandmem.memory import IngestReport, ingest_watch


def test_ingest_command_reports_and_generates(tmp_path: Path) -> None:
    root, ws = tmp_path / "src", tmp_path / "ws"
    ws.mkdir()
    write_all(root)
    (root / "junk.jsonl").write_bytes(b"\x00\x01binary\xff" * 10)
    result = invoke(
        "memory", "ingest", "--workspace", ws, root, "--generate", "--engine", "extractive"
    )
    assert result.exit_code == 0, result.output
    assert "ingested 21 segment(s)" in result.stdout
    assert "junk.jsonl: skipped: cannot tell the format" in result.stdout
    assert "consolidated" in result.stdout
    assert (ws / "memories" / "MEMORY.md").read_text().strip()
    data = invoke_json("memory", "ingest", "--workspace", ws, root, "--json")
    assert {s["status"] for s in data["sources"]} == {"unchanged", "skipped"}
    assert data["generation"] is None


def test_ingest_command_needs_a_path(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["memory", "ingest", "--workspace", str(tmp_path)])
    assert result.exit_code == 2 and "at least one transcript" in result.output


def test_claude_code_session_end_hook(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    exp = claude_session_one(tmp_path / "claude")
    payload = {
        "session_id": exp.session_id,
        "transcript_path": str(exp.path),
        "cwd": "/home/ana/webapp",
        "hook_event_name": "SessionEnd",
        "reason": "exit",
    }
    result = CliRunner().invoke(
        cli,
        ["memory", "ingest", "--workspace", str(ws), "--hook", "claude-code", "--wait"],
        input=json.dumps(payload),
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert (ws / "sessions" / f"claude-{exp.session_id}.jsonl").is_file()
    # generation is deferred: the conversation is pending
    assert not (ws / "memories" / "raw_memories" / f"claude-{exp.session_id}.md").exists()
    bad = CliRunner().invoke(
        cli, ["memory", "ingest", "--workspace", str(ws), "--hook", "claude-code"], input="{}"
    )
    assert bad.exit_code != 0 and "transcript_path" in bad.output


def test_codex_notify_command(tmp_path: Path) -> None:
    ws, home = tmp_path / "ws", tmp_path / "codex-home"
    ws.mkdir()
    exp = codex_session_one(home / "sessions")
    payload = {
        "type": "agent-turn-complete",
        "thread-id": exp.session_id,
        "turn-id": "1",
        "cwd": "/home/dev/shop",
        "input-messages": ["fix it"],
        "last-assistant-message": "done",
    }
    env = {"CODEX_HOME": str(home)}
    args = ["memory", "ingest", "--workspace", str(ws), "--hook", "codex", "--wait"]
    # Codex notifies for every project; by default only the workspace's turns are kept
    other = CliRunner().invoke(cli, [*args, json.dumps(payload)], env=env)
    assert other.exit_code == 0, other.output
    assert not (ws / "sessions" / f"codex-{exp.session_id}.jsonl").exists()
    args.append("--all-projects")
    result = CliRunner().invoke(cli, [*args, json.dumps(payload)], env=env)
    assert result.exit_code == 0, result.output
    assert (ws / "sessions" / f"codex-{exp.session_id}.jsonl").is_file()
    other = CliRunner().invoke(cli, [*args, json.dumps({"type": "something-else"})], env=env)
    assert other.exit_code == 0 and other.output == ""


def test_hook_ingests_in_a_detached_process(tmp_path: Path) -> None:
    """Without --wait the hook returns at once and a background process ingests."""
    ws = tmp_path / "ws"
    ws.mkdir()
    exp = claude_session_one(tmp_path / "claude")
    payload = json.dumps({"transcript_path": str(exp.path), "hook_event_name": "SessionEnd"})
    code = "import sys; from sandmem.cli import main; sys.argv[0] = 'sandmem'; main()"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "memory",
            "ingest",
            "--workspace",
            str(ws),
            "--hook",
            "claude-code",
        ],
        input=payload,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    rollout = ws / "sessions" / f"claude-{exp.session_id}.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        rollout.is_file() and rollout.read_text().count("\n") == 2
    ):
        time.sleep(0.05)
    assert rollout.read_text().count("\n") == 2


def test_hook_does_not_wait_for_stdin_to_close(tmp_path: Path) -> None:
    """Claude Code may keep the hook's stdin open: the hook reads one JSON object and goes on."""
    ws = tmp_path / "ws"
    ws.mkdir()
    exp = claude_session_one(tmp_path / "claude")
    payload = json.dumps({"transcript_path": str(exp.path), "hook_event_name": "SessionEnd"})
    code = "import sys; from sandmem.cli import main; sys.argv[0] = 'sandmem'; main()"
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "memory",
            "ingest",
            "--workspace",
            str(ws),
            "--hook",
            "claude-code",
            "--wait",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    ) as proc:
        assert proc.stdin is not None
        proc.stdin.write(payload.encode())
        proc.stdin.flush()  # and never closed while the hook runs
        try:
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert (ws / "sessions" / f"claude-{exp.session_id}.jsonl").is_file()


async def test_watch_ingests_changes_and_survives_a_restart(tmp_path: Path) -> None:
    ws, transcripts = tmp_path / "ws", tmp_path / "transcripts"
    ws.mkdir()
    transcripts.mkdir()
    reports: list[IngestReport] = []
    got = asyncio.Event()

    def seen(report: IngestReport) -> None:
        reports.append(report)
        got.set()

    async def run_until_report(action: object) -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            ingest_watch(ws, transcripts, interval=0.05, stop=stop, on_report=seen)
        )
        got.clear()
        if callable(action):
            action()
        await asyncio.wait_for(got.wait(), timeout=30)
        stop.set()
        await asyncio.wait_for(task, timeout=30)

    exp = codex_session_one(transcripts)
    rid = f"codex-{exp.session_id}"
    await run_until_report(None)
    assert reports[-1].recorded_segments == 2
    # a restart sees the same file again and records nothing of it; a new file is ingested
    await run_until_report(lambda: claude_session_one(transcripts / "claude"))
    last = {s.rollout_id: s for s in reports[-1].sources}
    assert last[rid].status == "unchanged"
    assert (ws / "sessions" / f"{rid}.jsonl").read_text().count("\n") == 2


def test_watch_refuses_a_bad_interval(tmp_path: Path) -> None:
    from sandmem._errors import UserError

    with pytest.raises(UserError):
        asyncio.run(ingest_watch(tmp_path, tmp_path, interval=0))


def test_watch_waits_for_a_file_to_settle() -> None:
    """Debounced: a file is due once it stayed the same for one look after changing, and not
    again until it changes (an agent writing a line at a time is not ingested per line)."""
    from sandmem.memory.ingestion._watch import due

    path = Path("rollout.jsonl")
    looks = [(10, 1), (20, 2), (20, 2), (20, 2), (30, 3), (30, 3)]
    before: dict[Path, tuple[int, int]] = {}
    ingested: dict[Path, tuple[int, int]] = {}
    seen = []
    for stat in looks:
        now = {path: stat}
        files = due(now, before, ingested)
        seen.append(bool(files))
        ingested.update({p: now[p] for p in files})
        before = now
    assert seen == [False, False, True, False, False, True]
