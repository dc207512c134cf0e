"""Memory file access (``memory/_files.py``): every read, write, list, move and delete of a
layout's files goes through one layer that follows no link anywhere below the layout, refuses
special files and names that leave it. Tried through each mechanism that touches memory files
(run-end versioning, MCP tools, approve / restore / dismiss, the redaction pass, the views,
notes), with links at every depth, to files and to directories, relative and absolute, and
hard links; and a scan that fails when a memory module reaches files another way."""

from __future__ import annotations

import ast
import asyncio
import json
import os
from collections.abc import Awaitable
from pathlib import Path

import pytest
from memory_doubles import transcript_turn as turn
from memory_doubles import transcripts_workspace as workspace
from test_history import PATCH, consolidated, open_session, record

from sandmem import SandboxError, SandboxPathError, SandmemError
from sandmem import memory as api
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig, _files
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.mcp import ServerOptions
from sandmem.memory.mcp._tools import Caller, MemoryTools, ToolRefused
from sandmem.memory.views._index import INDEX_NAME, opened_index, rebuild_index, remove_index

SRC = Path(__file__).resolve().parents[2] / "src" / "sandmem" / "memory"
CONFIG = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
SECRET = "OPENAI_API_KEY=sk-proj-Zq3xV8kT1mN5bR7wY2cL9pD4fG6hJ0sA\n"
SETTINGS = f"# settings\nport: 8080\n{SECRET}"


def _host(root: Path) -> dict[str, bytes]:
    """Every file outside ``memories/`` and ``sessions/``, with its bytes."""
    skip = ("memories", "sessions")
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.relative_to(root).parts[0] not in skip
    }


def _seed_host(root: Path) -> None:
    (root / "config").mkdir(exist_ok=True)
    (root / "config/settings.yaml").write_text(SETTINGS)
    (root / "src").mkdir(exist_ok=True)
    (root / "src/app.py").write_text("print('app')\n")


def _history_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (root / "memories/.history").rglob("*") if p.is_file())


# ---------------------------------------------------------------- the layer itself


@pytest.mark.parametrize(
    "path", ["", "/etc/passwd", "memories/../config", "memories/./MEMORY.md", "a//b", "m/\x00"]
)
def test_check_refuses_every_path_that_is_not_plain(path: str) -> None:
    with pytest.raises(SandboxPathError):
        _files.check(path)


@pytest.mark.parametrize(
    "name",
    [
        "../config/settings.yaml",
        "skills/../../src/app.py",
        "/etc/passwd",
        "skills/a\\..\\..\\b",
        "skills/\x1b]52;c;x\x07",
        "skills/a/../../..",
        "..",
        "",
        "skills//x",
    ],
)
def test_member_refuses_names_that_leave_the_layout(name: str) -> None:
    with pytest.raises(SandboxPathError):
        _files.member("memories", name)


def test_member_keeps_plain_names() -> None:
    assert _files.member("memories", "skills/a/SKILL.md") == "memories/skills/a/SKILL.md"
    assert _files.member("mem/x", "MEMORY.md") == "mem/x/MEMORY.md"


def _links(root: Path) -> list[tuple[str, str]]:
    """(a name under memories/, what it links to): directories and files, relative and
    absolute, at every depth."""
    return [
        ("memories/skills/cfg", "../../config"),
        ("memories/skills/abs", str(root / "config")),
        ("memories/skills/a/b/c", "../../../../config"),
        ("memories/skills/f/SKILL.md", "../../../config/settings.yaml"),
        ("memories/skills/g/SKILL.md", str(root / "config/settings.yaml")),
    ]


def _plant(root: Path, links: list[tuple[str, str]]) -> None:
    for name, target in links:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(target)


async def test_no_primitive_goes_through_a_link(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    (tmp_path / "memories/skills").mkdir(parents=True)
    _plant(tmp_path, _links(tmp_path))
    before = _host(tmp_path)
    async with await open_session(tmp_path) as session:
        for through in ("cfg", "abs", "a/b/c"):
            name = f"memories/skills/{through}/settings.yaml"
            with pytest.raises(SandboxPathError):
                await _files.read(session, name)
            assert await _files.read_text(session, name) is None
            assert not await _files.exists(session, name)
            with pytest.raises(SandboxPathError):
                await _files.write(session, name, b"pwned")
            with pytest.raises(SandboxPathError):
                await _files.append(session, name, b"pwned")
            with pytest.raises(SandboxPathError):
                await _files.remove(session, name)
            with pytest.raises(SandboxPathError):
                await _files.listdir(session, f"memories/skills/{through}/")
        for leaf in ("f", "g"):
            name = f"memories/skills/{leaf}/SKILL.md"
            assert await _files.read(session, name) is None
            await _files.write(session, name, b"own file now")  # replaces the link itself
            assert not (tmp_path / name).is_symlink()
        walked = await _files.walk(session, "memories")
        assert not any("settings" in p for p in walked)
    assert _host(tmp_path) == before


async def test_special_files_are_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "memories/skills/p").mkdir(parents=True)
    os.mkfifo(tmp_path / "memories/skills/p/SKILL.md")
    async with await open_session(tmp_path) as session:
        got = await asyncio.wait_for(_files.read(session, "memories/skills/p/SKILL.md"), 5)
        assert got is None
        assert await _files.walk(session, "memories") == {}


async def test_a_write_never_goes_through_a_hard_link(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    (tmp_path / "memories/skills/h").mkdir(parents=True)
    os.link(tmp_path / "config/settings.yaml", tmp_path / "memories/skills/h/SKILL.md")
    async with await open_session(tmp_path) as session:
        await _files.write(session, "memories/skills/h/SKILL.md", b"new")
        await _files.append(session, "memories/MEMORY.md", b"x")
    assert (tmp_path / "config/settings.yaml").read_text() == SETTINGS


# ---------------------------------------------------------------- the mechanisms


async def test_a_hard_linked_memory_file_is_versioned_without_rewriting_its_other_name(
    tmp_path: Path,
) -> None:
    """A hard link is a file of the layout (its bytes are memory now), but the redaction
    that versioning applies replaces it: the other name outside keeps its bytes."""
    _seed_host(tmp_path)
    await consolidated(tmp_path, ["invoice-fix"])
    os.link(tmp_path / "config/settings.yaml", tmp_path / "memories/skills/hard.md")
    async with await open_session(tmp_path) as session:
        await record(session, "deploy-notes", patch=PATCH)
    assert (tmp_path / "config/settings.yaml").read_text() == SETTINGS
    assert SECRET.split("=")[1].strip().encode() not in _history_bytes(tmp_path)
    assert (tmp_path / "memories/skills/hard.md").stat().st_nlink == 1


async def test_run_end_versioning_reads_and_rewrites_nothing_through_a_link(
    tmp_path: Path,
) -> None:
    """The issue's first example: ``memories/skills/cfg -> ../../config`` made by an agent's
    shell; the run-end version must not read, redact or copy ``config/settings.yaml``."""
    _seed_host(tmp_path)
    await consolidated(tmp_path, ["invoice-fix"])
    _plant(tmp_path, _links(tmp_path))
    before = _host(tmp_path)
    async with await open_session(tmp_path) as session:
        await record(session, "deploy-notes", patch=PATCH)  # a live edit: a version at run end
    assert _host(tmp_path) == before
    assert b"port: 8080" not in _history_bytes(tmp_path)
    kinds = [v.kind for v in await api.log(tmp_path)]
    assert "live_edit" in kinds
    for name, _target in _links(tmp_path):
        assert (tmp_path / name).is_symlink(), name  # left alone, never followed


def _tools(root: Path) -> MemoryTools:
    return MemoryTools(ServerOptions(str(root), MemoryLayoutConfig(), CONFIG))


def _update(op: str, path: str, body: str = "+x\n") -> str:
    if op == "Delete":
        return f"*** Begin Patch\n*** Delete File: {path}\n*** End Patch\n"
    if op == "Update":
        return f"*** Begin Patch\n*** Update File: {path}\n@@\n-print('app')\n{body}*** End Patch\n"
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


@pytest.mark.parametrize(
    ("link", "target", "op", "path"),
    [
        # the second example, and its neighbours
        ("memories/skills/team", "../../src", "Add", "memories/skills/team/pwn.py"),
        ("memories/skills/team", "../../src", "Update", "memories/skills/team/app.py"),
        ("memories/skills/team", "../../src", "Delete", "memories/skills/team/app.py"),
        ("memories/skills/team", "SRC_ABS", "Add", "memories/skills/team/pwn.py"),
        ("memories/skills/a/b", "../../../../src", "Add", "memories/skills/a/b/pwn.py"),
        ("memories/skills/f/app.py", "../../../src/app.py", "Update", "memories/skills/f/app.py"),
        ("memories/skills/f/app.py", "../../../src/app.py", "Delete", "memories/skills/f/app.py"),
    ],
)
async def test_mcp_memory_update_writes_nothing_through_a_link(
    tmp_path: Path, link: str, target: str, op: str, path: str
) -> None:
    _seed_host(tmp_path)
    (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / link).symlink_to(str(tmp_path / "src") if target == "SRC_ABS" else target)
    before = _host(tmp_path)
    tools = _tools(tmp_path)
    try:
        await tools.call("memory_update", {"patch": _update(op, path)}, Caller(client="c"))
    except ToolRefused as exc:
        assert "\n" not in str(exc).strip()  # one clear line
    assert _host(tmp_path) == before
    assert not (tmp_path / "src/pwn.py").exists()


async def test_mcp_memory_read_serves_nothing_through_a_link(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    (tmp_path / "memories/skills").mkdir(parents=True)
    _plant(tmp_path, _links(tmp_path))
    tools = _tools(tmp_path)
    for name in ("skills/cfg/settings.yaml", "skills/f/SKILL.md", "skills/g/SKILL.md"):
        with pytest.raises(ToolRefused):
            await tools.call("memory_read", {"path": name}, Caller())
    listing = await tools.call("memory_search", {"query": "port 8080"}, Caller())
    assert "settings" not in listing and "port: 8080" not in listing


async def _skill_version(root: Path, name: str) -> None:
    await _tools(root).call(
        "memory_update",
        {
            "patch": f"*** Begin Patch\n*** Add File: memories/skills/{name}/SKILL.md\n+# {name}\n"
            "*** End Patch\n"
        },
        Caller(client="seed"),
    )


async def _works_or_refuses_the_link(root: Path, action: Awaitable[object]) -> None:
    """``action`` either works or is refused for the link; nothing outside the layout
    changes either way."""
    before = _host(root)
    try:
        await action
    except SandboxPathError as exc:
        assert "symlink" in str(exc)
    assert _host(root) == before


async def test_restore_writes_nothing_through_a_link(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    await consolidated(tmp_path, ["invoice-fix"])
    await _skill_version(tmp_path, "s0")
    [head, *_] = await api.log(tmp_path)
    skill = tmp_path / "memories/skills/s0"
    (skill / "SKILL.md").unlink()
    skill.rmdir()
    skill.symlink_to("../../src")
    await _works_or_refuses_the_link(tmp_path, api.restore(tmp_path, head.version))
    assert not (tmp_path / "src/SKILL.md").exists()


async def test_approve_and_dismiss_write_nothing_through_a_link(tmp_path: Path) -> None:
    from sandmem.memory import MemoryReadConfig

    _seed_host(tmp_path)
    await consolidated(tmp_path, ["invoice-fix"])
    patch = "*** Begin Patch\n*** Add File: memories/skills/s1/SKILL.md\n+# s1\n*** End Patch"
    async with await open_session(tmp_path) as session:
        await record(
            session, "deploy-notes", read=MemoryReadConfig(live_update="propose"), patch=patch
        )
    [proposal] = await api.inbox(tmp_path)
    (tmp_path / "memories/skills/s1").symlink_to("../../src")
    await _works_or_refuses_the_link(tmp_path, api.approve(tmp_path, proposal.id))
    proposals = tmp_path / "memories/.history/proposals"
    moved = proposals.rename(tmp_path / "memories/.history/elsewhere")
    proposals.symlink_to(moved)
    try:
        await api.dismiss(tmp_path, proposal.id)
    except Exception as exc:  # a clear refusal, never a deletion through the link
        assert "\n" not in str(exc)
    assert (moved / f"{proposal.id}.json").exists()


async def test_the_stop_redaction_pass_and_the_views_follow_no_link(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    await consolidated(tmp_path, ["invoice-fix"])
    _plant(tmp_path, _links(tmp_path))
    before = _host(tmp_path)
    async with await open_session(tmp_path) as session:
        await record(session, "deploy-notes", config=None)  # a read-only layout: redaction hook
    status = await api.status(tmp_path)
    found = await api.search(tmp_path, "8080")
    files = await api.list_files(tmp_path)
    assert _host(tmp_path) == before
    assert status is not None
    assert not any("8080" in hit.snippet for hit in found.hits)
    assert not any("settings" in f.path for f in files)


async def test_a_note_is_not_appended_through_a_linked_rollout(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    (tmp_path / "sessions").mkdir()
    (tmp_path / "memories").mkdir()
    (tmp_path / "sessions/mcp-notes.jsonl").symlink_to("../config/settings.yaml")
    before = _host(tmp_path)
    answer = await _tools(tmp_path).call("memory_remember", {"text": "a note"}, Caller())
    assert answer.startswith("Recorded")
    assert _host(tmp_path) == before
    assert "a note" in (tmp_path / "sessions/mcp-notes.jsonl").read_text()


# ---------------------------------------------------------------- one way to reach files

#: modules of ``sandmem/memory/`` that may reach files without the layer, and why
ALLOWED = {
    # the layer itself
    "_files.py": "the memory file access layer",
    # foreign transcripts the user names on the host (not a layout's files)
    "ingestion/_detect.py": "reads a transcript the user named, to tell its format",
    "ingestion/_lines.py": "reads a transcript the user named, line by line",
    "ingestion/_ingest.py": "expands and reads the transcripts the user named",
    "ingestion/_hooks.py": "finds the Codex transcript a notify hook names",
    "ingestion/_open.py": "opens a transcript the user named without blocking (no FIFO)",
    "ingestion/_sqlite.py": "opens a session database the user named, read-only",
    "ingestion/_route.py": "reads a transcript the user named, for its working directory",
    # a run's apply_patch edits the whole workspace: paths under a memory directory go
    # through _files (redacted, no link followed), every other path through the session
    "live_edit.py": "apply_patch on the run's own files outside memory directories",
    # a three-way merge in a private temp directory, by `git merge-file`
    "store/_sync.py": "git merge-file on copies in a temp directory of its own",
    # the user's own data directory (not a layout); markers and layouts are only looked for
    "scopes.py": "creates the user's own sandmem directory (mode 0700)",
    # the viewer's page template, package data
    "views/_viewer_html.py": "reads the page template from the package",
    # installed packages (site-packages), read-only and digest-checked
    "views/_mpnet.py": "reads the MPNet weight pieces from their installed packages and keeps "
    "them unpacked in the user's cache (no layout file)",
    "views/_wordllama.py": "reads WordLlama's two data files from its installed package "
    "(no layout file)",
}

#: session file primitives: called on a session only by the layer
PRIMITIVES = {
    "read", "read_bytes", "read_many", "write", "write_bytes", "append", "remove", "rm",
    "rename", "mkdir", "listdir", "ls", "stat_dir", "stat_many", "exists", "is_dir",
    "open_host_fd", "lock",
}  # fmt: skip
#: ``os`` functions that touch files
OS_FILE = {
    "open", "remove", "unlink", "rename", "replace", "rmdir", "mkdir", "makedirs", "listdir",
    "scandir", "walk", "stat", "lstat", "symlink", "link", "readlink", "chmod", "truncate",
    "mkfifo", "removedirs", "utime", "fstat", "ftruncate", "close", "fdopen", "dup",
}  # fmt: skip
#: ``pathlib`` I/O, told from session-shaped methods by their arity
PATH_IO = {
    "read_text": 0, "read_bytes": 0, "write_text": 1, "write_bytes": 1, "unlink": 0,
    "rmdir": 0, "iterdir": 0, "touch": 0, "symlink_to": 1, "hardlink_to": 1, "glob": 1,
    "rglob": 1, "exists": 0, "is_dir": 0, "is_file": 0,
}  # fmt: skip


def _receiver(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _in_memory(call: ast.Call) -> bool:
    """Whether an ``sqlite3.connect`` call opens an in-memory database (a file is opened by
    the layer: ``_files.HostFile.connect_sqlite``)."""
    first = call.args[0] if call.args else None
    return isinstance(first, ast.Constant) and first.value == ":memory:"


def _method_offence(call: ast.Call, func: ast.Attribute) -> str | None:
    owner, name = _receiver(func.value), func.attr
    if owner in ("session", "_session") and name in PRIMITIVES:
        return f"{owner}.{name}()"
    if owner == "os" and name in OS_FILE:
        return f"os.{name}()"
    if owner == "sqlite3" and name == "connect" and not _in_memory(call):
        return "sqlite3.connect() on a file"
    if owner == "shutil" and name != "which":
        return f"shutil.{name}()"
    if name in PATH_IO and len(call.args) == PATH_IO[name] and not call.keywords:
        if owner not in ("_files", "self", "scoped", "files", "store"):
            return f".{name}() (pathlib)"
        return None
    if name == "open" and owner not in ("_files",):
        return ".open()"
    return None


def _offences(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.append(f"{node.lineno}: open()")
        if isinstance(func, ast.Name) and func.id == "no_symlinks":
            found.append(f"{node.lineno}: no_symlinks() (the layer applies it)")
        offence = _method_offence(node, func) if isinstance(func, ast.Attribute) else None
        if offence is not None:
            found.append(f"{node.lineno}: {offence}")
    return found


def test_no_memory_module_reaches_layout_files_another_way() -> None:
    """Fails when a module of ``sandmem/memory/`` calls a session file primitive, ``open()``,
    ``pathlib`` I/O, an ``os`` file function or ``shutil`` itself, instead of ``_files``."""
    problems = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        if rel in ALLOWED:
            continue
        found = _offences(ast.parse(path.read_text(), str(path)))
        if found:
            problems[rel] = found
    assert problems == {}


def test_the_scan_catches_each_way() -> None:
    code = """
import os, shutil
async def f(session, self, p):
    open("x")
    await session.write("memories/MEMORY.md", b"")
    await self._session.read_many(["x"])
    os.unlink("x")
    shutil.copy("a", "b")
    p.write_text("x")
    p.read_bytes()
    with no_symlinks():
        pass
    os.ftruncate(3, 0)
    os.fstat(3)
    sqlite3.connect(f"/proc/self/fd/{3}")
    sqlite3.connect(":memory:")  # not a file: allowed
"""
    assert len(_offences(ast.parse(code))) == 11


def test_the_allowlist_names_real_modules() -> None:
    assert all((SRC / rel).is_file() for rel in ALLOWED)


async def test_the_skills_list_follows_no_link(tmp_path: Path) -> None:
    """The Skills capability lists the layout's ``skills/``: a linked skill directory, a
    linked ``SKILL.md`` and a FIFO are left out, never read."""
    from sandmem.capabilities.skills import Skills

    _seed_host(tmp_path)
    (tmp_path / "config/evil").mkdir()
    (tmp_path / "config/evil/SKILL.md").write_text("---\nname: evil\n---\n")
    for name in ("ok", "linked-file", "fifo"):
        (tmp_path / f"memories/skills/{name}").mkdir(parents=True)
    (tmp_path / "memories/skills/ok/SKILL.md").write_text("---\nname: ok\ndescription: d\n---\n")
    (tmp_path / "memories/skills/cfg").symlink_to("../../config")
    (tmp_path / "memories/skills/linked-file/SKILL.md").symlink_to("../../../config/evil/SKILL.md")
    os.mkfifo(tmp_path / "memories/skills/fifo/SKILL.md")
    async with await open_session(tmp_path) as session:
        found = await asyncio.wait_for(Skills().bind(session).find("memories/skills"), 10)
    assert [s.name for s in found] == ["ok"]


def _proposal(root: Path, pid: str, files: dict[str, str | None]) -> None:
    record = {
        "id": pid,
        "time": "2026-12-06T00:00:00Z",
        "base": None,
        "attribution": {"kind": "live_edit"},
        "files": files,
        "before": dict.fromkeys(files),
    }
    folder = root / "memories/.history/proposals"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "p0000001.json").write_text(json.dumps(record))


def _blob(root: Path, data: bytes) -> str:
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    objects = root / "memories/.history/objects"
    objects.mkdir(parents=True, exist_ok=True)
    (objects / digest).write_bytes(data)
    return digest


@pytest.mark.parametrize(
    "name", ["skills/../../../src/app.py", "../src/app.py", "skills/../../README.md"]
)
async def test_a_proposal_naming_a_file_outside_the_layout_is_never_applied(
    tmp_path: Path, name: str
) -> None:
    _seed_host(tmp_path)
    (tmp_path / "README.md").write_text("readme\n")
    await consolidated(tmp_path, ["invoice-fix"])
    _proposal(tmp_path, "p0000001", {name: _blob(tmp_path, b"pwned\n")})
    before = _host(tmp_path)
    with pytest.raises(SandmemError):
        await api.approve(tmp_path, "p0000001")
    assert _host(tmp_path) == before


async def test_a_digest_naming_a_file_is_never_read(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    (tmp_path / "README.md").write_text("readme: not memory\n")
    await consolidated(tmp_path, ["invoice-fix"])
    _proposal(tmp_path, "p0000001", {"MEMORY.md": "../../../README.md"})
    with pytest.raises(SandmemError):
        await api.approve(tmp_path, "p0000001")
    assert "readme" not in (tmp_path / "memories/MEMORY.md").read_text()


async def test_a_proposal_id_naming_a_file_outside_deletes_nothing(tmp_path: Path) -> None:
    _seed_host(tmp_path)
    (tmp_path / "package.json").write_text("{}\n")
    await consolidated(tmp_path, ["invoice-fix"])
    _proposal(tmp_path, "../../../package", {"MEMORY.md": _blob(tmp_path, b"x\n")})
    try:
        await api.dismiss(tmp_path, "../../../package")
    except SandmemError as exc:
        assert "\n" not in str(exc)
    assert (tmp_path / "package.json").read_text() == "{}\n"


# ---------------------------------------------------------------- the search index's files


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


async def _outside_index(tmp_path: Path, root: Path) -> Path:
    """A valid index of another workspace, whose memory and transcripts say ``zebracorn``,
    copied into ``root`` outside its layout (what a planted link would hand SQLite)."""
    other = workspace(tmp_path / "other", {"z": turn("z", "zebracorn rollout", "zebracorn done")})
    (other / "memories/MEMORY.md").write_text("# Notes\n- the zebracorn deploy token\n")
    assert (await api.search(other, "zebracorn")).hits  # it answers where it belongs
    outside = root / "config/outside.sqlite"
    outside.parent.mkdir()
    outside.write_bytes((other / "memories" / INDEX_NAME).read_bytes())
    return outside


@pytest.mark.parametrize("planted", ["relative", "absolute", "dangling", "fifo"])
async def test_the_index_file_is_never_reached_through_a_link(tmp_path: Path, planted: str) -> None:
    """A link (or FIFO) at ``.index.sqlite``: the index never opens, reads, writes, rebuilds
    or removes what it names; search answers from the layout's own files."""
    root = workspace(tmp_path, {"ci": turn("ci", "fix the invoices", "invoices fixed")})
    outside = await _outside_index(tmp_path, root)
    before = _digest(outside)
    (root / "memories/MEMORY.md").write_text("# Notes\n- invoices are fixed\n")
    name = root / "memories" / INDEX_NAME
    if planted == "relative":
        name.symlink_to("../config/outside.sqlite")
    elif planted == "absolute":
        name.symlink_to(outside)
    elif planted == "dangling":
        name.symlink_to(root / "config/nowhere.sqlite")
    else:
        os.mkfifo(name)
    paths = MemoryPaths("memories", "sessions")
    async with await open_session(root) as session:
        with pytest.raises(SandboxError):
            await asyncio.wait_for(_files.open_host(session, f"memories/{INDEX_NAME}"), 5)
        async with opened_index(session, paths, "search", "transcripts") as index:
            assert index.file is None and not index.keep  # in memory, for this call only
            assert not await index.search_hits("zebracorn", 10)
            assert await index.search_hits("invoices", 10)
        await asyncio.wait_for(rebuild_index(session, paths), 20)
        await remove_index(session, paths)  # removes a link itself, never its target
    found = await api.search(root, "zebracorn invoices")
    assert found.hits and not any("zebracorn" in (h.text or h.snippet) for h in found.hits)
    assert _digest(outside) == before
    assert not (root / "config/nowhere.sqlite").exists()


@pytest.mark.parametrize("planted", ["relative", "absolute", "swapped", "directory"])
async def test_the_transcript_tier_reads_no_linked_transcript(tmp_path: Path, planted: str) -> None:
    """A link at a ``sessions/`` transcript the tier would index (or at ``sessions/`` itself,
    or swapped in for a transcript already indexed): its target is never read, indexed or
    quoted in a snippet."""
    root = workspace(tmp_path, {"ci": turn("ci", "fix the invoices", "invoices fixed")})
    secret = root / "private"  # the workspace's own files, outside the layout
    secret.mkdir()
    (secret / "leak.jsonl").write_text(turn("leak", "the quokka plan", "quokka launch at dawn"))
    before = _digest(secret / "leak.jsonl")
    leak = root / "sessions/leak.jsonl"
    if planted == "relative":
        leak.symlink_to("../private/leak.jsonl")
    elif planted == "absolute":
        leak.symlink_to(secret / "leak.jsonl")
    elif planted == "swapped":  # indexed as a file of its own, then replaced by a link
        leak.write_text(turn("leak", "the quokka plan", "quokka launch at dawn"))
        assert any(h.tier == "transcript" for h in (await api.search(root, "quokka")).hits)
        leak.unlink()
        leak.symlink_to(secret / "leak.jsonl")
    else:
        (root / "sessions/ci.jsonl").rename(secret / "ci.jsonl")
        (root / "sessions").rmdir()
        (root / "sessions").symlink_to(secret)
    for _ in range(2):  # a fresh index, then the kept one
        found = await api.search(root, "quokka dawn invoices")
        assert not any("quokka" in (h.text or h.snippet) for h in found.hits)
    await api.reindex(root)
    assert not (await api.search(root, "quokka")).hits
    if planted != "directory":  # the layout's own transcript is still searched
        assert any(h.tier == "transcript" for h in (await api.search(root, "invoices")).hits)
    assert _digest(secret / "leak.jsonl") == before
