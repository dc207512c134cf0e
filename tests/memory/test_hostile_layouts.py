"""A property-based harness: hypothesis plants hostile entries in a memory layout — links
(relative and absolute, to files and directories outside), FIFOs, sockets, entries of the
wrong kind, and bad records (garbage, truncated JSON, records naming paths outside) at every
name sandmem reads — then runs every memory command and MCP tool against it. None may follow
a link out (the directory outside and the workspace's own files are unchanged), hang, or raise
anything but a ``SandmemError`` (the one line the CLI prints)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_history import PATCH, consolidated, open_session, record

from sandmem import SandmemError
from sandmem import memory as api
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandmem.memory.mcp import ServerOptions
from sandmem.memory.mcp._tools import Caller, MemoryTools

CONFIG = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
#: one operation may take this long; more is a hang
OP_TIMEOUT_S = 30.0


async def _build(root: Path) -> None:
    """A layout with two versions, a conversation, a skill, a rollout summary and a pending
    proposal: every kind of file sandmem reads back."""
    await consolidated(root, ["invoice-fix"])
    tools = _tools(root)
    skill = "*** Begin Patch\n*** Add File: memories/skills/deploy/SKILL.md\n+# deploy\n"
    await tools.call("memory_update", {"patch": skill + "*** End Patch\n"}, Caller(client="a"))
    async with await open_session(root) as session:
        read = MemoryReadConfig(live_update="propose")
        await record(session, "deploy-notes", config=None, read=read, patch=PATCH)
    await api.search(root, "invoice")  # the index


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-template") / "ws"
    root.mkdir()
    (root / "src").mkdir()
    (root / "src/app.py").write_text("print('app')\n")
    asyncio.run(_build(root))
    return root


def _names(root: Path) -> list[str]:
    """Every name sandmem reads in the template (files and directories, below the layout's
    two directories), and the directories themselves."""
    found = ["memories", "sessions", "memories/skills/new", "memories/skills/deploy/new.md"]
    found += ["memories/rollout_summaries/new.md", "sessions/new.jsonl"]
    for top in ("memories", "sessions"):
        for path in sorted((root / top).rglob("*")):
            rel = str(path.relative_to(root))
            if ".moved-" not in rel and not rel.endswith((".sqlite-wal", ".sqlite-shm")):
                found.append(rel)
    return found


#: a stand-in for the digest of a blob the template stores (filled in when planting)
BLOB = "<blob>"
RECORDS = {
    "garbage": b"\x00\xff\x1b]52;c;eA==\x07 not json",
    "truncated": b'{"format": 1, "seq": 2, "files": {"MEMORY.md": "ab',
    "wrong-shape": b'["a", "list", "where", "an", "object", "belongs"]',
    # the records: names and ids that leave the layout, a digest naming a file
    "escape-names": json.dumps(
        {
            "id": "../../../src/app",
            "seq": 9,
            "time": "x",
            "attribution": {"kind": "hand_edit", "client": "\x1b[2J"},
            "files": {"skills/../../../src/app.py": BLOB, "../outside.md": BLOB},
            "before": {"skills/../../../src/app.py": None, "../outside.md": None},
            "selection": "../../../README.md",
        }
    ).encode(),
    "escape-digest": json.dumps(
        {
            "id": "p00000001",
            "format": 1,
            "seq": 9,
            "time": "x",
            "attribution": {"kind": "live_edit"},
            "files": {"MEMORY.md": "../../../src/app.py"},
            "before": {"MEMORY.md": None},
        }
    ).encode(),
    "empty": b"",
}
KINDS = (
    "dir-link",  # to src/ inside the workspace, relative
    "dir-link-abs",  # the same, absolute
    "file-link",  # to src/app.py
    "link-out",  # to a directory outside the workspace
    "fifo",
    "socket",
    "wrong-kind",
    "record",
)


def _plant(root: Path, outside: Path, name: str, kind: str, record_kind: str) -> None:
    target = root / name
    was_dir = target.is_dir() and not target.is_symlink()
    if was_dir:
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()
    target.parent.mkdir(parents=True, exist_ok=True)
    up = "../" * (len(Path(name).parts) - 1)
    if kind == "dir-link":
        target.symlink_to(up + "src")
    elif kind == "dir-link-abs":
        target.symlink_to(root / "src")
    elif kind == "file-link":
        target.symlink_to(up + "src/app.py")
    elif kind == "link-out":
        target.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(target))
    elif kind == "wrong-kind" and not was_dir:
        target.mkdir()
        (target / "x").write_text("a directory where a file belongs")
    elif kind == "record" and was_dir:
        target.mkdir()
        data = RECORDS[record_kind].replace(BLOB.encode(), _a_blob(root).encode())
        (target / "p0000.json").write_bytes(data)
    else:
        target.write_bytes(RECORDS[record_kind].replace(BLOB.encode(), _a_blob(root).encode()))


def _a_blob(root: Path) -> str:
    """The digest of a blob the layout stores (so a record naming it is not refused for a
    missing object before its names are looked at)."""
    objects = root / "memories/.history/objects"
    found = sorted(p.name for p in objects.iterdir()) if objects.is_dir() else []
    return found[0] if found else "0" * 64


def _plantable(root: Path, name: str) -> bool:
    """Whether every directory above ``name`` is a real directory (an earlier plant may have
    replaced one)."""
    parent = (root / name).parent
    while parent != root:
        if parent.is_symlink() or not parent.is_dir():
            return False
        parent = parent.parent
    return True


def _snapshot(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _tools(root: Path) -> MemoryTools:
    options = ServerOptions(
        str(root), MemoryLayoutConfig(), CONFIG, allow_forget=True, allow_generate=True
    )
    return MemoryTools(options)


def _operations(root: Path) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    tools = _tools(root)
    caller = Caller(client="harness")
    patch = "*** Begin Patch\n*** Add File: memories/skills/h/SKILL.md\n+# h\n*** End Patch\n"

    def tool(name: str, args: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
        return lambda: tools.call(name, args, caller)

    async def approve_first() -> Any:
        for proposal in await api.inbox(root):
            return await api.approve(root, proposal.id)
        return None

    async def dismiss_first() -> Any:
        for proposal in await api.inbox(root):
            return await api.dismiss(root, proposal.id)
        return None

    return [
        ("status", lambda: api.status(root)),
        ("list_conversations", lambda: api.list_conversations(root)),
        ("list_files", lambda: api.list_files(root)),
        ("search", lambda: api.search(root, "invoice")),
        ("show", lambda: api.show(root, "rollout_summary", "invoice-fix")),
        ("show_rollout", lambda: api.show(root, "rollout", "invoice-fix")),
        ("show_memory", lambda: api.show(root, "memory")),
        ("view_html", lambda: api.view_html(root)),
        ("log", lambda: api.log(root)),
        ("diff", lambda: api.diff(root)),
        ("inbox", lambda: api.inbox(root)),
        ("memory_search", tool("memory_search", {"query": "invoice"})),
        ("memory_read", tool("memory_read", {"path": "MEMORY.md"})),
        ("memory_read_skill", tool("memory_read", {"path": "skills/deploy/SKILL.md"})),
        ("memory_list", tool("memory_list", {})),
        ("memory_status", tool("memory_status", {})),
        ("memory_remember", tool("memory_remember", {"text": "a note from the harness"})),
        ("memory_update", tool("memory_update", {"patch": patch})),
        ("approve", approve_first),
        ("dismiss", dismiss_first),
        ("restore", lambda: api.restore(root, 1)),
        ("generate", lambda: api.generate(root, engine="extractive")),
        ("memory_generate", tool("memory_generate", {})),
        ("redact_history", lambda: api.redact_history(root, "blue-7", secrets=True)),
        ("forget", lambda: api.forget(root, "invoice-fix", engine="extractive")),
        ("memory_forget", tool("memory_forget", {"rollout_id": "mcp-notes"})),
    ]


async def _run_all(root: Path, worked: list[str] | None = None) -> dict[str, str]:
    """Every operation; returns the ones that failed the promise, with what happened (and
    puts the ones that did their job in ``worked``)."""
    broken: dict[str, str] = {}
    for name, op in _operations(root):
        try:
            await asyncio.wait_for(op(), OP_TIMEOUT_S)
            if worked is not None:
                worked.append(name)
        except TimeoutError:
            broken[name] = "hung"
        except SandmemError as exc:
            if not str(exc).strip():
                broken[name] = f"{type(exc).__name__} without a message"
        except Exception as exc:  # a traceback for the user: the defect this harness finds
            broken[name] = f"{type(exc).__name__}: {exc}"
    return broken


#: the issue's examples, always tried (hypothesis adds random ones)
EXAMPLES = [
    [("memories/skills/new", "dir-link", "empty")],
    [("memories/skills/deploy/new.md", "dir-link-abs", "empty")],
    [("memories/skills/deploy/SKILL.md", "file-link", "empty"), ("sessions/new.jsonl", "fifo", "")],
    [("memories/MEMORY.md", "file-link", "empty"), ("memories/skills", "dir-link", "empty")],
    [("memories", "dir-link", "empty")],
]


#: ``sandmem`` commands run against each hostile layout (after the API and the MCP tools)
COMMANDS = [
    ["memory", "status"],
    ["memory", "list"],
    ["memory", "tree"],
    ["memory", "search", "invoice"],
    ["memory", "show"],
    ["memory", "log"],
    ["memory", "diff"],
    ["memory", "inbox"],
]


def _run_commands(root: Path) -> dict[str, str]:
    """Each command either works or fails with a short message and no traceback."""
    from click.testing import CliRunner

    from sandmem.cli import cli

    broken: dict[str, str] = {}
    for args in COMMANDS:
        result = CliRunner().invoke(cli, [*args, "--workspace", str(root)])
        name = " ".join(args)
        if result.exit_code == 0:
            continue
        if not isinstance(result.exception, SystemExit):
            broken[name] = f"{type(result.exception).__name__}: {result.exception}"
        elif "Traceback" in result.output or not result.output.strip():
            broken[name] = result.output[-300:] or "failed without a message"
    return broken


@st.composite
def _plants(draw: st.DrawFn, names: list[str]) -> list[tuple[str, str, str]]:
    count = draw(st.integers(1, 5))
    return [
        (
            draw(st.sampled_from(names)),
            draw(st.sampled_from(KINDS)),
            draw(st.sampled_from(sorted(RECORDS))),
        )
        for _ in range(count)
    ]


def test_every_operation_works_on_the_clean_template(
    template: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The harness's operations do their job on a layout nothing was planted in (so a
    refusal on a hostile one is the plant's doing)."""
    root = tmp_path_factory.mktemp("clean") / "ws"
    shutil.copytree(template, root, symlinks=True)
    worked: list[str] = []
    assert asyncio.run(_run_all(root, worked)) == {}
    assert worked == [name for name, _ in _operations(root)]
    assert _run_commands(root) == {}


def test_every_command_and_tool_holds_on_a_hostile_layout(
    template: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    names = _names(template)

    def check(plants: list[tuple[str, str, str]]) -> None:
        base = tmp_path_factory.mktemp("hostile")
        root = base / "ws"
        shutil.copytree(template, root, symlinks=True)
        outside = base / "outside"
        outside.mkdir()
        (outside / "secret.txt").write_text("OUTSIDE: never read, never written\n")
        for name, kind, record_kind in plants:
            if _plantable(root, name):
                _plant(root, outside, name, kind, record_kind)
        before_outside = _snapshot(outside)
        before_src = _snapshot(root / "src")
        broken = asyncio.run(_run_all(root))
        broken.update(_run_commands(root))
        assert broken == {}, plants
        assert _snapshot(outside) == before_outside, plants
        assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"], plants
        assert _snapshot(root / "src") == before_src, plants
        assert not (root / "README.md").exists()
        shutil.rmtree(base, ignore_errors=True)

    test = given(plants=_plants(names))(check)
    for plants in EXAMPLES:
        test = example(plants=plants)(test)
    settings(
        max_examples=4,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )(test)()
