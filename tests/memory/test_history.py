"""Memory history (``memory.history`` through ``memory.journal``): every kind of change makes
exactly one attributed version; log, diff and restore round-trip; retention prunes as
documented; redact-history leaves no stored byte of a secret; a SIGKILL while a version is
made leaves the previous one intact."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from memory_doubles import scripted_agent

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, UserError
from sandmem import memory as api
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import (
    EXTRACTIVE,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    _history_prune,
    history,
    journal,
)
from sandmem.memory.history import Attribution, Retention
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import tool_call

EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
LAYOUT = MemoryLayoutConfig()
PATHS = MemoryPaths.of(LAYOUT)

TASKS = {
    "invoice-fix": "Fix the invoice total bug in app.py; the tests run with `pytest -q`",
    "deploy-notes": "Write deployment notes for the staging cluster in docs/deploy.md",
}

PATCH = """*** Begin Patch
*** Update File: memories/MEMORY.md
@@
+- Correction: the staging cluster is called blue-7 (verified in docs/deploy.md).
*** End Patch"""


async def open_session(root: Path) -> SandboxSession:
    return await UnixLocalSandboxClient().create(manifest=Manifest(root=root))


async def record(
    session: SandboxSession,
    rid: str,
    *,
    config: MemoryGenerateConfig | None = EXTRACT,
    read: MemoryReadConfig | None = None,
    patch: str | None = None,
) -> None:
    """One run of conversation ``rid``; with ``patch`` it edits memory with ``apply_patch``."""
    steps = []
    if patch is not None:
        steps.append(lambda r: [tool_call("apply_patch", {"patch": patch})])
    steps.append(lambda r: [tool_call("exec_command", {"cmd": "true"})])
    steps.append(lambda r: f"Done: {TASKS[rid].lower()}.")
    memory = Memory(layout=LAYOUT, generate=config, read=read or MemoryReadConfig())
    agent = SandboxAgent(
        name="dev",
        model=scripted_agent(*steps),
        capabilities=[memory, Filesystem(), Shell()],
    )
    run_config = RunConfig(sandbox=SandboxRunConfig(session=session))
    await Runner.run(agent, TASKS[rid], run_config=run_config, conversation_id=rid)


async def consolidated(root: Path, rids: list[str], config: MemoryGenerateConfig = EXTRACT) -> None:
    """Record ``rids``; the session's stop consolidates them."""
    async with await open_session(root) as session:
        for rid in rids:
            await record(session, rid, config=config)


async def kinds(root: Path) -> list[str]:
    return [v.kind for v in await api.log(root)]


def memory_md(root: Path) -> str:
    return (root / "memories" / "MEMORY.md").read_text()


# ---------------------------------------------------------------- one version per change


async def test_consolidation_makes_one_attributed_version(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    [first] = await api.log(tmp_path)
    assert (first.version, first.kind, first.engine, first.model) == (
        1,
        "consolidation",
        "extractive",
        "extractive",
    )
    assert first.rollouts_added == ["invoice-fix"] and first.parent is None
    assert "MEMORY.md" in first.changed
    await consolidated(tmp_path, ["deploy-notes"])
    found = await api.log(tmp_path)
    assert [v.version for v in found] == [2, 1]
    assert found[0].rollouts_added == ["deploy-notes"] and found[0].parent == 1
    async with await open_session(tmp_path) as session:
        newest = (await history.versions(session, PATHS))[0]
        files = await history.version_files(session, PATHS, newest)
    assert files["MEMORY.md"].decode() == memory_md(tmp_path)


async def test_live_edit_by_a_run_is_one_version_naming_the_run(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    async with await open_session(tmp_path) as session:
        await record(session, "deploy-notes", config=None, patch=PATCH)
        assert await kinds(tmp_path) == ["live_edit", "consolidation"]
        await record(session, "deploy-notes", config=None)  # no edit: no version
    found = await api.log(tmp_path)
    assert found[0].kind == "live_edit" and found[0].changed == ["MEMORY.md"]
    assert found[0].run == "deploy-notes"
    assert len(found) == 2


async def test_hand_edit_is_versioned_at_the_next_flush(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    path = tmp_path / "memories" / "MEMORY.md"
    path.write_text(path.read_text() + "\n- Hand note: deploys happen on Tuesdays.\n")
    report = await api.generate(tmp_path, config=EXTRACT)
    assert report.phase_two == "skipped"
    assert await kinds(tmp_path) == ["hand_edit", "consolidation"]
    await api.generate(tmp_path, config=EXTRACT)
    assert await kinds(tmp_path) == ["hand_edit", "consolidation"]


async def test_forget_is_one_version_naming_the_conversation(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix", "deploy-notes"])
    before = len(await kinds(tmp_path))
    await api.forget(tmp_path, "deploy-notes", config=EXTRACT)
    found = await api.log(tmp_path)
    assert len(found) == before + 1
    assert found[0].kind == "forget" and found[0].rollouts_removed == ["deploy-notes"]
    await api.forget(tmp_path, "invoice-fix", config=EXTRACT)  # the last one: memory emptied
    found = await api.log(tmp_path)
    assert len(found) == before + 2 and found[0].kind == "forget"
    assert found[0].rollouts_removed == ["invoice-fix"] and memory_md(tmp_path) == ""


@pytest.mark.parametrize("kind", ["ingest", "mcp_write"])
async def test_a_new_writer_gets_one_version_through_the_journal(tmp_path: Path, kind: str) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    async with await open_session(tmp_path) as session:
        async with session.lock(PATHS.lock):
            made = await journal.write_files(
                session,
                PATHS,
                {"MEMORY.md": b"# Memory\n- imported fact\n", "skills/x/SKILL.md": b"do x\n"},
                Attribution(kind, client="tester"),  # type: ignore[arg-type]
            )
    assert made is not None and made.seq == 2
    [newest, _] = await api.log(tmp_path)
    assert (newest.kind, newest.client) == (kind, "tester")
    assert newest.changed == ["MEMORY.md", "skills/x/SKILL.md"]
    assert memory_md(tmp_path) == "# Memory\n- imported fact\n"


async def test_write_files_refuses_files_that_are_not_memory(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    async with await open_session(tmp_path) as session:
        with pytest.raises(ValueError, match="not a memory file"):
            await journal.write_files(
                session, PATHS, {"raw_memories.md": b"x"}, Attribution("ingest")
            )
    assert await kinds(tmp_path) == ["consolidation"]


# ---------------------------------------------------------------- log, diff, restore


async def test_log_diff_restore_round_trip(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    original = memory_md(tmp_path)
    selection_v1 = (tmp_path / "memories" / "phase_two_selection.json").read_bytes()
    await consolidated(tmp_path, ["deploy-notes"])
    last = await api.diff(tmp_path)
    assert (last.old, last.new) == (1, 2) and "MEMORY.md" in last.files
    assert last.diff.startswith("--- a/") and "\n+" in last.diff
    restored = await api.restore(tmp_path, 1, client="cli")
    assert (restored.version, restored.kind, restored.restored_from) == (3, "restore", 1)
    assert restored.client == "cli" and restored.parent == 2 and "MEMORY.md" in restored.changed
    assert (restored.rollouts_added, restored.rollouts_removed) == ([], ["deploy-notes"])
    assert memory_md(tmp_path) == original
    assert (await api.diff(tmp_path, 1, 3)).diff == ""
    assert (await api.diff(tmp_path, "v1", "head")).files == []
    selection = (tmp_path / "memories" / "phase_two_selection.json").read_bytes()
    assert selection == selection_v1  # the conversations state follows
    # the next consolidation folds in what came after the restored version again
    report = await api.generate(tmp_path, config=EXTRACT)
    assert report.phase_two == "done"
    assert (await api.log(tmp_path))[0].rollouts_added == ["deploy-notes"]
    with pytest.raises(UserError, match="no version 99"):
        await api.restore(tmp_path, 99)
    with pytest.raises(UserError, match="not a version"):
        await api.diff(tmp_path, "yesterday")


# ---------------------------------------------------------------- retention


async def _versions_via_writes(root: Path, count: int, retention: Retention) -> SandboxSession:
    session = await open_session(root)
    await session.start()
    for n in range(count):
        async with session.lock(PATHS.lock):
            await journal.write_files(
                session,
                PATHS,
                {"MEMORY.md": f"# Memory\n- fact {n}\n".encode()},
                Attribution("ingest"),
                retention=retention,
            )
    return session


def stored_objects(root: Path) -> set[str]:
    return {p.name for p in (root / "memories" / ".history" / "objects").iterdir()}


async def test_retention_by_count_prunes_in_batches_and_collects_objects(tmp_path: Path) -> None:
    (tmp_path / "memories").mkdir()
    retention = Retention(keep_versions=20, keep_days=365)
    session = await _versions_via_writes(tmp_path, 21, retention)  # 20 + 5% slack of 1
    assert len(await history.versions(session, PATHS)) == 21
    async with session.lock(PATHS.lock):
        await journal.write_files(
            session, PATHS, {"MEMORY.md": b"last\n"}, Attribution("ingest"), retention=retention
        )
    found = await history.versions(session, PATHS)
    assert [v.seq for v in found] == list(range(22, 2, -1))  # the newest 20
    referenced = {d for v in found for d in [*v.files.values(), v.selection] if d}
    assert stored_objects(tmp_path) == referenced
    await session.stop()


@pytest.mark.parametrize("other_change", [False, True])
async def test_a_version_lists_the_versions_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_change: bool
) -> None:
    """Making a version (with a writer's own files kept apart from another writer's change)
    lists the versions directory once, however many versions it makes, and the numbers,
    parents and attributions stay what two separate listings gave."""
    (tmp_path / "memories").mkdir()
    retention = Retention(keep_versions=1000, keep_days=365)
    session = await _versions_via_writes(tmp_path, 12, retention)
    (tmp_path / "memories" / "MEMORY.md").write_text("# Memory\n- the run's own edit\n")
    if other_change:
        (tmp_path / "memories" / "memory_summary.md").write_text("- an editor's line\n")
    listed: list[str] = []
    real = history._files.kinds_dir

    async def counted(session_: SandboxSession, path: str) -> object:
        listed.append(path)
        return await real(session_, path)

    monkeypatch.setattr(history._files, "kinds_dir", counted)
    async with session.lock(PATHS.lock):
        made = await journal.notice(
            session, PATHS, Attribution("live_edit", run="r1"), own=frozenset({"MEMORY.md"})
        )
    assert [p for p in listed if p.endswith("/versions")] == ["memories/.history/versions"]
    monkeypatch.undo()
    found = await history.versions(session, PATHS)
    assert made is not None and (made.seq, made.files) == (found[0].seq, found[0].files)
    kinds = [(v.seq, v.parent, v.attribution.kind) for v in found[: 2 if other_change else 1]]
    if other_change:
        assert kinds == [(14, 13, "live_edit"), (13, 12, "hand_edit")]
        assert found[1].files["MEMORY.md"] == found[2].files["MEMORY.md"]
    else:
        assert kinds == [(13, 12, "live_edit")]
    await session.stop()


async def test_retention_by_age_keeps_the_newest(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "memories").mkdir()
    session = await _versions_via_writes(tmp_path, 4, Retention())
    now = time.time()
    soon, later = now + 365.5 * 86400, now + 366.5 * 86400
    monkeypatch.setattr(_history_prune.time, "time", lambda: soon)
    # past the age, but not a day past: a version's own prune waits for the batch
    assert await _history_prune.prune(session, PATHS, Retention(), eager=False) == 0
    monkeypatch.setattr(_history_prune.time, "time", lambda: later)
    assert await _history_prune.prune(session, PATHS, Retention(keep_days=400)) == 0
    assert await _history_prune.prune(session, PATHS, Retention(keep_days=365)) == 3
    [only] = await history.versions(session, PATHS)
    assert only.seq == 4
    await session.stop()


# ---------------------------------------------------------------- redaction


SECRET = "ZEBRA-PASS-88412"


def every_stored_byte(root: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in (root / "memories").rglob("*") if p.is_file()]


async def test_redact_history_removes_a_planted_secret_from_every_stored_byte(
    tmp_path: Path,
) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    path = tmp_path / "memories" / "MEMORY.md"
    clean = path.read_text()
    path.write_text(clean + f"\n- the staging password is {SECRET}\n")  # no default rule knows it
    await api.generate(tmp_path, config=EXTRACT)  # noticed: the secret is in version 2
    path.write_text(clean + "\n- use the vault for passwords\n")
    await api.generate(tmp_path, config=EXTRACT)  # version 3 no longer has it
    async with await open_session(tmp_path) as session:  # a proposal holding it too
        edited = f"{clean}\n- ask for {SECRET} at the desk\n".encode()
        await journal.propose(session, PATHS, {"MEMORY.md": edited}, Attribution("live_edit"))
    (tmp_path / "memories" / "rollout_summaries" / "note.md").write_text(f"pw {SECRET}\n")
    assert (await api.search(tmp_path, "88412")).hits  # indexed
    before = await api.log(tmp_path)
    planted = re.compile(rb"(?i)zebra|88412")  # an index keeps terms, lower-cased
    assert any(planted.search(data) for _, data in every_stored_byte(tmp_path))
    result = await api.redact_history(tmp_path, r"ZEBRA-PASS-\d+")
    assert result.versions == [2]
    leftovers = [str(p) for p, data in every_stored_byte(tmp_path) if planted.search(data)]
    assert leftovers == []
    [proposal] = await api.inbox(tmp_path)
    assert "ask for [REDACTED:history] at the desk" in proposal.diff
    after = await api.log(tmp_path)
    assert [(v.version, v.kind, v.time) for v in after] == [
        (v.version, v.kind, v.time) for v in before
    ]
    assert [v.redacted for v in after] == [False, True, False]
    text = (await api.diff(tmp_path, 1, 2)).diff
    assert "[REDACTED:history]" in text and SECRET not in text
    with pytest.raises(UserError, match="PATTERN or --secret"):
        await api.redact_history(tmp_path)


async def test_redact_history_secret_finds_what_the_detectors_know(tmp_path: Path) -> None:
    """A version stored without redaction (one another host uploaded, or one made before a
    detector existed) is cleaned by ``--secret`` with no pattern."""
    await consolidated(tmp_path, ["invoice-fix"])
    key = "sk-" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4"
    async with await open_session(tmp_path) as session:
        async with session.lock(PATHS.lock):
            files = {"MEMORY.md": f"# Memory\n- deploy key {key}\n".encode()}
            await history.make_version(session, PATHS, files, None, Attribution("hand_edit"))
    assert any(key.encode() in data for _, data in every_stored_byte(tmp_path))
    result = await api.redact_history(tmp_path, secrets=True)
    assert result.versions == [2]
    assert all(key.encode() not in data for _, data in every_stored_byte(tmp_path))
    assert "[REDACTED:" in (await api.diff(tmp_path, 1, 2)).diff


async def test_nothing_unredacted_enters_the_history(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    path = tmp_path / "memories" / "MEMORY.md"
    key = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6"
    path.write_text(path.read_text() + f"\n- key {key}\n")
    await api.generate(tmp_path, config=EXTRACT)
    assert all(key.encode() not in data for _, data in every_stored_byte(tmp_path))


# ---------------------------------------------------------------- crash safety

CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from sandmem.memory import history, journal
    from sandmem.memory.history import Attribution
    from sandmem.memory.layout import MemoryPaths
    from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

    root, marker = Path(sys.argv[1]), Path(sys.argv[2])
    real = history.Store.write_version

    async def stuck(self, version):
        marker.write_text("blobs written")
        time.sleep(60)  # killed here: blobs are stored, the record is not
        await real(self, version)

    history.Store.write_version = stuck

    async def main():
        session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
        async with session:
            paths = MemoryPaths("memories", "sessions")
            async with session.lock(paths.lock):
                await journal.write_files(
                    session, paths, {"MEMORY.md": b"# new memory\\n"}, Attribution("ingest")
                )

    asyncio.run(main())
    """
)


async def test_sigkill_while_making_a_version_leaves_the_previous_intact(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    previous = memory_md(tmp_path)
    marker = tmp_path / "marker"
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(tmp_path), str(marker)
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.returncode is None, "the child exited early"
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        await asyncio.wait_for(child.wait(), 30)
    assert child.returncode == -signal.SIGKILL
    [head] = await api.log(tmp_path)
    assert head.version == 1
    async with await open_session(tmp_path) as session:
        [v1] = await history.versions(session, PATHS)
        files = await history.version_files(session, PATHS, v1)
    assert files["MEMORY.md"].decode() == previous
    # the interrupted commit is rolled forward at the next flush, and versioned then
    await api.generate(tmp_path, config=EXTRACT)
    newest = (await api.log(tmp_path))[0]
    assert (newest.version, newest.kind) == (2, "ingest")
    assert memory_md(tmp_path) == "# new memory\n"


# ---------------------------------------------------------------- the viewer


async def test_the_viewer_shows_the_history_with_attribution_and_diffs(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    async with await open_session(tmp_path) as session:
        await record(session, "deploy-notes", config=None, patch=PATCH)
    page = await api.view_html(tmp_path)
    section = page.split('<section id="history">', 1)[1].split("</section>", 1)[0]
    assert '<a href="#history">' in page
    assert section.index('id="v2"') < section.index('id="v1"')  # newest first
    assert "live_edit" in section and "run deploy-notes" in section
    assert "consolidation" in section and "extractive" in section and "+invoice-fix" in section
    assert '<span class="add">+- Correction: the staging cluster is called blue-7' in section


async def test_an_ingest_that_generates_makes_one_version_of_kind_ingest(tmp_path: Path) -> None:
    from ingest_fixtures import write_input_list

    await consolidated(tmp_path, ["invoice-fix"])
    write_input_list(tmp_path / "incoming" / "run.json")
    report = await api.ingest(tmp_path, [tmp_path / "incoming"], generate_now=True, config=EXTRACT)
    assert report.generation is not None and report.generation.phase_two == "done"
    found = await api.log(tmp_path)
    assert [v.kind for v in found] == ["ingest", "consolidation"]
    assert found[0].engine == "extractive" and found[0].rollouts_added


async def test_a_model_consolidation_names_its_engine_and_model(tmp_path: Path) -> None:
    from memory_doubles import phase_one_model, phase_two_model

    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    await consolidated(tmp_path, ["invoice-fix"], config=config)
    [version] = await api.log(tmp_path)
    assert (version.kind, version.engine, version.model) == ("consolidation", "model", "phase-two")
    assert version.rollouts_added == ["invoice-fix"]


_GOOD = "a" * 64


@pytest.mark.parametrize(
    ("files", "selection"),
    [
        ({"MEMORY.md": "../../../etc/passwd"}, None),  # a digest that is a path
        ({"MEMORY.md": "A" * 64}, None),  # not lower-case hex
        ({"MEMORY.md": _GOOD}, "../x"),  # the selection's digest
        ({"../MEMORY.md": _GOOD}, None),  # a name leaving the layout
        ({"/etc/cron.d/x": _GOOD}, None),
        ({"skills/./a": _GOOD}, None),
        ({"a\0b": _GOOD}, None),
    ],
)
def test_a_version_record_from_outside_names_nothing_outside(
    files: dict[str, str], selection: str | None
) -> None:
    from sandmem.memory.history import Version

    record = {"seq": 1, "attribution": {"kind": "consolidation"}, "files": files}
    if selection is not None:
        record["selection"] = selection
    with pytest.raises(ValueError):
        Version.from_json(record)
    record.update(files={"MEMORY.md": _GOOD, "skills/x/SKILL.md": _GOOD}, selection=_GOOD)
    assert Version.from_json(record).files["MEMORY.md"] == _GOOD
