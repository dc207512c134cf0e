"""Issue 39 item 8: ``--review`` on ``run``, ``chat``, ``memory generate``, ``memory ingest``
and ``mcp`` turns review mode on: what would have changed memory becomes a proposal in
``sandmem memory inbox``, memory is unchanged until ``memory approve``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_workspaces import invoke, invoke_json, memory_server_handler, pending_conversation
from fake_openai import FakeOpenAIServer
from ingest_fixtures import codex_session_one

X = ("--engine", "extractive")


def _inbox(ws: Path) -> list[dict[str, object]]:
    found: list[dict[str, object]] = invoke_json("memory", "inbox", "-w", ws, "--json")
    return found


def _memory(ws: Path) -> str:
    path = ws / "memories" / "MEMORY.md"
    return path.read_text() if path.exists() else ""


def _approve_all(ws: Path) -> None:
    for proposal in _inbox(ws):
        done = invoke("memory", "approve", "-w", ws, str(proposal["id"]))
        assert done.exit_code == 0, done.stderr
    assert _inbox(ws) == []


def test_generate_review(tmp_path: Path) -> None:
    pending_conversation(tmp_path, "a")
    result = invoke("memory", "generate", "-w", tmp_path, "--review", *X)
    assert result.exit_code == 0, result.stderr
    assert "consolidation proposed for review (memory unchanged)" in result.stdout
    [proposal] = _inbox(tmp_path)
    assert proposal["kind"] == "consolidation" and "MEMORY.md" in proposal["files"]
    assert not _memory(tmp_path).strip()  # unchanged until approved
    _approve_all(tmp_path)
    assert _memory(tmp_path).strip()


def test_ingest_review(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    exp = codex_session_one(tmp_path / "codex")
    result = invoke("memory", "ingest", "-w", ws, exp.path, "--generate", "--review", *X)
    assert result.exit_code == 0, result.stderr
    assert len(_inbox(ws)) == 1 and not _memory(ws).strip()
    needs = invoke("memory", "ingest", "-w", ws, exp.path, "--review")
    assert needs.exit_code == 2 and "pass --generate too" in needs.stderr


def test_run_review(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    fake_openai.handler = memory_server_handler("Done.")
    env = {"OPENAI_BASE_URL": fake_openai.base_url}
    result = invoke("run", "-w", tmp_path, "-m", "m", "--review", *X, "fix the bug", env=env)
    assert result.exit_code == 0, result.stderr
    assert len(_inbox(tmp_path)) == 1 and not _memory(tmp_path).strip()
    _approve_all(tmp_path)
    assert _memory(tmp_path).strip()


def test_chat_review(tmp_path: Path, fake_openai: FakeOpenAIServer) -> None:
    from pty_run import PtyCommand

    fake_openai.handler = memory_server_handler("Done.")
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "TERM": "dumb"}
    with PtyCommand("chat", "-w", tmp_path, "-m", "m", "--review", *X, env=env) as chat:
        chat.expect("you> ")
        chat.type("fix the bug\r")
        chat.expect(r"Done\.[\s\S]*you> ")
        chat.type("/exit\r")
        assert chat.wait() == 0, chat.output
    assert len(_inbox(tmp_path)) == 1 and not _memory(tmp_path).strip()


def test_mcp_review(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp_client import stdio_session

    args = ["--workspace", str(tmp_path), "--create", "--allow-generate", "--review", *X]

    async def client() -> None:
        async with stdio_session(args) as session:
            note = {"text": "Always run make test before a commit.", "kind": "procedure"}
            assert not (await session.call_tool("memory_remember", note)).is_error
            report = await session.call_tool("memory_generate", {})
            assert not report.is_error
            assert json.loads(report.content[0].text)["processed"] == ["mcp-notes"]

    anyio.run(client)
    assert len(_inbox(tmp_path)) == 1 and "make test" not in _memory(tmp_path)


def test_approve_of_a_proposal_that_folds_in_a_forgotten_conversation_warns(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    exp = codex_session_one(tmp_path / "codex")
    rid = f"codex-{exp.session_id}"
    invoke("memory", "ingest", "-w", ws, exp.path)
    assert invoke("memory", "generate", "-w", ws, "--review", *X).exit_code == 0
    [proposal] = _inbox(ws)
    # the conversation is forgotten while the proposal waits (the note `forget` leaves;
    # a forget itself would also move memory on, making the proposal stale)
    note = {"forgotten": {rid: {"forgotten_at": "2026-12-06T08:00:00.000Z"}}}
    (ws / "sessions" / ".forgotten.json").write_text(json.dumps(note))
    approved = invoke("memory", "approve", "-w", ws, str(proposal["id"]))
    assert approved.exit_code == 0, approved.stderr
    assert f"forgotten conversation(s) {rid}" in approved.stderr
    as_json = invoke_json("memory", "log", "-w", ws, "--json")
    assert as_json  # the version was made
    undo = invoke("memory", "forget", "-w", ws, rid, "--undo")
    assert undo.exit_code == 0 and "no longer forgotten" in undo.stdout
