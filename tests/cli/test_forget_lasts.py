"""Issue 39 item 5: ``forget`` lasts. A forgotten conversation is not brought back by the same
ingest, the Claude Code hook or ``--watch``; ``forget --undo`` lets it be ingested again;
``restore`` of a version from before the forget warns; the forget record is read as hostile
(a broken one stops ingest instead of bringing back what may have been forgotten)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cli_workspaces import invoke, invoke_json
from click.testing import CliRunner
from ingest_fixtures import claude_session_one, codex_session_one, codex_session_two

from sandmem.cli import cli
from sandmem.memory import ingest_watch

X = ("--engine", "extractive")


def _ingested(ws: Path, source: Path) -> str:
    result = invoke("memory", "ingest", "-w", ws, source, "--generate", *X)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def _forget(ws: Path, rid: str) -> None:
    result = invoke("memory", "forget", "-w", ws, rid, "--yes", *X)
    assert result.exit_code == 0, result.stderr


def test_the_same_ingest_does_not_bring_it_back_until_undo(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    exp = codex_session_one(tmp_path / "codex")
    rid = f"codex-{exp.session_id}"
    _ingested(ws, exp.path)
    rollout = ws / "sessions" / f"{rid}.jsonl"
    assert rollout.is_file()
    _forget(ws, rid)
    assert not rollout.exists()
    again = _ingested(ws, exp.path)
    assert f"conversation {rid} was forgotten" in again
    assert f"sandmem memory forget --undo {rid}" in again
    assert not rollout.exists()
    assert rid not in (ws / "memories" / "MEMORY.md").read_text()
    data = invoke_json("memory", "ingest", "-w", ws, exp.path, "--json")
    assert [s["status"] for s in data["sources"]] == ["skipped"]

    undo = invoke("memory", "forget", "-w", ws, rid, "--undo")
    assert undo.exit_code == 0 and "no longer forgotten" in undo.stdout
    assert "ingested" in _ingested(ws, exp.path)
    assert rollout.is_file()
    twice = invoke("memory", "forget", "-w", ws, rid, "--undo")
    assert twice.exit_code == 0 and "was not forgotten" in twice.stderr


def test_the_hook_does_not_bring_it_back(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    exp = claude_session_one(tmp_path / "claude")
    rid = f"claude-{exp.session_id}"
    payload = json.dumps({"transcript_path": str(exp.path), "hook_event_name": "SessionEnd"})
    args = ["memory", "ingest", "--workspace", str(ws), "--hook", "claude-code", "--wait"]
    first = CliRunner().invoke(cli, args, input=payload, catch_exceptions=False)
    assert first.exit_code == 0, first.output
    _forget(ws, rid)
    again = CliRunner().invoke(cli, args, input=payload, catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert not (ws / "sessions" / f"{rid}.jsonl").exists()


def test_watch_does_not_bring_it_back(tmp_path: Path) -> None:
    ws, src = tmp_path / "ws", tmp_path / "codex"
    ws.mkdir()
    exp = codex_session_one(src)
    rid = f"codex-{exp.session_id}"
    _ingested(ws, exp.path)
    _forget(ws, rid)

    other = codex_session_two(src)  # recorded by the same watch: it did look
    got = asyncio.Event()

    async def watch_until_other_is_recorded() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            ingest_watch(ws, src, interval=0.05, stop=stop, on_report=lambda r: got.set())
        )
        await asyncio.wait_for(got.wait(), timeout=60)
        stop.set()
        await asyncio.wait_for(task, timeout=60)

    asyncio.run(watch_until_other_is_recorded())
    assert (ws / "sessions" / f"codex-{other.session_id}.jsonl").is_file()
    assert not (ws / "sessions" / f"{rid}.jsonl").exists()


@pytest.mark.parametrize(
    "content",
    ["{not json", '["a list"]', '{"forgotten": ["x"]}', "x" * (5 * 1024 * 1024)],
)
def test_a_broken_forget_record_stops_ingest(tmp_path: Path, content: str) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    (ws / "sessions" / ".forgotten.json").write_text(content)
    exp = codex_session_one(tmp_path / "codex")
    result = invoke("memory", "ingest", "-w", ws, exp.path)
    assert result.exit_code != 0
    assert ".forgotten.json" in result.stderr
    assert not (ws / "sessions" / f"codex-{exp.session_id}.jsonl").exists()


def test_invalid_ids_in_the_forget_record_are_ignored(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "sessions").mkdir(parents=True)
    record = {"forgotten": {"../../etc": {}, "": 1, "ok-id": {"forgotten_at": 3}}}
    (ws / "sessions" / ".forgotten.json").write_text(json.dumps(record))
    exp = codex_session_one(tmp_path / "codex")
    assert "ingested" in _ingested(ws, exp.path)


def test_restore_from_before_a_forget_warns(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    one = codex_session_one(tmp_path / "codex")
    rid = f"codex-{one.session_id}"
    _ingested(ws, one.path)
    before = max(v["version"] for v in invoke_json("memory", "log", "-w", ws, "--json"))
    _forget(ws, rid)
    restored = invoke("memory", "restore", "-w", ws, str(before))
    assert restored.exit_code == 0, restored.stderr
    assert f"forgotten conversation(s) {rid}" in restored.stderr
    assert "sandmem memory restore " in restored.stderr
    # a restore that brings nothing forgotten back says nothing
    latest = max(v["version"] for v in invoke_json("memory", "log", "-w", ws, "--json"))
    quiet = invoke("memory", "restore", "-w", ws, str(latest))
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr
