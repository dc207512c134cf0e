"""The public memory API (``sandmem.memory.status``, ``list_conversations``, ``list_files``,
``show``, ``search``, ``view_html``, ``generate``, ``forget`` and their ``*_sync`` twins), on a
live sandbox session and on a workspace path, for the default and a custom layout, errors
included."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from memory_doubles import scripted_agent

from sandmem import (
    MemoryLockedError,
    MemoryNotFoundError,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxError,
    SandboxRunConfig,
    SandmemError,
    UserError,
)
from sandmem import memory as api
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import (
    EXTRACTIVE,
    GenerationProgress,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryTarget,
)
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call

EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
CUSTOM = MemoryLayoutConfig(memories_dir="agent/mem", sessions_dir="agent/rollouts")
LAYOUTS = {"default": MemoryLayoutConfig(), "custom": CUSTOM}

TASKS = {
    "invoice-fix": "Fix the invoice total bug in app.py",
    "deploy-notes": "Write deployment notes for the staging cluster",
}


def failing() -> FunctionModel:
    def fn(request: ModelRequest) -> str:
        raise RuntimeError("phase one is down")

    return FunctionModel(fn)


async def record(
    session: SandboxSession,
    layout: MemoryLayoutConfig,
    config: MemoryGenerateConfig,
    rid: str,
) -> None:
    agent = SandboxAgent(
        name="dev",
        model=scripted_agent(
            lambda r: [tool_call("exec_command", {"cmd": "true"})],
            lambda r: f"Done: {TASKS[rid].lower()}.",
        ),
        capabilities=[Memory(layout=layout, generate=config), Filesystem(), Shell()],
    )
    run_config = RunConfig(sandbox=SandboxRunConfig(session=session))
    await Runner.run(agent, TASKS[rid], run_config=run_config, conversation_id=rid)


async def build(
    root: Path, layout: MemoryLayoutConfig, rids: list[str], config: MemoryGenerateConfig = EXTRACT
) -> Path:
    """Record the conversations; memory is generated when the session stops."""
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    async with session:
        for rid in rids:
            await record(session, layout, config, rid)
    return root


@contextlib.asynccontextmanager
async def target(kind: str, root: Path) -> AsyncIterator[MemoryTarget]:
    """The workspace as a path (``str`` and ``Path`` both work), or a live session on it."""
    if kind == "path":
        yield root
    elif kind == "str":
        yield str(root)
    else:
        async with await UnixLocalSandboxClient().create(manifest=Manifest(root=root)) as s:
            yield s


KINDS = ["path", "str", "session"]
both = pytest.mark.parametrize("kind", KINDS)
layouts = pytest.mark.parametrize("name", list(LAYOUTS))


@both
@layouts
async def test_status(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    root = await build(tmp_path, layout, ["invoice-fix", "deploy-notes"])
    async with target(kind, root) as where:
        data = await api.status(where, layout=layout)
    assert data.workspace == str(root.resolve())
    assert (data.memories_dir, data.sessions_dir) == (layout.memories_dir, layout.sessions_dir)
    assert data.counts.model_dump() == {
        "total": 2,
        "done": 2,
        "pending": 0,
        "failed": 0,
        "skipped": 0,
    }
    assert data.conversations == []  # only the pending and failed ones are listed
    assert data.pending == [] and data.failed == []
    memory_md = root / layout.memories_dir / "MEMORY.md"
    assert data.files["MEMORY.md"].path == f"{layout.memories_dir}/MEMORY.md"
    assert data.files["MEMORY.md"].bytes == memory_md.stat().st_size
    assert data.dirs["sessions"].files == 2
    assert data.last_consolidation is not None and data.last_consolidation.status == "done"
    assert data.last_consolidation.selected == 2
    assert data.tokens.phase_one.runs == 2 and data.tokens.phase_two.runs == 1


@both
@layouts
async def test_status_of_failed_and_pending_conversations(
    tmp_path: Path, kind: str, name: str
) -> None:
    layout = LAYOUTS[name]
    config = MemoryGenerateConfig(
        phase_one_model=failing(), phase_two_model=EXTRACTIVE, max_attempts=1
    )
    root = await build(tmp_path, layout, ["invoice-fix"], config)
    async with target(kind, root) as where:
        data = await api.status(where, layout=layout)
    [row] = data.failed
    assert row.rollout_id == "invoice-fix" and row.status == "failed" and row.attempts == 1
    assert row.last_error == "RuntimeError: phase one is down"
    assert row.last_attempt_at is not None
    assert row.summary_file is None and row.raw_memory_file is None
    assert data.tokens.phase_one.failed_runs == 1
    assert data.last_consolidation is None


@both
@layouts
async def test_list_conversations(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    root = await build(tmp_path, layout, ["invoice-fix", "deploy-notes"])
    async with target(kind, root) as where:
        rows = await api.list_conversations(where, layout=layout)
    assert [r.rollout_id for r in rows] == ["deploy-notes", "invoice-fix"]  # newest first
    for row in rows:
        assert row.status == "done" and row.task == TASKS[row.rollout_id]
        assert row.segments == 1 and row.terminal_state == "completed"
        assert row.started_at == row.updated_at
        assert row.summary_file is not None
        assert row.summary_file.startswith(f"{layout.memories_dir}/rollout_summaries/")
        assert (root / row.summary_file).is_file()
        assert row.raw_memory_file == f"{layout.memories_dir}/raw_memories/{row.rollout_id}.md"


@both
@layouts
async def test_list_files(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    root = await build(tmp_path, layout, ["invoice-fix"])
    async with target(kind, root) as where:
        files = await api.list_files(where, layout=layout)
    paths = [f.path for f in files]
    assert paths == sorted(paths)
    assert f"{layout.sessions_dir}/invoice-fix.jsonl" in paths
    assert all(f.bytes == (root / f.path).stat().st_size for f in files)
    assert not any("/." in p for p in paths)


@both
@layouts
async def test_show(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    mem = layout.memories_dir
    root = await build(tmp_path, layout, ["invoice-fix"])
    async with target(kind, root) as where:
        summary = await api.show(where, layout=layout)
        memory = await api.show(where, "memory", layout=layout)
        rollout = await api.show(where, rollout_id="invoice-fix", layout=layout)
        raw = await api.show(where, "raw_memory", "invoice-fix", layout=layout)
        rollout_file = await api.show(where, "rollout", "invoice-fix", layout=layout)
    assert rollout_file.path == f"{layout.sessions_dir}/invoice-fix.jsonl"
    assert rollout_file.text == (root / rollout_file.path).read_text()
    assert (summary.kind, summary.path) == ("summary", f"{mem}/memory_summary.md")
    assert summary.text == (root / mem / "memory_summary.md").read_text()
    assert summary.exists and not summary.empty and summary.rollout_id is None
    assert memory.text == (root / mem / "MEMORY.md").read_text()
    assert rollout.kind == "rollout_summary" and rollout.rollout_id == "invoice-fix"
    assert rollout.path is not None and rollout.path.startswith(f"{mem}/rollout_summaries/")
    assert rollout.text.startswith("session_id: invoice-fix\n")
    assert raw.path == f"{mem}/raw_memories/invoice-fix.md"
    assert raw.text == (root / raw.path).read_text()


@both
@layouts
async def test_show_missing_and_empty_files(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    mem = tmp_path / layout.memories_dir
    mem.mkdir(parents=True)
    (mem / "MEMORY.md").write_text(" \n")
    config = MemoryGenerateConfig(phase_one_model=failing(), phase_two_model=EXTRACTIVE)
    await build(tmp_path, layout, ["invoice-fix"], config)
    (mem / "memory_summary.md").unlink()
    async with target(kind, tmp_path) as where:
        summary = await api.show(where, "summary", layout=layout)
        memory = await api.show(where, "memory", layout=layout)
        pending = await api.show(where, "rollout_summary", "invoice-fix", layout=layout)
        raw = await api.show(where, "raw_memory", "invoice-fix", layout=layout)
        with pytest.raises(MemoryNotFoundError, match="no conversation 'ghost'") as info:
            await api.show(where, rollout_id="ghost", layout=layout)
        assert info.value.rollout_id == "ghost"
        with pytest.raises(UserError, match="invalid rollout id"):
            await api.show(where, rollout_id="../x", layout=layout)
        with pytest.raises(UserError, match="needs the conversation's rollout_id"):
            await api.show(where, "raw_memory", layout=layout)
        with pytest.raises(UserError, match="takes no rollout_id"):
            await api.show(where, "memory", "invoice-fix", layout=layout)
        with pytest.raises(UserError, match="not 'nonsense'"):
            await api.show(where, "nonsense", layout=layout)  # type: ignore[arg-type]
    assert (summary.exists, summary.empty, summary.text) == (False, False, "")
    assert (memory.exists, memory.empty) == (True, True)
    assert (pending.exists, pending.path) == (False, None)
    assert (raw.exists, raw.path) == (False, f"{layout.memories_dir}/raw_memories/invoice-fix.md")


@both
@layouts
async def test_search(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    root = await build(tmp_path, layout, ["invoice-fix", "deploy-notes"])
    (root / layout.memories_dir / "MEMORY.md").write_text(
        "# Memory\n\n## Invoice totals\nKeywords: invoice, tax\n- the invoice tax is multiplied\n"
        "\n## Deployments\n- staging deploys need the VPN; see the invoice runbook\n"
    )
    async with target(kind, root) as where:
        results = await api.search(where, "invoice tax", layout=layout)
        one = await api.search(where, "invoice tax", 1, layout=layout)
        none = await api.search(where, "kubernetes", layout=layout)
        with pytest.raises(UserError, match="at least 1"):
            await api.search(where, "invoice", 0, layout=layout)
    assert results.query == "invoice tax"
    first = results.hits[0]
    assert (first.path, first.line) == (f"{layout.memories_dir}/MEMORY.md", 4)
    assert first.heading == "Memory > Invoice totals"
    for tier in ("memory", "transcript"):  # each tier in its own order
        scores = [h.score for h in results.hits if h.tier == tier]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    assert any("/rollout_summaries/invoice-fix_" in h.path for h in results.hits)
    assert one.hits == results.hits[:1]
    assert none.hits == []


def files_of(root: Path) -> dict[Path, bytes]:
    """Every file under ``root`` but the derived layout index (``.index.sqlite`` and its
    lock), which reading commands keep up to date."""
    return {
        p: p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name not in (".index.sqlite", ".index.lock")
    }


@both
@layouts
async def test_view_html(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    config = MemoryGenerateConfig(phase_one_model=failing(), phase_two_model=EXTRACTIVE)
    root = await build(tmp_path, layout, ["invoice-fix"])
    await build(tmp_path, layout, ["deploy-notes"], config)  # its extraction fails
    before = files_of(root)
    async with target(kind, root) as where:
        page = await api.view_html(where, layout=layout)
        titled = await api.view_html(where, layout=layout, title="acme <prod>")
    assert files_of(root) == before  # looking changes nothing
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert str(root) in page and layout.memories_dir in page
    assert "invoice-fix" in page and "deploy-notes" in page
    assert "phase one is down" in page  # the failed conversation's last error is shown
    assert "acme &lt;prod&gt;" in titled and "acme <prod>" not in titled
    assert re.search(r'(?:src|href)="(?:https?:)?//', page) is None  # nothing from the network


@both
@layouts
async def test_generate(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    config = MemoryGenerateConfig(phase_one_model=failing(), phase_two_model=EXTRACTIVE)
    root = await build(tmp_path, layout, ["invoice-fix", "deploy-notes"], config)
    steps: list[GenerationProgress] = []
    async with target(kind, root) as where:
        before = await api.status(where, layout=layout)
        report = await api.generate(
            where, layout=layout, engine="extractive", progress=steps.append
        )
        again = await api.generate(where, layout=layout, engine="extractive")
    assert before.counts.pending == 2
    assert report.processed == ["deploy-notes", "invoice-fix"]
    assert report.phase_two == "done" and report.complete and report.failed == {}
    assert report.usage.phase_one.requests == 0  # the extractive engine calls no model
    assert steps[-1] == GenerationProgress(2, 2, "consolidating")
    assert again.processed == [] and again.phase_two == "skipped" and again.complete
    assert "deploy-notes" in (root / layout.memories_dir / "MEMORY.md").read_text()


@both
async def test_generate_retry_failed_and_an_incomplete_report(tmp_path: Path, kind: str) -> None:
    config = MemoryGenerateConfig(
        phase_one_model=failing(), phase_two_model=EXTRACTIVE, max_attempts=1
    )
    root = await build(tmp_path, CUSTOM, ["invoice-fix"], config)
    async with target(kind, root) as where:  # a session keeps one config per layout
        still = await api.generate(where, layout=CUSTOM, config=config, retry_failed=True)
    async with target(kind, root) as where:
        plain = await api.generate(where, layout=CUSTOM, engine="extractive")
        retried = await api.generate(where, layout=CUSTOM, engine="extractive", retry_failed=True)
    assert still.failed == {"invoice-fix": "RuntimeError: phase one is down"}
    assert not still.complete
    assert plain.processed == [] and plain.complete
    assert retried.processed == ["invoice-fix"] and retried.complete


async def test_generate_without_a_second_flush_at_stop(tmp_path: Path) -> None:
    config = MemoryGenerateConfig(phase_one_model=failing(), phase_two_model=EXTRACTIVE)
    for flush_on_stop, attempts in ((True, 2), (False, 1)):
        root = tmp_path / str(flush_on_stop)
        root.mkdir()
        session = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
        async with session:
            await record(session, CUSTOM, config, "invoice-fix")
            report = await api.generate(
                session, layout=CUSTOM, config=config, flush_on_stop=flush_on_stop
            )
            assert not report.complete
        # the stop flushed again (one more failed attempt) only when asked to
        [row] = await api.list_conversations(root, layout=CUSTOM)
        assert row.attempts == attempts, flush_on_stop


def test_new_rollout_id() -> None:
    first, second = api.new_rollout_id(), api.new_rollout_id()
    assert first != second and api.validate_rollout_id(first) == first
    assert first.startswith("run-") and len(first) == 36


async def test_generate_on_the_live_session_of_the_run(tmp_path: Path) -> None:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with session:
        await record(session, CUSTOM, EXTRACT, "invoice-fix")
        pending = await api.status(session, layout=CUSTOM)
        report = await api.generate(session, layout=CUSTOM, config=EXTRACT)
        done = await api.status(session, layout=CUSTOM)
        with pytest.raises(UserError, match=r"different MemoryGenerateConfig.*pass the agents'"):
            await api.generate(session, layout=CUSTOM)  # not the config the run uses
        with pytest.raises(MemoryNotFoundError):
            await api.forget(session, "ghost", layout=CUSTOM)  # refused before any manager
        report_again = await api.generate(session, layout=CUSTOM, config=EXTRACT)
        assert report_again.complete
    assert [c.status for c in pending.conversations] == ["pending"]
    assert report.processed == ["invoice-fix"]
    assert done.conversations == [] and done.counts.done == 1


@both
@layouts
async def test_forget(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    mem = tmp_path / layout.memories_dir
    root = await build(tmp_path, layout, ["invoice-fix", "deploy-notes"])
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    async with target(kind, root) as where:
        plan = await api.forget(where, "deploy-notes", dry_run=True, layout=layout)
        assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
        result = await api.forget(where, "deploy-notes", layout=layout, engine="extractive")
        memory_md = (mem / "MEMORY.md").read_text()
        with pytest.raises(MemoryNotFoundError, match="no conversation 'deploy-notes'"):
            await api.forget(where, "deploy-notes", layout=layout, engine="extractive")
        with pytest.raises(UserError, match="invalid rollout id"):
            await api.forget(where, "a/../b", layout=layout, engine="extractive")
        last = await api.forget(where, "invoice-fix", layout=layout, engine="extractive")
    assert plan.dry_run and plan.report is None and plan.state_entry
    assert not plan.clears_memory
    assert f"{layout.sessions_dir}/deploy-notes.jsonl" in plan.removed
    assert result.removed == plan.removed and not result.dry_run
    assert not any((root / p).exists() for p in result.removed)
    assert result.report is not None and result.report.complete
    assert result.report.phase_two == "done"
    assert "deploy-notes" not in memory_md and "invoice-fix" in memory_md
    assert last.clears_memory and (mem / "MEMORY.md").read_text() == ""


@both
@layouts
async def test_no_memory_in_the_workspace(tmp_path: Path, kind: str, name: str) -> None:
    layout = LAYOUTS[name]
    calls: list[Any] = [
        lambda w: api.status(w, layout=layout),
        lambda w: api.list_conversations(w, layout=layout),
        lambda w: api.list_files(w, layout=layout),
        lambda w: api.show(w, layout=layout),
        lambda w: api.search(w, "x", layout=layout),
        lambda w: api.view_html(w, layout=layout),
        lambda w: api.generate(w, layout=layout, engine="extractive"),
        lambda w: api.forget(w, "x", layout=layout, engine="extractive"),
    ]
    async with target(kind, tmp_path) as where:
        for call in calls:
            with pytest.raises(MemoryNotFoundError, match="no memory in ") as info:
                await call(where)
            assert f"neither {layout.memories_dir}/ nor {layout.sessions_dir}/" in str(info.value)
    assert os.listdir(tmp_path) == []  # looking never creates the layout


async def test_targets_that_are_not_workspaces(tmp_path: Path) -> None:
    with pytest.raises(MemoryNotFoundError, match="no workspace directory"):
        await api.status(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
    with pytest.raises(UserError, match="must be a SandboxSession or a workspace"):
        await api.status(42)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="layout must be a MemoryLayoutConfig"):
        await api.status(tmp_path, layout="memories")  # type: ignore[arg-type]
    with pytest.raises(UserError, match="either config or engine"):
        await api.generate(tmp_path, config=EXTRACT, engine="extractive")
    with pytest.raises(UserError, match="either engine='extractive' or a model"):
        await api.forget(tmp_path, "x", engine="extractive", model="m")
    with pytest.raises(UserError, match="engine must be"):
        await api.generate(tmp_path, engine="turbo")  # type: ignore[arg-type]


@both
@layouts
async def test_locked_by_another_process(
    tmp_path: Path, kind: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandmem.memory import _files
    from sandmem.memory.generation import manager

    # the layout lock's default wait: generation's binding, and the one every lock reads
    monkeypatch.setattr(manager, "LOCK_TIMEOUT_S", 0.2)
    monkeypatch.setattr(_files, "LOCK_TIMEOUT_S", 0.2)
    layout = LAYOUTS[name]
    root = await build(tmp_path, layout, ["invoice-fix"])
    lock = f"{layout.memories_dir}/.lock"
    before = files_of(root)
    async with (
        target(kind, root) as where,
        await UnixLocalSandboxClient().create(manifest=Manifest(root=root)) as holder,
        holder.lock(lock),
    ):
        for call in (
            api.generate(where, layout=layout, engine="extractive"),
            api.forget(where, "invoice-fix", layout=layout, engine="extractive"),
        ):
            with pytest.raises(MemoryLockedError, match="memory is locked") as info:
                await call
            assert info.value.path == lock and info.value.retryable
            assert isinstance(info.value, SandboxError)
        # reading needs no lock
        assert (await api.status(where, layout=layout)).counts.total == 1
        assert "invoice-fix" in await api.view_html(where, layout=layout)
        assert files_of(root) == before  # nothing was generated or forgotten


def test_sync_twins(tmp_path: Path) -> None:
    asyncio.run(
        build(
            tmp_path,
            CUSTOM,
            ["invoice-fix"],
            MemoryGenerateConfig(phase_one_model=failing(), phase_two_model=EXTRACTIVE),
        )
    )
    assert api.status_sync(tmp_path, layout=CUSTOM).counts.pending == 1
    [row] = api.list_conversations_sync(tmp_path, layout=CUSTOM)
    assert row.rollout_id == "invoice-fix"
    assert api.list_files_sync(tmp_path, layout=CUSTOM)
    report = api.generate_sync(tmp_path, layout=CUSTOM, engine="extractive")
    assert report.processed == ["invoice-fix"]
    assert api.show_sync(tmp_path, rollout_id="invoice-fix", layout=CUSTOM).exists
    assert api.search_sync(tmp_path, "invoice", layout=CUSTOM).hits
    assert "invoice-fix" in api.view_html_sync(tmp_path, layout=CUSTOM, title="t")
    assert api.forget_sync(tmp_path, "invoice-fix", dry_run=True, layout=CUSTOM).dry_run
    result = api.forget_sync(tmp_path, "invoice-fix", layout=CUSTOM, engine="extractive")
    assert result.clears_memory


async def test_sync_twins_refuse_a_running_loop(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="await the async function"):
        api.status_sync(tmp_path)


def test_errors_belong_to_the_tree() -> None:
    assert issubclass(MemoryNotFoundError, UserError)
    assert issubclass(MemoryLockedError, SandboxError)
    assert issubclass(MemoryLockedError, SandmemError)


def test_results_document_every_field() -> None:
    from pydantic import BaseModel

    models = [
        obj
        for obj in (getattr(api, name) for name in api.__all__)
        if isinstance(obj, type)
        and issubclass(obj, BaseModel)
        and obj.__module__.endswith("_results")
    ]
    assert len(models) >= 14
    for model in models:
        schema = model.model_json_schema()  # reads the docstrings (not done at import)
        for field, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{field} has no docstring"
            shown = schema["properties"][field]
            target = shown.get("$ref", "").rpartition("/")[2]
            # a description equal to the referenced model's own is given there only
            assert shown.get("description") or schema["$defs"][target].get("description")


@layouts
async def test_every_function_on_another_backend(name: str) -> None:
    """The API goes through the session's primitives only: an in-memory sandbox works too."""
    from sandmem.testing import InMemorySandboxClient

    layout = LAYOUTS[name]
    client = InMemorySandboxClient(exec_handler=lambda argv, workdir, env: "")
    session = await client.create()
    async with session:
        for rid in ("invoice-fix", "deploy-notes"):
            await record(session, layout, EXTRACT, rid)
        assert (await api.status(session, layout=layout)).counts.pending == 2
        report = await api.generate(session, layout=layout, config=EXTRACT)
        assert report.processed == ["deploy-notes", "invoice-fix"] and report.complete
        rows = await api.list_conversations(session, layout=layout)
        assert {r.status for r in rows} == {"done"}
        assert any(
            f.path.endswith("/MEMORY.md") for f in await api.list_files(session, layout=layout)
        )
        shown = await api.show(session, rollout_id="invoice-fix", layout=layout)
        assert shown.exists and shown.text.startswith("session_id: invoice-fix\n")
        hits = await api.search(session, "staging deployment", layout=layout)
        assert hits.hits and "deploy" in hits.hits[0].path
        plan = await api.forget(session, "deploy-notes", dry_run=True, layout=layout)
        done = await api.forget(session, "deploy-notes", layout=layout, config=EXTRACT)
        assert done.removed == plan.removed and done.report is not None and done.report.complete
        memory_md = await api.show(session, "memory", layout=layout)
        assert "deploy-notes" not in memory_md.text and "invoice-fix" in memory_md.text
        page = await api.view_html(session, layout=layout)
        assert "invoice-fix" in page and str(session.root) in page


def refusing() -> FunctionModel:
    def fn(request: ModelRequest) -> str:
        raise ConnectionRefusedError("model server down")

    return FunctionModel(fn)


@both
async def test_status_exposes_the_failure_class_and_next_retry(tmp_path: Path, kind: str) -> None:
    config = MemoryGenerateConfig(phase_one_model=refusing(), phase_two_model=EXTRACTIVE)
    root = await build(tmp_path, CUSTOM, ["invoice-fix"], config)
    async with target(kind, root) as where:
        data = await api.status(where, layout=CUSTOM)
    [row] = data.conversations
    assert row.status == "pending" and row.failure_kind == "environment"
    assert row.attempts == 0  # the server's fault uses no attempt
    assert row.next_retry_at is not None and row.next_retry_at > row.last_attempt_at
    assert "model server down" in (row.last_error or "")
