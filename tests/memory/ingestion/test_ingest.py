"""Ingesting other agents' transcripts (issue 27): every format's fixtures keep their facts in
the phase-one rendering, generation cites every conversation, re-ingesting is incremental and
idempotent, secrets never reach disk, and bad input is skipped, bounded and reported."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from ingest_fixtures import (
    SECRETS,
    Expected,
    add_agents_rows,
    codex_session_one,
    write_all,
    write_input_list,
)

from sandmem.memory import (
    IngestReport,
    generate_sync,
    ingest_sync,
    list_conversations_sync,
)
from sandmem.memory._render import render_rollout
from sandmem.memory.ingestion import _lines
from sandmem.memory.ingestion._detect import sniff
from sandmem.memory.rollouts import parse_rollout


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Expected]]:
    """Every fixture ingested once into one workspace, then generated with ``extractive``."""
    root = tmp_path_factory.mktemp("transcripts")
    expected = write_all(root)
    workspace = tmp_path_factory.mktemp("ws")
    report = ingest_sync(workspace, [root])
    assert all(s.status == "recorded" for s in report.sources), report
    generation = generate_sync(workspace, engine="extractive")
    assert generation.complete, generation
    return root, workspace, expected


def _rollout_id(report: IngestReport, path: Path, session_id: str) -> str:
    for source in report.sources:
        if source.path == str(path) and source.session_id == session_id:
            assert source.rollout_id is not None
            return source.rollout_id
    raise AssertionError(f"{path} ({session_id}) was not ingested: {report}")


def _rendered(workspace: Path, rollout_id: str) -> str:
    text = (workspace / "sessions" / f"{rollout_id}.jsonl").read_text(encoding="utf-8")
    return render_rollout(parse_rollout(text))


def _ids(workspace: Path) -> set[str]:
    return {p.stem for p in (workspace / "sessions").glob("*.jsonl")}


def test_every_format_is_detected_from_its_content(
    corpus: tuple[Path, Path, list[Expected]],
) -> None:
    _, _, expected = corpus
    for exp in expected:
        found, _ = sniff(exp.path.read_bytes()[:65536])
        wanted = {"openai-agents": "openai-agents", "responses": "document", "chat": "document"}
        if exp.path.suffix == ".jsonl":  # JSON Lines are placed by their first lines
            wanted = {"openai-agents": "openai-agents"}
        assert found == wanted.get(exp.format, exp.format), exp.path


def test_rendered_input_keeps_every_fact(corpus: tuple[Path, Path, list[Expected]]) -> None:
    """Each user message, final answer, failed command (with its non-zero exit) and file path
    of every source session is in the phase-one rendering of its conversation."""
    root, workspace, expected = corpus
    report = ingest_sync(workspace, [root])  # records nothing; tells each source's rollout id
    assert report.recorded_segments == 0
    for exp in expected:
        rendered = _rendered(workspace, _rollout_id(report, exp.path, exp.session_id))
        for text in (*exp.user_messages, *exp.final_answers, *exp.file_paths):
            assert text in rendered or _redacted(text) in rendered, (exp.path, text)
        for command in exp.failed_commands:
            block = rendered[rendered.index(command) :]
            assert re.search(r"\(exit [1-9]\d*\)", block.split("\n[", 2)[1]), (exp.path, command)
        users = [line for line in rendered.splitlines() if re.match(r"\[\d+\] user: ", line)]
        for text in exp.not_user:  # a sub-agent's task, a compaction summary, a notification
            assert not any(text in line for line in users), (exp.path, text)


def _redacted(text: str) -> str:
    from sandmem.redaction import redact

    return redact(text)


def test_source_metadata_and_times_are_kept(corpus: tuple[Path, Path, list[Expected]]) -> None:
    _, workspace, _ = corpus
    conversations = {c.rollout_id: c for c in list_conversations_sync(workspace)}
    codex = conversations["codex-0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"]
    # updated_at is the source's last event, not the time of the ingest
    assert codex.updated_at == "2026-11-20T10:05:03.000Z"
    assert codex.segments == 3  # two turns, and the thread it spawned (its own file)
    rendered = _rendered(workspace, codex.rollout_id)
    assert "cwd /home/dev/shop" in rendered
    assert "(sub-agent task) Find where money fields are declared" in rendered
    assert "(sub-agent) Money fields live in billing/models.py." in rendered
    assert "(agent /root/kepler to /root) Money fields live in billing/models.py." in rendered
    # an MCP tool of the session (a namespaced call), its output without Codex's status lines
    assert "call mcp__sandmem_memory.memory_search: query=money decimal" in rendered
    assert "output: memories/MEMORY.md:3 use Decimal for money" in rendered
    claude = conversations["claude-7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"]
    # the sub-agent's own file joined its parent's conversation
    assert claude.segments == 3
    assert "grep -rl forms tests/" in _rendered(workspace, claude.rollout_id)
    assert "(sub-agent) Validators are in web/validators.py" in _rendered(
        workspace, claude.rollout_id
    )
    recent = _rendered(workspace, "claude-f1056c66-ca4c-4664-8acd-f766c7719885")
    # a prompt typed while the agent was busy opens a turn of its own
    assert "] user: Also keep the rounding in one helper, please." in recent
    assert "call mcp__sandmem-memory__memory_search: query=invoice rounding" in recent
    agents = conversations["agents-support-4411"]
    assert agents.updated_at == "2026-11-22T12:00:05.000Z"


def test_extractive_generation_cites_every_conversation(
    corpus: tuple[Path, Path, list[Expected]],
) -> None:
    _, workspace, _ = corpus
    memory = (workspace / "memories" / "MEMORY.md").read_text(encoding="utf-8")
    ids = _ids(workspace)
    assert len(ids) == 13
    for rollout_id in ids:  # a Sources entry of MEMORY.md names its rollout summary
        summaries = list((workspace / "memories" / "rollout_summaries").glob(f"{rollout_id}_*"))
        assert len(summaries) == 1, rollout_id
        assert f"- rollout_summaries/{summaries[0].name} (rollout {rollout_id}," in memory


def test_no_planted_secret_reaches_sessions_or_memories(
    corpus: tuple[Path, Path, list[Expected]],
) -> None:
    _, workspace, _ = corpus
    for directory in ("sessions", "memories"):
        for path in (workspace / directory).rglob("*"):
            if path.is_file():
                data = path.read_bytes().decode("utf-8", "replace")
                for secret in SECRETS:
                    assert secret not in data, (path, secret)


def test_reingesting_unchanged_files_records_nothing(tmp_path: Path) -> None:
    root, workspace = tmp_path / "src", tmp_path / "ws"
    workspace.mkdir()
    write_all(root)
    ingest_sync(workspace, [root])
    before = {p.name: p.read_bytes() for p in (workspace / "sessions").glob("*.jsonl")}
    again = ingest_sync(workspace, [root])
    assert again.recorded_segments == 0
    assert {s.status for s in again.sources} == {"unchanged"}
    assert {p.name: p.read_bytes() for p in (workspace / "sessions").glob("*.jsonl")} == before


def _codex_turn(n: int) -> list[str]:
    rows = [
        {
            "timestamp": f"2026-11-20T12:00:0{n}.000Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"follow-up question {n}"}],
            },
        },
        {
            "timestamp": f"2026-11-20T12:00:0{n}.500Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": f"answer {n}"}],
            },
        },
    ]
    return [json.dumps(r) + "\n" for r in rows]


def _segments(workspace: Path, rollout_id: str) -> list[dict[str, object]]:
    text = (workspace / "sessions" / f"{rollout_id}.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_appended_lines_are_recorded_once_and_a_partial_line_waits(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    exp = codex_session_one(tmp_path / "codex")
    rid = f"codex-{exp.session_id}"
    ingest_sync(workspace, [exp.path])
    assert len(_segments(workspace, rid)) == 2
    with exp.path.open("a", encoding="utf-8") as out:
        out.write("".join(_codex_turn(1)))
    report = ingest_sync(workspace, [exp.path])
    assert report.recorded_segments == 1
    segments = _segments(workspace, rid)
    assert len(segments) == 3
    assert segments[-1]["input"] == [
        {"type": "message", "role": "user", "content": "follow-up question 1"}
    ]
    assert segments[-1]["updated_at"] == "2026-11-20T12:00:01.500Z"
    # a line still being written: waits, and is recorded once it is complete
    user, answer = _codex_turn(2)
    with exp.path.open("a", encoding="utf-8") as out:
        out.write(user + answer[:40])
    report = ingest_sync(workspace, [exp.path])
    assert report.sources[0].pending_bytes == 40
    assert [s["input"] for s in _segments(workspace, rid)[3:]] == [
        [{"type": "message", "role": "user", "content": "follow-up question 2"}]
    ]
    with exp.path.open("a", encoding="utf-8") as out:
        out.write(answer[40:])
    report = ingest_sync(workspace, [exp.path])
    assert report.recorded_segments == 1
    last = _segments(workspace, rid)[-1]
    assert last["input"] == [] and last["final_output"] == "answer 2"
    assert ingest_sync(workspace, [exp.path]).recorded_segments == 0
    texts = [json.dumps(s) for s in _segments(workspace, rid)]
    assert sum("follow-up question 2" in t for t in texts) == 1
    assert sum('"answer 2"' in t for t in texts) == 1


def test_database_and_input_list_are_incremental(tmp_path: Path) -> None:
    root, workspace = tmp_path / "src", tmp_path / "ws"
    workspace.mkdir()
    write_all(root)
    db = root / "agents" / "conversations.db"
    first = ingest_sync(workspace, [db], sessions=["support-4411"])
    assert [s.session_id for s in first.sources] == ["support-4411"]
    add_agents_rows(
        db,
        "support-4411",
        [
            {"role": "user", "content": "And for order 4412?"},
            {"role": "assistant", "content": "Order 4412 is not refundable."},
        ],
    )
    report = ingest_sync(workspace, [db], format="openai-agents")
    recorded = {s.session_id: s.segments for s in report.sources}
    assert recorded == {"support-4411": 1, "user@example.com:thread 7": 1}
    assert ingest_sync(workspace, [db]).recorded_segments == 0
    listed = write_input_list(root / "agents" / "run.json")
    ingest_sync(workspace, [listed.path])
    items = json.loads(listed.path.read_text(encoding="utf-8"))
    items += [
        {"role": "user", "content": "thanks, one more: order 4413?"},
        {"role": "assistant", "content": "4413 ships tomorrow."},
    ]
    listed.path.write_text(json.dumps(items), encoding="utf-8")
    report = ingest_sync(workspace, [listed.path])
    assert report.recorded_segments == 1
    assert _segments(workspace, "responses-run")[-1]["final_output"] == "4413 ships tomorrow."
    # a list rewritten other than by appending is refused, recording nothing
    listed.path.write_text(json.dumps(items[2:]), encoding="utf-8")
    refused = ingest_sync(workspace, [listed.path]).sources[0]
    assert refused.status == "failed" and "changed" in (refused.error or "")
    assert len(_segments(workspace, "responses-run")) == 2


def test_bad_input_is_skipped_counted_and_never_stops_the_others(tmp_path: Path) -> None:
    root, workspace = tmp_path / "src", tmp_path / "ws"
    workspace.mkdir()
    exp = codex_session_one(root)
    with exp.path.open("a", encoding="utf-8") as out:
        out.write("{not json\n")
        out.write('{"timestamp": "2026-11-20T12:00:00Z", "type": "mystery", "payload": {}}\n')
        out.write("\x00\x01\x02 garbage \xff\n")
    (root / "garbage.jsonl").write_bytes(bytes(range(256)) * 40)
    (root / "empty.json").write_bytes(b"")
    (root / "notes.json").write_text('{"hello": "world"}', encoding="utf-8")
    report = ingest_sync(workspace, [root, tmp_path / "missing.jsonl"])
    by_name = {Path(s.path).name: s for s in report.sources}
    codex = by_name[exp.path.name]
    assert codex.status == "recorded" and codex.segments == 2
    assert codex.dropped["malformed_line"] == 2 and codex.dropped["record:mystery"] == 1
    for name in ("garbage.jsonl", "empty.json", "notes.json", "missing.jsonl"):
        assert by_name[name].status == "skipped" and by_name[name].error, name


def test_rewritten_source_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    exp = codex_session_one(tmp_path / "codex")
    ingest_sync(workspace, [exp.path])
    text = exp.path.read_text(encoding="utf-8")
    exp.path.write_text(text.replace("invoice", "receipt"), encoding="utf-8")
    source = ingest_sync(workspace, [exp.path]).sources[0]
    assert source.status == "failed" and "changed" in (source.error or "")
    assert len(_segments(workspace, f"codex-{exp.session_id}")) == 2


def test_a_large_transcript_is_bounded_and_finished_by_later_ingests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A huge line is skipped without being held; long strings keep head and tail; each
    ingest records at most its budget, the next ones go on where it stopped."""
    monkeypatch.setattr(_lines, "MAX_LINE_BYTES", 4096)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    exp = codex_session_one(tmp_path / "codex")
    with exp.path.open("a", encoding="utf-8") as out:
        out.write(
            json.dumps(
                {
                    "type": "response_item",
                    "payload": {"type": "message", "role": "user", "content": "x" * 10_000},
                }
            )
            + "\n"
        )
        for n in range(1, 10):
            out.write("".join(_codex_turn(n)))
    rid = f"codex-{exp.session_id}"
    budgets = []
    for _ in range(20):
        report = ingest_sync(workspace, [exp.path], max_bytes=600)
        budgets.append(report.sources[0].more)
        if not report.sources[0].more:
            break
    assert budgets[0] and not budgets[-1]
    texts = [json.dumps(s) for s in _segments(workspace, rid)]
    for n in range(1, 10):
        assert sum(f"follow-up question {n}" in t for t in texts) == 1
    assert not any("x" * 5000 in t for t in texts)
    assert ingest_sync(workspace, [exp.path]).recorded_segments == 0


def test_unknown_format_names_are_refused(tmp_path: Path) -> None:
    from sandmem._errors import UserError

    with pytest.raises(UserError, match="unknown transcript format"):
        ingest_sync(tmp_path, [tmp_path], format="gemini")  # type: ignore[arg-type]


def test_ingestor_budget_never_splits_a_line() -> None:
    from sandmem.memory.ingestion._ingest import _take
    from sandmem.memory.ingestion._model import Event

    events = [Event(1, {"a": "x" * 50}), Event(1, {"b": "y" * 50}), Event(2, {"c": 1})]
    kept, more = _take(events, 0, 10)
    assert [e.pos for e in kept] == [1, 1] and more


@pytest.mark.parametrize(
    ("output", "body", "code"),
    [
        (
            "Chunk ID: 1\nWall time: 0.3 seconds\nProcess exited with code 1\n"
            "Original token count: 2\nOutput:\nboom",
            "boom",
            1,
        ),
        ("Exit code: 0\nWall time: 1 s\nOutput:\n3 passed", "3 passed", 0),
        ("Note: nothing\nOutput:\nplain", "Note: nothing\nOutput:\nplain", None),
        ("just text: with a colon", "just text: with a colon", None),
    ],
)
def test_codex_output_status_lines(output: str, body: str, code: int | None) -> None:
    from sandmem.memory.ingestion._codex import _output

    assert _output(output) == (body, code)


def test_a_secret_in_a_session_id_names_no_file(tmp_path: Path) -> None:
    from ingest_fixtures import OPENAI_KEY, agents_items_one

    db = tmp_path / "keyed.db"
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, "
        "message_data TEXT, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP)"
    )
    for item in agents_items_one()[0]:
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            (f"user:{OPENAI_KEY}", json.dumps(item)),
        )
    conn.commit()
    conn.close()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    first = ingest_sync(workspace, [db]).sources[0]
    assert first.status == "recorded" and first.rollout_id is not None
    assert OPENAI_KEY not in first.rollout_id
    for path in workspace.rglob("*"):
        assert OPENAI_KEY not in path.name
        if path.is_file():
            assert OPENAI_KEY not in path.read_text(encoding="utf-8", errors="replace")
    assert ingest_sync(workspace, [db]).recorded_segments == 0  # still incremental


def test_a_turn_never_starts_inside_a_line() -> None:
    from sandmem.memory.ingestion._model import Event
    from sandmem.memory.ingestion._segments import drafts

    user = {"type": "message", "role": "user", "content": "go"}
    out = {"type": "function_call_output", "call_id": "c", "output": "ok"}
    events = [
        Event(0, user, turn=True),
        Event(1, out),
        Event(1, user, turn=True),
        Event(2, user, turn=True),
    ]
    assert [(len(d.input), len(d.generated)) for d in drafts(events)] == [(1, 2), (1, 0)]
