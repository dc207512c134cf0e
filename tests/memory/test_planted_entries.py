"""What an agent plants in a memory layout never blocks it and is never written through
(issue 25, classes 3 and 9, tried at every name the layout uses, not only the example):
a symlink, FIFO, socket, or an entry of the wrong kind at any of those names is moved aside;
a hard link to a file outside is never written, truncated or chmod-ed through."""

from __future__ import annotations

import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from sandmem import (
    Filesystem,
    Manifest,
    Memory,
    MemoryGenerateConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    UnixLocalSandboxClient,
)
from sandmem import memory as memapi
from sandmem.memory.layout import (
    HISTORY_DIR,
    HISTORY_SUBDIRS,
    MEMORY_ENTRIES,
    SESSIONS_FILES,
    MemoryPaths,
    ensure_layout,
)
from sandmem.sandboxes import _hostfs
from sandmem.sandboxes._types import EntryKind
from sandmem.testing import FunctionModel

EXTRACTIVE = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
PATHS = MemoryPaths("memories", "sessions")
KINDS = ("dir-link", "file-link", "fifo", "socket", "wrong-kind")


def _layout_names() -> list[tuple[str, EntryKind]]:
    names = [(f"memories/{name}", kind) for name, (kind, _) in MEMORY_ENTRIES.items()]
    names += [(f"memories/{HISTORY_DIR}/{sub}", EntryKind.DIRECTORY) for sub in HISTORY_SUBDIRS]
    names += [(f"sessions/{name}", EntryKind.FILE) for name in SESSIONS_FILES]
    return names


def _plant(target: Path, what: str, outside: Path, wanted: EntryKind) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    if what == "dir-link":
        target.symlink_to(outside)
    elif what == "file-link":
        target.symlink_to(outside / "f.txt")
    elif what == "fifo":
        os.mkfifo(target)
    elif what == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(target))
    elif wanted == EntryKind.DIRECTORY:
        target.write_text("a file where a directory belongs")
    else:
        target.mkdir()
        (target / "x").write_text("a directory where a file belongs")


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("host")
    return outside


@pytest.mark.parametrize(("where", "wanted"), _layout_names(), ids=lambda v: str(v))
async def test_anything_planted_at_a_layout_name_is_moved_aside(
    where: str, wanted: EntryKind, tmp_path: Path
) -> None:
    outside = _outside(tmp_path)
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest())
    async with sandbox:
        await ensure_layout(sandbox, PATHS)
        for what in KINDS:
            target = sandbox.root / where
            _plant(target, what, outside, wanted)
            await ensure_layout(sandbox, PATHS)
            st = target.lstat() if target.exists() or target.is_symlink() else None
            if st is not None:  # recreated by the layout: the kind it needs
                assert stat.S_ISDIR(st.st_mode) == (wanted == EntryKind.DIRECTORY), what
                assert stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode), what
            aside = [p for p in target.parent.iterdir() if p.name.startswith(target.name + ".")]
            assert [p.name.rsplit(".moved-", 1)[0] for p in aside] == [target.name], what
            for p in aside:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]
    assert (outside / "f.txt").read_text() == "host"
    await client.delete(sandbox)


def _agent() -> SandboxAgent:
    return SandboxAgent(
        name="a",
        model=FunctionModel(lambda request: "done"),
        capabilities=[Memory(generate=EXTRACTIVE), Filesystem(), Shell()],
    )


PLANTS = [
    # the example (a link at memories/skills) and its neighbours
    ("memories/skills", "dir-link"),
    ("memories/raw_memories", "file-link"),
    ("memories/rollout_summaries", "fifo"),
    ("memories/MEMORY.md", "dir-link"),
    ("memories/memory_summary.md", "file-link"),
    ("memories", "dir-link"),
    ("sessions", "wrong-kind"),
    # round 4: every other name the layout uses
    ("memories/generation_state.json", "wrong-kind"),
    ("memories/generation_log.jsonl", "fifo"),
    ("memories/phase_two_selection.json", "wrong-kind"),
    ("memories/.lock", "dir-link"),
    ("memories/.consolidated_MEMORY.md", "wrong-kind"),
    ("memories/.history", "file-link"),
    ("memories/.history/objects", "dir-link"),
    ("memories/.index.lock", "fifo"),
    ("sessions/.lock", "fifo"),
    ("sessions/.lock", "dir-link"),
    ("sessions/n0.jsonl", "wrong-kind"),
    ("sessions/n0.jsonl", "fifo"),
]


@pytest.mark.parametrize(("where", "what"), PLANTS)
async def test_runs_generation_and_views_go_on_whatever_is_planted(
    where: str, what: str, tmp_path: Path
) -> None:
    """Before the fix each of the round-4 names failed every later generation, lost every
    later conversation (a planted ``sessions/.lock``) or failed every status, list and
    search (a planted ``.index.lock``)."""
    outside = _outside(tmp_path)
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest())
    run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
    async with sandbox:
        await Runner.run(_agent(), "first", run_config=run, conversation_id="one")
    await memapi.generate(sandbox, engine="extractive")
    _plant(
        sandbox.root / where, what, outside, dict(_layout_names()).get(where, EntryKind.DIRECTORY)
    )
    workspace = str(sandbox.root)
    await memapi.status(workspace)  # the views first, before any run moved it aside
    await memapi.search(workspace, "done")
    async with sandbox:
        for rid in ("n0", "n1"):
            result = await Runner.run(_agent(), "next", run_config=run, conversation_id=rid)
            assert result.final_output == "done"
    report = await memapi.generate(workspace, engine="extractive")
    assert report.complete, report
    listed = {c.rollout_id for c in await memapi.list_conversations(workspace)}
    assert listed == {"n0", "n1"} | (set() if where == "sessions" else {"one"})
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]
    assert (outside / "f.txt").read_text() == "host"
    assert (sandbox.root / "memories/skills").is_dir()
    assert not (sandbox.root / "memories/skills").is_symlink()
    await client.delete(sandbox)


async def test_no_layout_file_is_written_through_a_hard_link(tmp_path: Path) -> None:
    """Every file of the layout (rollouts, memory files, state, log, history objects, the
    index, the locks) hard-linked to a file outside: runs, generation, views, a live edit and
    a forget change none of them (content or mode). Before the fix the index was truncated
    and rewritten through its link, and its mode set to 0600."""
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest())
    run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
    async with sandbox:
        for rid in ("one", "two"):
            await Runner.run(_agent(), "first", run_config=run, conversation_id=rid)
    await memapi.generate(sandbox, engine="extractive")
    await memapi.search(str(sandbox.root), "done")
    outside = tmp_path / "outside"
    outside.mkdir()
    linked: dict[Path, tuple[bytes, int]] = {}
    for index, path in enumerate(sorted(sandbox.root.rglob("*"))):
        if path.is_file() and not path.is_symlink():
            copy = outside / f"{index}-{path.name}"
            shutil.copyfile(path, copy)
            copy.chmod(0o644)
            path.unlink()
            os.link(copy, path)
            linked[copy] = (copy.read_bytes(), 0o644)
    assert any(p.name.endswith(".index.sqlite") for p in linked)
    assert any("objects" not in p.name and p.name.endswith("one.jsonl") for p in linked)
    workspace = str(sandbox.root)
    async with sandbox:
        await Runner.run(_agent(), "again", run_config=run, conversation_id="one")
        await sandbox.append("memories/MEMORY.md", "- edited by hand\n")
    await memapi.generate(workspace, engine="extractive")
    await memapi.status(workspace)
    await memapi.search(workspace, "done")
    await memapi.forget(workspace, "two", engine="extractive")
    for copy, (data, mode) in linked.items():
        assert copy.read_bytes() == data, copy.name
        assert stat.S_IMODE(copy.stat().st_mode) == mode, copy.name
    await client.delete(sandbox)


def test_open_regular_rw_and_strip_setid_replace_a_hard_linked_file(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside.db"
    outside.write_bytes(b"host bytes")
    outside.chmod(0o4755)  # setuid: strip_setid_bits must not clear it through the link
    os.link(outside, root / "index.db")
    fd = _hostfs.open_regular_rw(root, "index.db")
    try:
        os.ftruncate(fd, 0)
        os.write(fd, b"derived")
    finally:
        os.close(fd)
    assert (root / "index.db").read_bytes() == b"derived"
    assert outside.read_bytes() == b"host bytes"
    os.link(outside, root / "tool")
    assert _hostfs.strip_setid_bits(root) == ["tool"]
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755
    assert stat.S_IMODE((root / "tool").stat().st_mode) == 0o755
    assert (root / "tool").read_bytes() == b"host bytes" and outside.stat().st_nlink == 1
