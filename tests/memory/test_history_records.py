"""Records read back from ``.history/`` are parsed into typed values (``memory._records``,
``history.Version``, ``proposals.Proposal``): a record naming a file outside the memory files,
an id that is a path, or a digest that is not a SHA-256 is skipped and reported in one line;
a truncated or crafted record never stops ``log``, ``diff``, ``restore``, ``inbox``,
``approve``, ``dismiss`` or the next version. Attribution is redacted on write and by
``redact-history``."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sandmem import UserError
from sandmem import memory as api
from sandmem.memory import _history_prune, history, journal, proposals
from sandmem.memory.history import Attribution, Version
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.proposals import Proposal
from sandmem.redaction import Redactor
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient

PATHS = MemoryPaths("memories", "sessions")
SECRET = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
README = b"# the project's README: never memory\n"


async def open_session(root: Path) -> SandboxSession:
    return await UnixLocalSandboxClient().create(manifest=Manifest(root=root))


async def write(root: Path, text: str, kind: str = "hand_edit", **attribution: Any) -> None:
    async with await open_session(root) as session:
        await journal.write_files(
            session, PATHS, {"MEMORY.md": text.encode()}, Attribution(kind, **attribution)
        )  # type: ignore[arg-type]


async def workspace(root: Path, versions: int) -> Path:
    """``versions`` versions of MEMORY.md, a README and a package.json beside."""
    (root / "README.md").write_bytes(README)
    (root / "package.json").write_text("{}\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('app')\n")
    for n in range(1, versions + 1):
        await write(root, f"# Memory\n\n- fact {n}\n")
    return root


@pytest.fixture
async def ws(tmp_path: Path) -> Path:
    """Three versions of MEMORY.md (the version-record tests)."""
    return await workspace(tmp_path, 3)


@pytest.fixture
async def ws1(tmp_path: Path) -> Path:
    """One version of MEMORY.md (the proposal tests)."""
    return await workspace(tmp_path, 1)


def history_dir(root: Path) -> Path:
    return root / "memories" / ".history"


def memory_md(root: Path) -> str:
    return (root / "memories" / "MEMORY.md").read_text()


def blob(root: Path, data: bytes) -> str:
    """Store ``data`` as a history object; its digest."""
    digest = hashlib.sha256(data).hexdigest()
    (history_dir(root) / "objects" / digest).write_bytes(data)
    return digest


def plant_proposal(root: Path, name: str, record: dict[str, Any]) -> None:
    directory = history_dir(root) / "proposals"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(json.dumps(record))


def proposal_record(root: Path, **changes: Any) -> dict[str, Any]:
    """A well-formed proposal against the live MEMORY.md, with ``changes`` applied."""
    live = (root / "memories" / "MEMORY.md").read_bytes()
    record: dict[str, Any] = {
        "id": "pgood0001",
        "time": "2026-01-01T00:00:00.000Z",
        "attribution": {"kind": "live_edit", "run": "r1"},
        "files": {"MEMORY.md": blob(root, b"# Memory\n\n- proposed fact\n")},
        "before": {"MEMORY.md": hashlib.sha256(live).hexdigest()},
    }
    record.update(changes)
    return record


def newest_record(root: Path) -> Path:
    return sorted((history_dir(root) / "versions").iterdir())[-1]


# ---------------------------------------------------------------- proposals


@pytest.mark.parametrize(
    "name",
    [
        "skills/../../../src/app.py",
        "../../src/app.py",
        "/src/app.py",
        "skills/./x.md",
        "config/settings.yaml",  # inside the workspace, but not a memory file
        "rollout_summaries/x.md",  # a layout file a proposal never changes
        "skills/\x1b]52;c;ZWNobyBwd24=\x07.md",
        "skills/" + "a" * 300,
    ],
)
async def test_a_proposal_naming_a_file_outside_the_memory_files_is_never_applied(
    ws1: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = (ws1 / "src" / "app.py").read_text()
    evil = blob(ws1, b"import os; os.system('pwn')\n")
    plant_proposal(
        ws1, "pevil.json", proposal_record(ws1, id="pevil", files={name: evil}, before={name: None})
    )
    plant_proposal(ws1, "pgood0001.json", proposal_record(ws1))
    with caplog.at_level(logging.WARNING, logger="sandmem"):
        found = await api.inbox(ws1)
    assert [p.id for p in found] == ["pgood0001"]  # the good one is still listed
    [line] = [r.getMessage() for r in caplog.records if "pevil.json" in r.getMessage()]
    assert "\n" not in line and "skipped" in line
    with pytest.raises(UserError, match="no pending proposal"):
        await api.approve(ws1, "pevil")
    assert (ws1 / "src" / "app.py").read_text() == app
    assert not (ws1 / "src" / "pwn.py").exists()
    await api.approve(ws1, "pgood0001")
    assert "proposed fact" in memory_md(ws1)


@pytest.mark.parametrize(
    "evil_id", ["../../../package", "../../README", "/tmp/x", "p/../../package", "p\x00", ""]
)
async def test_a_proposal_id_that_is_a_path_deletes_nothing(ws1: Path, evil_id: str) -> None:
    plant_proposal(ws1, "pplanted.json", proposal_record(ws1, id=evil_id))
    for asked in (evil_id, "pplanted"):
        with pytest.raises(UserError, match="no pending proposal"):
            await api.dismiss(ws1, asked)
    assert (ws1 / "package.json").read_text() == "{}\n"
    assert (ws1 / "README.md").read_bytes() == README
    assert await api.inbox(ws1) == []


async def test_a_proposal_whose_id_is_not_its_file_name_is_skipped(ws1: Path) -> None:
    plant_proposal(ws1, "pone.json", proposal_record(ws1, id="ptwo"))
    assert await api.inbox(ws1) == []
    with pytest.raises(UserError):
        await api.dismiss(ws1, "ptwo")
    assert (history_dir(ws1) / "proposals" / "pone.json").exists()


@pytest.mark.parametrize("field", ["files", "before", "selection"])
@pytest.mark.parametrize("digest", ["../../../README.md", "A" * 64, "/etc/passwd"])
async def test_a_proposal_digest_that_is_a_path_copies_nothing(
    ws1: Path, field: str, digest: str
) -> None:
    record = proposal_record(ws1, id="pdigest")
    if field == "selection":
        record["selection"] = digest
    else:
        record[field] = {"MEMORY.md": digest}
    plant_proposal(ws1, "pdigest.json", record)
    assert await api.inbox(ws1) == []
    with pytest.raises(UserError, match="no pending proposal"):
        await api.approve(ws1, "pdigest")
    assert "README" not in memory_md(ws1)


async def test_a_proposal_naming_a_missing_object_does_not_stop_the_inbox(ws1: Path) -> None:
    plant_proposal(ws1, "pgood0001.json", proposal_record(ws1))
    plant_proposal(
        ws1, "pgone.json", proposal_record(ws1, id="pgone", files={"MEMORY.md": "c" * 64})
    )
    assert [p.id for p in await api.inbox(ws1)] == ["pgood0001"]
    with pytest.raises(UserError, match="missing"):
        await api.approve(ws1, "pgone")
    await api.dismiss(ws1, "pgone")  # it can still be dropped
    assert not (history_dir(ws1) / "proposals" / "pgone.json").exists()


def test_a_proposal_must_name_its_before_bytes_for_every_file() -> None:
    good = "a" * 64
    record = {
        "id": "p1",
        "attribution": {"kind": "live_edit"},
        "files": {"MEMORY.md": good, "skills/x.md": good},
        "before": {"MEMORY.md": None},  # skills/x.md would be applied without a stale check
    }
    with pytest.raises(ValueError, match="before"):
        Proposal.from_json(record)
    record["before"] = {"MEMORY.md": None, "skills/x.md": None}
    assert Proposal.from_json(record).files["skills/x.md"] == good


@pytest.mark.parametrize(
    "data",
    [
        b'{"id": "pbad", "files": {',  # truncated
        b"[]",
        b"null",
        b'"a string"',
        b"[" * 5000 + b"]" * 5000,  # deep
        b'{"id": "pbad"}',
        b'{"id": "pbad", "files": {}, "before": {}, "attribution": {"kind": "rm -rf"}}',
        b'{"id": "pbad", "files": [], "before": {}, "attribution": {"kind": "live_edit"}}',
        b'{"id": 7, "files": {}, "before": {}, "attribution": {"kind": "live_edit"}}',
        b"\xff\xfe not utf-8",
    ],
)
async def test_one_crafted_proposal_does_not_stop_the_inbox(ws1: Path, data: bytes) -> None:
    plant_proposal(ws1, "pgood0001.json", proposal_record(ws1))
    (history_dir(ws1) / "proposals" / "pbad.json").write_bytes(data)
    assert [p.id for p in await api.inbox(ws1)] == ["pgood0001"]
    await api.dismiss(ws1, "pgood0001")
    assert await api.inbox(ws1) == []


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: "",
        lambda text: "[]",
        lambda text: text.replace('"seq": 3', '"seq": 9'),  # not its name's number
        lambda text: text.replace('"kind": "hand_edit"', '"kind": "\\u001b[2J"'),
        lambda text: text.replace('"MEMORY.md"', '"../../README.md"'),
    ],
)
async def test_a_bad_newest_version_record_stops_nothing(
    ws: Path, damage: Any, caplog: pytest.LogCaptureFixture
) -> None:
    newest = newest_record(ws)
    newest.write_text(damage(newest.read_text()))
    with caplog.at_level(logging.WARNING, logger="sandmem"):
        found = await api.log(ws)
    assert [v.version for v in found] == [2, 1]
    assert any(newest.name in r.getMessage() for r in caplog.records)
    assert "fact 2" in (await api.diff(ws)).diff
    restored = await api.restore(ws, 1)
    assert "fact 1" in memory_md(ws)
    # the versions are numbered past the bad one: the live fact 3 first (it differs from the
    # newest good version), then the restore
    assert [v.version for v in await api.log(ws)] == [5, 4, 2, 1]
    assert (restored.version, restored.parent) == (5, 4)
    assert "fact 3" in (await api.diff(ws, 2, 4)).diff


async def test_a_bad_older_version_record_is_skipped_alone(ws: Path) -> None:
    oldest = sorted((history_dir(ws) / "versions").iterdir())[0]
    oldest.write_text('{"seq": 1, "files": {"MEMORY.md": "../../../README.md"}}')
    assert [v.version for v in await api.log(ws)] == [3, 2]
    with pytest.raises(UserError, match="no version 1"):
        await api.restore(ws, 1)
    await api.restore(ws, 2)
    assert "fact 2" in memory_md(ws) and "README" not in memory_md(ws)


async def test_every_version_record_bad_is_an_empty_history_not_a_crash(ws: Path) -> None:
    for record in (history_dir(ws) / "versions").iterdir():
        record.write_text("{")
    assert await api.log(ws) == []
    await write(ws, "# Memory\n\n- after the damage\n")
    made, kept = await api.log(ws)  # the live file first (no good version held it), then it
    assert (kept.version, kept.parent, made.version, made.parent) == (4, None, 5, 4)


async def test_generate_goes_on_when_the_newest_version_record_is_truncated(
    tmp_path: Path,
) -> None:
    from test_history import EXTRACT, consolidated

    await consolidated(tmp_path, ["invoice-fix"])
    newest = newest_record(tmp_path)
    newest.write_text(newest.read_text()[:40])
    (tmp_path / "memories" / "MEMORY.md").write_text(memory_md(tmp_path) + "\n- a hand edit\n")
    await api.generate(tmp_path, config=EXTRACT)
    [head] = await api.log(tmp_path)
    assert (head.version, head.kind) == (2, "hand_edit")
    await consolidated(tmp_path, ["deploy-notes"])
    assert (await api.log(tmp_path, limit=1))[0].version == 3
    assert "deploy" in memory_md(tmp_path).lower()


def test_an_object_path_is_only_ever_a_digest(tmp_path: Path) -> None:
    store = history.Store(None, PATHS)  # type: ignore[arg-type]
    assert store.object_path("b" * 64).endswith("/objects/" + "b" * 64)
    for bad in ("../../../README.md", "b" * 63, "B" * 64, "b" * 64 + "/x", ""):
        with pytest.raises(ValueError):
            store.object_path(bad)


@pytest.mark.parametrize(
    "files",
    [{"../MEMORY.md": "a" * 64}, {"MEMORY.md": "../x"}, {"config.yaml": "a" * 64}],
)
def test_a_version_cannot_hold_a_bad_name_or_digest_even_when_made_in_code(
    files: dict[str, str],
) -> None:
    with pytest.raises(ValueError):
        Version(seq=1, attribution=Attribution("hand_edit"), files=files)


async def test_a_skill_file_whose_name_a_version_cannot_hold_is_not_versioned(ws: Path) -> None:
    skills = ws / "memories" / "skills"
    skills.mkdir(exist_ok=True)
    (skills / "ok.md").write_text("a skill\n")
    (skills / "bad\x1b[2J.md").write_text("planted by a shell\n")
    await write(ws, "# Memory\n\n- fact 4\n")
    async with await open_session(ws) as session:
        head = (await history.versions(session, PATHS))[0]
    assert sorted(head.files) == ["MEMORY.md", "skills/ok.md"]


# ---------------------------------------------------------------- attribution


@pytest.mark.parametrize("where", ["client", "note", "run", "model"])
async def test_a_secret_in_an_attribution_never_reaches_a_record(ws: Path, where: str) -> None:
    await write(ws, "# Memory\n\n- fact 4\n", kind="mcp_write", **{where: f"tool {SECRET}"})
    records = [p.read_text() for p in (history_dir(ws) / "versions").iterdir()]
    assert not any(SECRET in text for text in records)
    [head] = await api.log(ws, limit=1)
    assert getattr(head, where) == "tool [REDACTED:github-token]"


async def test_a_secret_in_a_proposal_attribution_never_reaches_its_record(ws: Path) -> None:
    async with await open_session(ws) as session:
        made = await journal.propose(
            session,
            PATHS,
            {"MEMORY.md": b"# Memory\n\n- proposed\n"},
            Attribution("live_edit", client=f"agent {SECRET}"),
        )
    assert made is not None
    stored = (history_dir(ws) / "proposals" / f"{made.id}.json").read_text()
    assert SECRET not in stored


async def test_redact_history_redacts_attribution(ws: Path) -> None:
    newest = newest_record(ws)
    record = json.loads(newest.read_text())
    record["attribution"]["client"] = f"cursor {SECRET}"  # written raw by an older sandmem
    record["attribution"]["rollouts_added"] = [f"conv-{SECRET}"]
    newest.write_text(json.dumps(record))
    plant_proposal(
        ws,
        "pleak.json",
        proposal_record(ws, id="pleak", attribution={"kind": "mcp_write", "client": f"x {SECRET}"}),
    )
    result = await api.redact_history(ws, secrets=True)
    assert 3 in result.versions
    stored = [p.read_text() for p in history_dir(ws).rglob("*.json")]
    assert stored and not any(SECRET in text for text in stored)
    [head] = await api.log(ws, limit=1)
    assert head.client == "cursor [REDACTED:github-token]" and head.redacted


@pytest.mark.parametrize(
    ("sub", "name"),
    [
        ("versions", "00000009-1.json"),  # as releases before the record's tag named it
        ("versions", "00000009-1-0a1b2c3d4e5f.json"),
        ("proposals", "pbroken.json"),
    ],
)
async def test_redact_history_leaves_no_secret_in_a_record_that_does_not_parse(
    ws: Path, sub: str, name: str
) -> None:
    directory = history_dir(ws) / sub
    directory.mkdir(exist_ok=True)
    (directory / name).write_text('{"seq": 9, "attribution": {"client": "' + SECRET)  # cut
    await api.redact_history(ws, secrets=True)
    assert not any(SECRET in p.read_text() for p in history_dir(ws).rglob("*.json"))
    assert [v.version for v in await api.log(ws)] == [3, 2, 1]


async def test_redact_history_with_a_pattern_redacts_a_client_name(ws: Path) -> None:
    await write(ws, "# Memory\n\n- fact 4\n", kind="mcp_write", client="acme-bot KOALA-7731")
    result = await api.redact_history(ws, r"KOALA-\d+")
    assert result.versions == [4]
    assert not any("KOALA" in p.read_text() for p in (history_dir(ws) / "versions").iterdir())


def test_attribution_redacted_changes_only_what_holds_a_match() -> None:
    redact = Redactor().redact
    plain = Attribution("consolidation", engine="model", model="gpt", client="cli")
    assert plain.redacted(redact) is plain
    leaky = Attribution("mcp_write", client=f"c {SECRET}", rollouts_removed=(SECRET,))
    clean = leaky.redacted(redact)
    assert SECRET not in json.dumps(clean.to_json())
    assert clean.kind == "mcp_write"


async def test_collect_garbage_survives_bad_records(ws: Path) -> None:
    newest_record(ws).write_text("{")
    plant_proposal(ws, "pbad.json", {"id": "../../x"})
    async with await open_session(ws) as session:
        await _history_prune.collect_garbage(session, PATHS)
        assert len(await history.versions(session, PATHS)) == 2
        assert await proposals.load_all(session, PATHS) == []
