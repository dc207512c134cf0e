"""Ingest decides a file's format once and keeps it (issue 35): a growing chat transcript that
gains a tool call, changes shape, is truncated and regrown, or whose tool calls come after its
first 50 lines, is recorded as one conversation with no turn recorded twice."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sandmem.memory import ingest_sync
from sandmem.memory.ingestion import _detect
from sandmem.memory.ingestion._detect import detect, sniff


def _write(path: Path, rows: list[dict[str, Any]], mode: str = "a") -> None:
    with path.open(mode, encoding="utf-8") as out:
        out.write("".join(json.dumps(r) + "\n" for r in rows))


def _plain_turn(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question number {n}"},
        {"role": "assistant", "content": f"answer number {n}"},
    ]


def _chat_tool_turn(n: int) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    return [
        {"role": "user", "content": f"question number {n}"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"tool output {n}"},
        {"role": "assistant", "content": f"answer number {n}"},
    ]


def _responses_tool_turn(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question number {n}"},
        {"type": "function_call", "call_id": f"r{n}", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"r{n}", "output": f"tool output {n}"},
        {"role": "assistant", "content": f"answer number {n}"},
    ]


def _recorded(workspace: Path) -> tuple[set[str], Counter[str], Counter[str]]:
    """The conversations, and how often each user message and tool output was recorded."""
    users: Counter[str] = Counter()
    outputs: Counter[str] = Counter()
    names = set()
    for path in (workspace / "sessions").glob("*.jsonl"):
        names.add(path.stem)
        for line in path.read_text(encoding="utf-8").splitlines():
            segment = json.loads(line)
            for item in segment["input"] + segment["generated_items"]:
                if item.get("role") == "user":
                    users[item["content"]] += 1
                elif item.get("type") == "function_call_output":
                    outputs[item["output"]] += 1
    return names, users, outputs


def _once(counter: Counter[str], wanted: list[str]) -> None:
    assert {k: v for k, v in counter.items() if v != 1} == {}
    assert sorted(counter) == sorted(wanted)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def test_a_plain_file_that_gains_a_chat_tool_call_stays_one_conversation(
    tmp_path: Path, workspace: Path
) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, _plain_turn(1) + _plain_turn(2))
    assert ingest_sync(workspace, [path]).sources[0].format == "responses"
    _write(path, _chat_tool_turn(3))
    report = ingest_sync(workspace, [path])
    assert [(s.status, s.format, s.rollout_id) for s in report.sources] == [
        ("recorded", "responses", "responses-t")
    ]
    names, users, outputs = _recorded(workspace)
    assert names == {"responses-t"}
    _once(users, [f"question number {n}" for n in (1, 2, 3)])
    _once(outputs, ["tool output 3"])
    assert ingest_sync(workspace, [path]).recorded_segments == 0


def test_a_chat_file_that_gains_responses_items_stays_one_conversation(
    tmp_path: Path, workspace: Path
) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, _chat_tool_turn(1))
    assert ingest_sync(workspace, [path]).sources[0].format == "chat"
    _write(path, _responses_tool_turn(2) + _plain_turn(3))
    assert ingest_sync(workspace, [path]).sources[0].rollout_id == "chat-t"
    names, users, outputs = _recorded(workspace)
    assert names == {"chat-t"}
    _once(users, [f"question number {n}" for n in (1, 2, 3)])
    _once(outputs, ["tool output 1", "tool output 2"])


@pytest.mark.parametrize("turn", [_chat_tool_turn, _responses_tool_turn])
def test_tool_calls_after_line_50_are_kept(tmp_path: Path, workspace: Path, turn: Any) -> None:
    path = tmp_path / "long.jsonl"
    _write(path, [row for n in range(30) for row in _plain_turn(n)] + turn(30))
    assert detect(path).format == ("chat" if turn is _chat_tool_turn else "responses")
    ingest_sync(workspace, [path])
    names, users, outputs = _recorded(workspace)
    assert names == {f"{detect(path).format}-long"}
    _once(users, [f"question number {n}" for n in range(31)])
    _once(outputs, ["tool output 30"])


def test_a_truncated_file_is_refused_then_recorded_once_when_regrown(
    tmp_path: Path, workspace: Path
) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, _plain_turn(1) + _chat_tool_turn(2))
    ingest_sync(workspace, [path])
    prefix = path.read_bytes()
    # truncated to its plain first turn: detection alone would now say "responses"
    path.write_bytes(prefix[: len(json.dumps(_plain_turn(1)[0])) * 2])
    _write(path, [_plain_turn(1)[1]], mode="w")
    refused = ingest_sync(workspace, [path]).sources[0]
    assert refused.status == "failed" and refused.rollout_id == "chat-t"
    # regrown with the same prefix, then a new turn: only the new turn is recorded
    path.write_bytes(prefix)
    _write(path, _plain_turn(3))
    assert ingest_sync(workspace, [path]).recorded_segments == 1
    names, users, outputs = _recorded(workspace)
    assert names == {"chat-t"}
    _once(users, [f"question number {n}" for n in (1, 2, 3)])
    _once(outputs, ["tool output 2"])


def test_truncated_and_rewritten_differently_is_refused(tmp_path: Path, workspace: Path) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, _chat_tool_turn(1) + _plain_turn(2))
    ingest_sync(workspace, [path])
    _write(path, _plain_turn(7) + _plain_turn(8) + _plain_turn(9), mode="w")
    for _ in range(2):
        source = ingest_sync(workspace, [path]).sources[0]
        assert source.status == "failed" and "changed" in (source.error or "")
    names, users, _ = _recorded(workspace)
    assert names == {"chat-t"}
    _once(users, ["question number 1", "question number 2"])


def test_a_format_asked_for_that_differs_from_the_kept_one_is_refused(
    tmp_path: Path, workspace: Path
) -> None:
    path = tmp_path / "t.jsonl"
    _write(path, _plain_turn(1))
    ingest_sync(workspace, [path])
    _write(path, _plain_turn(2))
    refused = ingest_sync(workspace, [path], format="chat").sources[0]
    assert refused.status == "failed" and "ingested as responses" in (refused.error or "")
    assert _recorded(workspace)[0] == {"responses-t"}
    # the same format asked for by name goes on where the last ingest stopped
    assert ingest_sync(workspace, [path], format="responses").recorded_segments == 1
    _once(_recorded(workspace)[1], ["question number 1", "question number 2"])


def test_growing_in_random_shapes_never_records_a_turn_twice(tmp_path: Path) -> None:
    shapes = [_plain_turn, _chat_tool_turn, _responses_tool_turn]
    for seed in range(6):
        rng = random.Random(seed)
        workspace = tmp_path / f"ws{seed}"
        workspace.mkdir()
        path = tmp_path / f"grow{seed}.jsonl"
        path.write_text("", encoding="utf-8")
        tools = []
        for n in range(12):
            shape = rng.choice(shapes)
            _write(path, shape(n))
            if shape is not _plain_turn:
                tools.append(f"tool output {n}")
            if rng.random() < 0.5:
                ingest_sync(workspace, [path])
        ingest_sync(workspace, [path])
        names, users, outputs = _recorded(workspace)
        assert len(names) == 1, (seed, names)
        _once(users, [f"question number {n}" for n in range(12)])
        _once(outputs, tools)


def test_a_first_line_over_256_kib_does_not_break_detection(
    tmp_path: Path, workspace: Path
) -> None:
    path = tmp_path / "big.jsonl"
    pasted = "log line\n" * 40_000  # ~360 KB of pasted log in the first message
    _write(path, [{"role": "user", "content": pasted}, {"role": "assistant", "content": "ok"}])
    _write(path, _chat_tool_turn(1))
    assert path.stat().st_size > 256 * 1024
    assert detect(path).format == "chat"
    report = ingest_sync(workspace, [path])
    assert report.sources[0].status == "recorded" and report.sources[0].rollout_id == "chat-big"
    _once(_recorded(workspace)[2], ["tool output 1"])


def test_a_line_over_the_detection_bound_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_detect, "DETECT_MAX_LINE_BYTES", 1024)
    path = tmp_path / "huge.jsonl"
    _write(path, [{"role": "user", "content": "x" * 5000}, *_chat_tool_turn(1)])
    assert detect(path).format == "chat"
    assert sniff(path.read_bytes())[0] == "chat"
    # the read is bounded: a tool call past DETECT_MAX_BYTES is not seen by detection (the
    # plain messages before it decide), though the ingest reads the whole file
    monkeypatch.setattr(_detect, "DETECT_MAX_BYTES", 4096)
    bounded = tmp_path / "bounded.jsonl"
    _write(bounded, [row for n in range(60) for row in _plain_turn(n)] + _chat_tool_turn(60))
    assert detect(bounded).format == "responses"


def test_a_claude_file_whose_first_entries_carry_no_session_is_detected(
    tmp_path: Path, workspace: Path
) -> None:
    path = tmp_path / "session.jsonl"
    snapshots = [
        {"type": "file-history-snapshot", "messageId": f"m{n}", "snapshot": {}} for n in range(60)
    ]
    entry = {
        "type": "user",
        "sessionId": "5f0c9a7e-1111-4222-8333-944455556666",
        "uuid": "u1",
        "parentUuid": None,
        "timestamp": "2026-11-20T10:00:00.000Z",
        "message": {"role": "user", "content": "rename the config loader"},
    }
    _write(path, [*snapshots, entry])
    found = detect(path)
    assert found.format == "claude-code"
    report = ingest_sync(workspace, [path])
    assert report.sources[0].rollout_id == "claude-5f0c9a7e-1111-4222-8333-944455556666"
