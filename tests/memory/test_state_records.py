"""State files read back are parsed into typed values before anything acts on them: a
crafted commit record never makes recovery touch a file outside the memory files, a log line
of the wrong types never stops ``status``, a state entry under a name that is not a rollout
id is dropped, and a bad ``.settled.json`` only costs a full check."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from sandmem import memory as api
from sandmem.memory import journal
from sandmem.memory import state as gen_state
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")


async def open_session(root: Path) -> SandboxSession:
    return await UnixLocalSandboxClient().create(manifest=Manifest(root=root))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "memories" / "skills").mkdir(parents=True)
    (tmp_path / "sessions").mkdir()
    (tmp_path / "memories" / "MEMORY.md").write_text("# Memory\n\n- a fact\n")
    (tmp_path / "package.json").write_text('{"name": "app"}\n')
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("print('app')\n")
    return tmp_path


# ---------------------------------------------------------------- the commit record


@pytest.mark.parametrize(
    "path",
    [
        "package.json",
        "memories/../package.json",
        "memories/skills/../../package.json",
        "/etc/hostname",
        "memories/raw_memories/x.md",
        "memories/.history/versions/x.json",
    ],
)
async def test_a_crafted_commit_record_never_deletes_outside_the_memory_files(
    ws: Path, path: str
) -> None:
    target = ws / path.replace("memories/skills/../../", "").replace("memories/../", "")
    before = sha(target.read_bytes()) if target.is_file() else None
    record = {"version": 1, "files": [{"path": path, "before": before, "after": None}]}
    (ws / "memories" / ".phase_two_commit.json").write_text(json.dumps(record))
    async with await open_session(ws) as session:
        notes = await journal.recover(session, PATHS)
    assert any(n.reason == "unreadable commit record removed" for n in notes)
    assert (ws / "package.json").read_text() == '{"name": "app"}\n'
    assert not (ws / "memories" / ".phase_two_commit.json").exists()


async def test_a_commit_record_writing_outside_is_refused(ws: Path) -> None:
    payload = b"import os\n"
    stage = ws / "memories" / ".phase_two_stage" / "src"
    stage.mkdir(parents=True)
    (stage / "app.py").write_bytes(payload)
    app = ws / "src" / "app.py"
    record = {
        "version": 1,
        "files": [{"path": "src/app.py", "before": sha(app.read_bytes()), "after": sha(payload)}],
    }
    (ws / "memories" / ".phase_two_commit.json").write_text(json.dumps(record))
    async with await open_session(ws) as session:
        await journal.recover(session, PATHS)
    assert app.read_text() == "print('app')\n"


@pytest.mark.parametrize("digest", ["../../README.md", "A" * 64, 7])
async def test_a_commit_record_with_a_bad_digest_is_removed(ws: Path, digest: Any) -> None:
    record = {"version": 1, "files": [{"path": "memories/MEMORY.md", "before": digest}]}
    (ws / "memories" / ".phase_two_commit.json").write_text(json.dumps(record))
    async with await open_session(ws) as session:
        notes = await journal.recover(session, PATHS)
    assert any("unreadable" in n.reason for n in notes)
    assert "a fact" in (ws / "memories" / "MEMORY.md").read_text()


async def test_a_good_commit_record_is_still_rolled_forward(ws: Path) -> None:
    new = b"# Memory\n\n- rolled forward\n"
    live = ws / "memories" / "MEMORY.md"
    (ws / "memories" / ".phase_two_stage").mkdir()
    (ws / "memories" / ".phase_two_stage" / "MEMORY.md").write_bytes(new)
    record = {
        "version": 1,
        "files": [
            {"path": "memories/MEMORY.md", "before": sha(live.read_bytes()), "after": sha(new)}
        ],
    }
    (ws / "memories" / ".phase_two_commit.json").write_text(json.dumps(record))
    async with await open_session(ws) as session:
        notes = await journal.recover(session, PATHS)
    assert any(n.reason == "finished an interrupted memory commit" for n in notes)
    assert live.read_bytes() == new


# ---------------------------------------------------------------- the log


@pytest.mark.parametrize(
    "record",
    [
        {"phase": "two", "time": 5, "status": "done"},
        {"phase": "two", "status": ["done"]},
        {"phase": "two", "rollouts": 7},
        {"phase": "two", "missing": 5},
        {"phase": "two", "error": {"a": 1}},
        {"phase": "two", "failure_kind": 3},
        {"phase": "two", "duration_s": "slow"},
        {"phase": "one", "rollouts": "abc", "input_tokens": "9"},
        {"phase": ["two"]},
    ],
)
async def test_a_log_line_of_the_wrong_types_never_stops_status(
    ws: Path, record: dict[str, Any]
) -> None:
    good = {"phase": "two", "time": "2026-01-01T00:00:00Z", "status": "done", "rollouts": ["a"]}
    lines = [json.dumps(good), json.dumps(record)]
    (ws / "memories" / "generation_log.jsonl").write_text("\n".join(lines) + "\n")
    status = await api.status(ws)
    assert status is not None
    assert gen_state.parse_log(("\n".join(lines) + "\n").encode()) == [good]


# ---------------------------------------------------------------- generation_state.json


@pytest.mark.parametrize("rid", ["../../etc", "a/b", "", "x" * 300, "\x1b[2J"])
def test_a_state_entry_that_is_not_a_rollout_id_is_dropped(rid: str) -> None:
    text = json.dumps({"rollouts": {rid: {"status": "done"}, "good-1": {"status": "done"}}})
    state, problems = gen_state.parse_state(text, "memories/generation_state.json")
    assert list(state.rollouts) == ["good-1"]
    assert len(problems) == 1 and "\n" not in str(problems[0])


# ---------------------------------------------------------------- .settled.json


@pytest.mark.parametrize("text", ["{", "[]", '"x"', "[" * 5000, ""])
async def test_a_bad_settled_record_is_no_record(ws: Path, text: str) -> None:
    (ws / "memories" / ".settled.json").write_text(text)
    async with await open_session(ws) as session:
        assert await gen_state.load_settled(session, PATHS) is None


# ---------------------------------------------------------------- phase_two_selection.json


@pytest.mark.parametrize("rid", ["../../etc/passwd", "a/b", "", 7, None, "\x1b]52;c;eA==\x07"])
def test_a_selected_entry_that_is_not_a_rollout_id_is_dropped(rid: Any) -> None:
    from sandmem.memory.selection import parse_selection_file

    good = {"rollout_id": "good-1", "updated_at": "2026-01-01T00:00:00Z"}
    data = json.dumps({"version": 1, "selected": [good, {"rollout_id": rid}]}).encode()
    saved = parse_selection_file(data, "memories/phase_two_selection.json")
    assert [r.rollout_id for r in saved.refs] == ["good-1"]
    assert "entry 1" in saved.problems["memories/phase_two_selection.json"]
