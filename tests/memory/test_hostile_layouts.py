"""A property-based harness: hypothesis plants hostile entries in a memory layout — links
(relative and absolute, to files and directories outside), FIFOs, sockets, entries of the
wrong kind, and bad records (garbage, truncated JSON, records naming paths outside) at every
name sandmem reads — then runs every MCP tool (``MCP_CASES``) and every ``sandmem memory``
command (``CLI_CASES``; each calls the public memory API function of its name) against it.
None may follow a link out (the directory outside and the workspace's own files are
unchanged), hang, or raise anything but a ``SandmemError`` (the one line the CLI prints).
Both lists are checked against the click tree and ``TOOL_SPECS``: a new command or tool fails
``test_the_harness_covers_every_memory_command_and_mcp_tool`` until it is added here."""

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

SUMMARY_PATCH = PATCH.replace("MEMORY.md", "memory_summary.md")
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
        await record(session, "deploy-notes", config=None, read=read, patch=SUMMARY_PATCH)
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
    "dev-link",  # to /dev/zero: endless if read
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
    elif kind == "dev-link":
        target.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        here = os.getcwd()
        os.chdir(target.parent)  # a relative name: AF_UNIX paths are short (108 bytes)
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.bind(target.name)
        finally:
            os.chdir(here)
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


def _tools(root: Path, *, review: bool = False) -> MemoryTools:
    config = CONFIG.model_copy(update={"review": review})
    options = ServerOptions(
        str(root), MemoryLayoutConfig(), config, allow_forget=True, allow_generate=True
    )
    return MemoryTools(options)


END = "*** End Patch\n"
#: every MCP tool (``TOOL_SPECS``), with the arguments the harness calls it with; a tool
#: missing here fails ``test_the_harness_covers_every_memory_command_and_mcp_tool``
MCP_CASES: dict[str, list[dict[str, str]]] = {
    "memory_search": [{"query": "invoice"}, {"query": "deploy " * 40}],
    "memory_read": [
        {"path": "MEMORY.md"},
        {"path": "memory_summary.md"},
        {"path": "skills/deploy/SKILL.md"},
        {"path": "rollout_summaries/{summary}"},
        {"path": "memories/MEMORY.md"},
    ],
    "memory_list": [{}],
    "memory_status": [{}],
    "memory_remember": [{"text": "a note from the harness"}],
    "memory_update": [
        {"patch": "*** Begin Patch\n*** Add File: memories/skills/h/SKILL.md\n+# h\n" + END},
        {"patch": "*** Begin Patch\n*** Update File: MEMORY.md\n@@\n+- harness\n" + END},
    ],
    "memory_forget": [{"rollout_id": "mcp-notes"}],
    "memory_generate": [{}],
}


def _operations(root: Path) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    tools = _tools(root)
    reviewing = _tools(root, review=True)
    caller = Caller(client="harness")

    summaries = root / "memories/rollout_summaries"
    try:
        summary = min(p.name for p in summaries.iterdir())
    except (OSError, ValueError):
        summary = "new.md"

    def tool(server: MemoryTools, name: str, args: dict[str, str]) -> Callable[[], Awaitable[Any]]:
        args = {k: v.replace("{summary}", summary) for k, v in args.items()}
        return lambda: server.call(name, args, caller)

    mcp = [
        (f"{name} {n}", tool(tools, name, args))
        for name, cases in MCP_CASES.items()
        for n, args in enumerate(cases)
        if name not in ("memory_forget", "memory_generate")
    ]
    mcp.append(
        ("memory_update review", tool(reviewing, "memory_update", MCP_CASES["memory_update"][1]))
    )
    return [
        ("run live_update=True", lambda: _agent_run(root, MemoryReadConfig(live_update=True))),
        ("run review", lambda: _agent_run(root, MemoryReadConfig(live_update="propose"))),
        *mcp,
        *_resource_operations(root),
        ("memory_generate", tool(tools, "memory_generate", {})),
        ("memory_forget", tool(tools, "memory_forget", MCP_CASES["memory_forget"][0])),
    ]


async def _agent_run(root: Path, read: MemoryReadConfig) -> None:
    """A run whose agent looks at memory with its shell and edits it with ``apply_patch``: its
    start and end (the version, or review mode's proposal and put-back) read the whole
    hostile layout."""
    from memory_doubles import scripted_agent

    from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
    from sandmem.capabilities import Filesystem, Shell
    from sandmem.capabilities.memory import Memory
    from sandmem.testing import tool_call

    cmd = "ls -R memories >/dev/null"  # (a shell writing through a planted link is its own)
    agent = SandboxAgent(
        name="dev",
        model=scripted_agent(
            lambda r: [tool_call("exec_command", {"cmd": cmd})],
            lambda r: [tool_call("apply_patch", {"patch": PATCH})],
            lambda r: "done",
        ),
        capabilities=[Memory(generate=None, read=read), Filesystem(), Shell()],
    )
    async with await open_session(root) as session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        await Runner.run(agent, "edit memory", run_config=config, conversation_id="harness")


def _resource_operations(root: Path) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """The MCP server's resources: every one it lists read through ``resources/read``'s
    handler, and a URI naming a file outside refused (needs the ``mcp`` extra)."""
    import importlib.util
    from types import SimpleNamespace

    if importlib.util.find_spec("mcp") is None:
        return []
    from mcp.shared.exceptions import MCPError

    from sandmem.memory.mcp._server import MemoryMCPServer

    server = MemoryMCPServer(_tools(root).options)

    async def read_all() -> None:
        for path in await server.resource_paths():
            await server._read_resource(None, SimpleNamespace(uri=server.uri(path)))

    async def read_outside() -> None:
        for uri in ("memory://../../src/app.py", "memory:///etc/passwd", "memory://.history"):
            try:
                await server._read_resource(None, SimpleNamespace(uri=uri))
            except MCPError:
                continue  # refused: the protocol's one-line error
            raise AssertionError(f"{uri} was served")

    return [("resources", read_all), ("resources outside", read_outside)]


def _one_line_errors() -> tuple[type[Exception], ...]:
    """What an operation may raise: a ``SandmemError`` (the CLI's one line), and for an MCP
    resource the protocol's error (the client's one line)."""
    try:
        from mcp.shared.exceptions import MCPError
    except ImportError:
        return (SandmemError,)
    return (SandmemError, MCPError)


_ONE_LINE_ERRORS = _one_line_errors()


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
        except _ONE_LINE_ERRORS as exc:
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


#: every ``sandmem memory`` command (the click tree), with the arguments each is run with
#: against each hostile layout, read-only ones first; ``{proposal}`` is a pending proposal's
#: id (``{other}`` another's), ``{source}`` / ``{db}`` transcripts outside the workspace,
#: ``{out}`` a file outside it.
#: A command missing here fails ``test_the_harness_covers_every_memory_command_and_mcp_tool``.
CLI_CASES: dict[str, list[list[str]]] = {
    "memory status": [[], ["--json"]],
    "memory list": [[], ["--json"]],
    "memory tree": [[]],
    "memory search": [["invoice"], ["deploy", "--json"]],
    "memory show": [
        [],
        ["memory"],
        ["invoice-fix"],
        ["invoice-fix", "--raw"],
        ["invoice-fix", "--rollout"],
    ],
    "memory log": [[], ["--json"]],
    "memory diff": [[], ["1", "2"]],
    "memory inbox": [[], ["--json"]],
    "memory view": [["-o", "{out}"]],
    "memory reindex": [[]],
    "memory approve": [["{proposal}"]],
    "memory dismiss": [["{other}"]],
    "memory restore": [["1"]],
    "memory ingest": [["{source}"], ["{db}", "--generate", "--engine", "extractive"]],
    "memory scopes": [[], ["--json"]],
    "memory git-setup": [["--no-git-config"]],
    "memory merge-driver": [["{out}", "{out}", "{out}"]],
    "memory generate": [["--engine", "extractive"], ["--engine", "extractive", "--review"]],
    "memory redact-history": [["blue-7"], ["--secret"]],
    "memory forget": [
        ["invoice-fix", "--dry-run", "--engine", "extractive"],
        ["invoice-fix", "--yes", "--engine", "extractive"],
    ],
}


def _memory_commands() -> list[str]:
    """Every leaf command under ``sandmem memory``, as ``memory <name> [<sub>...]``."""
    import click

    from sandmem.cli import cli

    found: list[str] = []

    def walk(command: click.Command, path: list[str], ctx: click.Context) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))
        else:
            found.append(" ".join(path))

    memory = cli.get_command(click.Context(cli), "memory")
    assert memory is not None
    walk(memory, ["memory"], click.Context(memory))
    return found


def _sources(base: Path) -> dict[str, str]:
    """Transcripts outside the workspace for ``ingest``, and where ``view`` writes."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from ingest_fixtures import write_agents_db, write_input_list

    source = base / "transcripts"
    source.mkdir(exist_ok=True)
    if not (source / "items.json").exists():
        write_input_list(source / "items.json")
        write_agents_db(source / "agents.sqlite")
    return {
        "source": str(source / "items.json"),
        "db": str(source / "agents.sqlite"),
        "out": str(base / "view.html"),
    }


def _proposals(root: Path) -> tuple[str, str]:
    """Two pending proposals' ids (one to approve, one to dismiss), as the files name them."""
    directory = root / "memories/.history/proposals"
    try:
        names = sorted(p.stem for p in directory.glob("*.json"))
    except OSError:
        names = []
    names = names or ["p00000000"]
    return names[0], names[-1]


def _invoke(runner: Any, cli: Any, argv: list[str]) -> Any:
    """``runner.invoke`` in a thread, ``None`` when it does not end within ``OP_TIMEOUT_S``."""
    import threading

    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(runner.invoke(cli, argv)), daemon=True)
    worker.start()
    worker.join(OP_TIMEOUT_S)
    return done[0] if done else None


def _run_commands(
    root: Path, base: Path, proposals: tuple[str, str], worked: list[str] | None = None
) -> dict[str, str]:
    """Each command either works or fails with a short message and no traceback (the ones
    that worked are put in ``worked``)."""
    from click.testing import CliRunner

    from sandmem.cli import cli

    values = {**_sources(base), "proposal": proposals[0], "other": proposals[1]}
    broken: dict[str, str] = {}
    for command, cases in CLI_CASES.items():
        for args in cases:
            argv = [*command.split(), *(a.format(**values) for a in args)]
            name = " ".join(argv)
            result = _invoke(CliRunner(), cli, [*argv, "--workspace", str(root)])
            if result is None:
                broken[name] = "hung"
                continue
            if result.exit_code == 0:
                if worked is not None:
                    worked.append(name)
                continue
            if not isinstance(result.exception, SystemExit):
                broken[name] = f"{type(result.exception).__name__}: {result.exception}"
            elif "Traceback" in result.output or not result.output.strip():
                broken[name] = result.output[-300:] or "failed without a message"
    return broken


def test_the_harness_covers_every_memory_command_and_mcp_tool() -> None:
    """A new ``sandmem memory`` command or MCP tool fails here until the harness runs it."""
    from sandmem.memory.mcp._tools import TOOL_SPECS

    assert sorted(_memory_commands()) == sorted(CLI_CASES)
    assert sorted(TOOL_SPECS) == sorted(MCP_CASES)
    assert all(CLI_CASES.values()) and all(MCP_CASES.values())
    offered = _tools(Path(".")).options.offered()  # a server that allows every tool
    assert sorted(spec.name for spec in offered) == sorted(MCP_CASES)


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
    fresh = tmp_path_factory.mktemp("clean-cli") / "ws"
    shutil.copytree(template, fresh, symlinks=True)
    ran: list[str] = []
    assert _run_commands(fresh, fresh.parent, _proposals(fresh), ran) == {}
    every = [" ".join([*c.split(), *a]) for c, cases in CLI_CASES.items() for a in cases]
    assert len(ran) == len(every), sorted(set(every) - {" ".join(r.split()) for r in ran})


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
        proposals = _proposals(root)
        broken = asyncio.run(_run_all(root))
        broken.update(_run_commands(root, base, proposals))
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
        max_examples=3,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )(test)()
