"""One ``sandmem mcp`` process for every project: driven by the ``mcp`` SDK's own client
announcing different roots, it serves each project's memory with the personal memory
attached, labels every hit and summary section with its scope, sends each write where the
rules say, and never writes a read-only scope."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, stdio_client, types
from mcp_client import CLIENT, server_params, text_of

from sandmem.memory.config import MemoryLayoutConfig


def _seed(root: Path, memory: str, summary: str = "") -> None:
    (root / "memories" / "skills").mkdir(parents=True)
    (root / "sessions").mkdir()
    (root / "memories" / "MEMORY.md").write_text(f"# Memory\n\n## Notes\n{memory}\n")
    (root / "memories" / "memory_summary.md").write_text(summary)


def _project(root: Path, memory: str | None = None, summary: str = "") -> Path:
    root.mkdir(parents=True)
    (root / ".git").mkdir()
    if memory is not None:
        _seed(root, memory, summary)
    return root


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a digest of its bytes (links as their target)."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            found[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[rel] = "dir"
    return found


def _notes(root: Path) -> str:
    path = root / "sessions" / "mcp-notes.jsonl"
    return path.read_text() if path.exists() else ""


class Roots:
    """The roots the test client announces; changed between calls."""

    def __init__(self, *paths: Path) -> None:
        self.paths = list(paths)

    async def __call__(self, ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(
            roots=[types.Root(uri=path.as_uri(), name=path.name) for path in self.paths]
        )


@asynccontextmanager
async def scoped_session(
    home: Path,
    args: list[str],
    *,
    roots: Roots | None,
    cwd: Path | None = None,
    heard: Any = None,
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    """A client session on one ``sandmem mcp ARGS`` process with ``SANDMEM_HOME=home``;
    ``roots=None``: a client that offers no roots; ``heard`` gets the notifications."""
    params = server_params(args, env={"SANDMEM_HOME": str(home)})
    params.cwd = str(cwd) if cwd is not None else None
    kwargs: dict[str, Any] = {} if roots is None else {"list_roots_callback": roots}
    if heard is not None:
        kwargs["message_handler"] = heard
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=CLIENT, **kwargs) as session,
    ):
        init = await session.initialize()
        yield session, init


async def _call(session: ClientSession, name: str, args: dict[str, Any]) -> tuple[bool, str]:
    result = await session.call_tool(name, args)
    return bool(result.is_error), text_of(result)


def _patch(line: str, path: str = "MEMORY.md", after: str = "## Notes") -> str:
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n {after}\n+{line}\n*** End Patch\n"


async def test_one_server_serves_each_project_of_the_roots_with_personal_memory(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    alpha = _project(tmp_path / "alpha", "- alpha builds with cargo build --release")
    beta = _project(tmp_path / "beta", "- beta builds with make dist")
    _seed(
        home / "personal",
        "- builds: the person wants the build command explained first",
        "The person prefers short answers and explained build commands.",
    )
    loose = tmp_path / "downloads"
    loose.mkdir()
    roots = Roots(alpha)
    args = ["--allow-generate", "--engine", "extractive"]
    async with scoped_session(home, args, roots=roots, cwd=tmp_path) as (session, init):
        # the instructions carry the personal summary, labelled, and the precedence rule
        assert init.instructions is not None
        assert "[personal] personal memory" in init.instructions
        assert "short answers" in init.instructions
        assert "project's memory wins" in init.instructions

        errored, hits = await _call(session, "memory_search", {"query": "builds"})
        assert not errored
        lines = hits.splitlines()
        assert lines[0].startswith("[project] memories/MEMORY.md:") and "cargo" in lines[0]
        assert any(line.startswith("[personal] ") and "explained" in line for line in lines)
        assert "make dist" not in hits  # beta is not attached while the root is alpha

        errored, text = await _call(
            session, "memory_remember", {"text": "alpha's CI runs on nightly", "kind": "fact"}
        )
        assert not errored and text.startswith("[project] ")
        errored, text = await _call(
            session, "memory_remember", {"text": "wants tabs, not spaces", "kind": "preference"}
        )
        assert not errored and text.startswith("[personal] ")
        assert "nightly" in _notes(alpha) and "nightly" not in _notes(home / "personal")
        assert "tabs" in _notes(home / "personal") and "tabs" not in _notes(alpha)
        # phase two consolidates each scope from its own conversations only
        errored, text = await _call(session, "memory_generate", {})
        assert not errored and text.startswith("[project] "), text
        errored, text = await _call(session, "memory_generate", {"scope": "personal"})
        assert not errored and text.startswith("[personal] "), text
        alpha_memory = (alpha / "memories" / "MEMORY.md").read_text()
        personal_memory = (home / "personal" / "memories" / "MEMORY.md").read_text()
        assert "nightly" in alpha_memory and "tabs" not in alpha_memory
        assert "tabs" in personal_memory and "nightly" not in personal_memory
        errored, hits = await _call(session, "memory_search", {"query": "tabs nightly"})
        assert any(h.startswith("[personal] ") and "tabs" in h for h in hits.splitlines())
        assert any(h.startswith("[project] ") and "nightly" in h for h in hits.splitlines())

        # the same process, another root: another project, the same personal memory
        roots.paths = [beta]
        errored, hits = await _call(session, "memory_search", {"query": "builds"})
        assert "make dist" in hits and "cargo" not in hits
        assert any(line.startswith("[personal] ") for line in hits.splitlines())
        errored, text = await _call(session, "memory_update", {"patch": _patch("- beta: ok")})
        assert not errored and text.startswith("[project] ")
        assert "- beta: ok" in (beta / "memories" / "MEMORY.md").read_text()
        assert "- beta: ok" not in (alpha / "memories" / "MEMORY.md").read_text()
        # the caller names the scope: a fact about the person's habits goes to personal
        errored, text = await _call(
            session,
            "memory_update",
            {"patch": _patch("- reviews on Fridays", after="# Memory"), "scope": "personal"},
        )
        assert not errored, text
        assert "Fridays" in (home / "personal" / "memories" / "MEMORY.md").read_text()
        assert "Fridays" not in (beta / "memories" / "MEMORY.md").read_text()

        # resources of both scopes, labelled by URI
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {"memory://project/MEMORY.md", "memory://personal/MEMORY.md"} <= uris
        read = await session.read_resource("memory://project/MEMORY.md")
        assert "make dist" in read.contents[0].text  # type: ignore[union-attr]
        errored, text = await _call(session, "memory_read", {"path": "personal:MEMORY.md"})
        assert not errored and text.startswith("[personal] ") and "Fridays" in text

        # a directory that is not a project: no project memory, and none is created
        roots.paths = [loose]
        errored, text = await _call(session, "memory_remember", {"text": "loose fact"})
        assert errored and "no project memory" in text
        assert list(loose.iterdir()) == []
        errored, text = await _call(
            session, "memory_remember", {"text": "likes dark mode", "kind": "preference"}
        )
        assert not errored and "dark mode" in _notes(home / "personal")
        errored, status = await _call(session, "memory_status", {})
        assert not errored and "[personal]" in status and "[project]" not in status

        # a project without memory yet gets it on its first write (it has a marker)
        fresh = _project(tmp_path / "gamma")
        roots.paths = [loose, fresh]  # the first root that is a project is used
        errored, _ = await _call(session, "memory_remember", {"text": "gamma uses uv"})
        assert not errored and "gamma uses uv" in _notes(fresh)
    assert "gamma" not in _notes(alpha) + _notes(beta)


async def test_without_roots_the_servers_working_directory_is_the_project(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    alpha = _project(tmp_path / "alpha", "- alpha deploys with fly deploy", "Alpha: fly.io app.")
    (alpha / "src").mkdir()
    async with scoped_session(home, [], roots=None, cwd=alpha / "src") as (session, init):
        # the instructions carry the summary of the project the server started in
        assert init.instructions is not None
        assert "[project] project memory" in init.instructions
        assert "Alpha: fly.io app." in init.instructions
        errored, hits = await _call(session, "memory_search", {"query": "deploys"})
        assert not errored and hits.startswith("[project] ") and "fly deploy" in hits
        errored, _ = await _call(session, "memory_remember", {"text": "deploys need a tag"})
        assert not errored and "a tag" in _notes(alpha)
    # the personal scope was created, empty, in SANDMEM_HOME, readable by the user alone
    assert (home / "personal" / "memories" / "MEMORY.md").exists()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


async def test_a_fixed_workspace_with_scopes_attaches_personal_memory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _seed(home / "personal", "- the person reads diffs before commits")
    work = tmp_path / "work"  # no marker: the workspace is the project because it is named
    _seed(work, "- work: the ledger rounds half-even")
    args = ["--workspace", str(work), "--scopes"]
    async with scoped_session(home, args, roots=Roots(tmp_path), cwd=tmp_path) as (session, _):
        errored, hits = await _call(session, "memory_search", {"query": "diffs ledger"})
        assert not errored
        assert any(h.startswith("[project] ") and "ledger" in h for h in hits.splitlines())
        assert any(h.startswith("[personal] ") and "diffs" in h for h in hits.splitlines())
        errored, _ = await _call(session, "memory_remember", {"text": "ledger uses cents"})
        assert not errored and "cents" in _notes(work)
    # plain --workspace stays one layout: no scope argument, no personal memory
    async with scoped_session(home, ["--workspace", str(work)], roots=None) as (session, _):
        errored, hits = await _call(session, "memory_search", {"query": "diffs ledger"})
        assert "diffs" not in hits and not hits.startswith("[")
        errored, text = await _call(session, "memory_search", {"query": "x", "scope": "personal"})
        assert errored and "scope" in text


async def test_a_read_only_scope_is_never_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    team = tmp_path / "team"
    _seed(team, "- team: deploys go through the release train", "Team summary: release train.")
    alpha = _project(tmp_path / "alpha", "- alpha facts")
    shared = alpha / "vendor" / "shared"
    _seed(shared, "- shared: use the staging cluster")
    mirror = _project(tmp_path / "mirror", "- mirror facts")
    home.mkdir()
    (home / "config.toml").write_text(
        "[scopes.named.team]\n"
        f'path = "{team}"\nmode = "read-only"\n'
        "[scopes.named.mirror]\n"
        f'path = "{mirror}"\nmode = "read-only"\n'
    )
    # a cloned repository asks for read-write on a memory it holds: attached read-only
    (alpha / "sandmem.toml").write_text(
        '[scopes.named.shared]\npath = "vendor/shared"\nmode = "read-write"\n'
    )
    before = {"team": _tree(team), "shared": _tree(shared), "mirror": _tree(mirror)}
    roots = Roots(alpha)
    args = ["--allow-generate", "--allow-forget", "--engine", "extractive"]
    async with scoped_session(home, args, roots=roots, cwd=tmp_path) as (session, init):
        assert init.instructions is not None and "release train" in init.instructions
        errored, hits = await _call(session, "memory_search", {"query": "release staging"})
        assert "[team] " in hits and "[shared] " in hits
        errored, text = await _call(session, "memory_read", {"path": "team:MEMORY.md"})
        assert not errored and "release train" in text

        attempts: list[tuple[str, dict[str, Any]]] = [
            ("memory_remember", {"text": "x", "scope": "team"}),
            ("memory_remember", {"text": "x", "kind": "preference", "scope": "team"}),
            ("memory_remember", {"text": "x", "scope": "shared"}),
            ("memory_update", {"patch": _patch("- x"), "scope": "team"}),
            ("memory_update", {"patch": _patch("- x"), "scope": "shared"}),
            ("memory_update", {"patch": _patch("- x", "team:MEMORY.md")}),
            ("memory_update", {"patch": _patch("- x", f"{team}/memories/MEMORY.md")}),
            ("memory_update", {"patch": _patch("- x", "../team/memories/MEMORY.md")}),
            ("memory_update", {"patch": _patch("- x", "vendor/shared/memories/MEMORY.md")}),
            ("memory_update", {"patch": _patch("- x", "shared:MEMORY.md"), "scope": "shared"}),
            ("memory_generate", {"scope": "team"}),
            ("memory_forget", {"rollout_id": "mcp-notes", "scope": "team"}),
            ("memory_remember", {"text": "x", "scope": "TEAM"}),
            ("memory_remember", {"text": "x", "scope": "team/../alpha"}),
        ]
        for name, arguments in attempts:
            errored, text = await _call(session, name, arguments)
            assert errored, (name, arguments, text)
        # the project is a read-only scope's directory: it is attached read-only
        roots.paths = [mirror]
        errored, text = await _call(session, "memory_remember", {"text": "mirror fact"})
        assert errored and "read-only" in text
        errored, text = await _call(session, "memory_update", {"patch": _patch("- x")})
        assert errored and "read-only" in text
        errored, text = await _call(session, "memory_generate", {})
        assert errored
        # other scopes still work
        errored, _ = await _call(session, "memory_remember", {"text": "ok", "scope": "personal"})
        assert not errored
    after = {"team": _tree(team), "shared": _tree(shared), "mirror": _tree(mirror)}
    assert after == before


async def test_roots_that_are_not_local_directories_attach_no_project(tmp_path: Path) -> None:
    home = tmp_path / "home"

    class Odd(Roots):
        async def __call__(self, ctx: Any) -> types.ListRootsResult:
            uris = [
                "file://otherhost/srv/repo",
                "file:///nonexistent/dir",
                "file:///etc/../",
                "file:///%00/x",
            ]
            return types.ListRootsResult(roots=[types.Root(uri=u) for u in uris])

    async with scoped_session(home, ["--create"], roots=Odd(), cwd=tmp_path) as (session, _):
        errored, text = await _call(session, "memory_remember", {"text": "fact"})
        # with --create a root that is a directory may get memory, but "/" never does
        assert errored and "no project memory" in text, text
    assert not any((Path("/") / d).exists() for d in ("memories", "sessions"))
    assert sorted(os.listdir(tmp_path)) == ["home"]  # not the cwd either


def test_scoped_tool_schemas_offer_the_scope() -> None:
    from sandmem.memory.mcp._scoped import SCOPED_ARGS

    for name, model in SCOPED_ARGS.items():
        schema = model.model_json_schema()
        assert "scope" in schema["properties"], name
        assert "scope" not in schema.get("required", []), name
    assert json.dumps(SCOPED_ARGS["memory_remember"].model_json_schema())


class _Session:
    """A stand-in for the SDK's server session: announces roots, answers ``roots/list``
    with ``answer`` (or never, or with an error)."""

    def __init__(self, answer: list[str] | None, *, hang: bool = False, fail: bool = False):
        caps = types.ClientCapabilities(roots=types.RootsCapability())
        self.client_params = types.InitializeRequestParams(
            protocol_version="2025-06-18", capabilities=caps, client_info=CLIENT
        )
        self.answer, self.hang, self.fail, self.asked = answer, hang, fail, 0

    async def list_roots(self) -> types.ListRootsResult:
        import anyio
        from mcp.shared.exceptions import MCPError

        self.asked += 1
        if self.hang:
            await anyio.sleep(60)
        if self.fail:
            raise MCPError(code=-32601, message="List roots not supported")
        return types.ListRootsResult(roots=[types.Root(uri=u) for u in self.answer or []])


async def test_a_client_that_hangs_or_fails_on_roots_gets_the_working_directory(
    tmp_path: Path,
) -> None:
    import weakref

    from sandmem.memory.mcp._scoped import ScopeResolver, client_roots
    from sandmem.memory.scopes import ScopeSettings

    repo = _project(tmp_path / "repo")
    other = _project(tmp_path / "other")
    resolver = ScopeResolver(
        project=None,
        use_roots=True,
        cwd=repo,
        settings=ScopeSettings(),
        home=tmp_path / "home",
        layout=MemoryLayoutConfig(),
    )
    resolver.roots_wait_s = 0.2
    good = _Session([other.as_uri()])
    assert await resolver.project(good) == other.resolve()
    # sandmem's own data is never a project, whatever the client announces
    (tmp_path / "home" / "personal" / "memories").mkdir(parents=True)
    for inside in (tmp_path / "home" / "personal", tmp_path / "home"):
        assert await resolver.project(_Session([inside.as_uri()])) is None
    for bad in (_Session(None, hang=True), _Session(None, fail=True)):
        assert await resolver.project(bad) == repo.resolve()
        assert await resolver.project(bad) == repo.resolve()
        assert bad.asked == 1  # not asked again
    silent: weakref.WeakSet[Any] = weakref.WeakSet()
    no_caps = _Session([other.as_uri()])
    no_caps.client_params.capabilities.roots = None
    assert await client_roots(no_caps, silent) is None and no_caps.asked == 0


def test_root_uris_and_scope_prefixes() -> None:
    from sandmem.memory.mcp._scoped import root_path, split_scope

    assert root_path("file:///home/me/repo") == "/home/me/repo"
    assert root_path("file://localhost/home/me/a%20b") == "/home/me/a b"
    assert root_path("file:///home/me/../etc") == "/home/etc"
    for bad in ("file://host/x", "https://x/y", "file:relative", "file:///a%00b", "x"):
        assert root_path(bad) is None, bad
    assert split_scope("personal:MEMORY.md", None) == ("personal", "MEMORY.md")
    assert split_scope("memory://MEMORY.md", "team") == ("team", "memory://MEMORY.md")
    assert split_scope("memories/MEMORY.md", None) == (None, "memories/MEMORY.md")
    assert split_scope("a/b:c", None) == (None, "a/b:c")


async def test_one_http_server_serves_two_clients_with_their_own_roots(tmp_path: Path) -> None:
    """Two clients at once on one ``sandmem mcp --http`` process, each announcing its own
    project as its root: each sees its project and the shared personal memory."""
    import socket
    import subprocess
    import sys

    import anyio
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    home = tmp_path / "home"
    alpha = _project(tmp_path / "alpha", "- alpha ships with goreleaser")
    beta = _project(tmp_path / "beta", "- beta ships with twine")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    token = "t" * 40
    argv = [str(Path(sys.executable).with_name("sandmem")), "mcp", "--http", f"127.0.0.1:{port}"]
    argv += ["--token-env", "SCOPES_TOKEN"]
    env = {**os.environ, "SANDMEM_HOME": str(home), "SCOPES_TOKEN": token, "OPENAI_API_KEY": ""}
    proc = await anyio.to_thread.run_sync(
        lambda: subprocess.Popen(argv, env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
    )

    async def ready() -> None:
        with anyio.fail_after(30):
            while True:
                assert proc.poll() is None
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.05)
                    continue
                await stream.aclose()
                return

    started: list[str] = []

    @asynccontextmanager
    async def client(root: Path) -> AsyncIterator[ClientSession]:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with (
            http,
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w),
            ClientSession(r, w, client_info=CLIENT, list_roots_callback=Roots(root)) as session,
        ):
            init = await session.initialize()
            started.append(init.instructions or "")
            yield session

    try:
        await ready()
        async with client(alpha) as a, client(beta) as b:
            for session, mine, theirs in ((a, "goreleaser", "twine"), (b, "twine", "goreleaser")):
                errored, hits = await _call(session, "memory_search", {"query": "ships"})
                assert not errored and mine in hits and theirs not in hits
                assert hits.startswith("[project] ")
            await _call(a, "memory_remember", {"text": "likes emoji", "kind": "preference"})
            errored, _ = await _call(b, "memory_remember", {"text": "beta pins twine 5"})
            assert not errored
            errored, status = await _call(b, "memory_list", {"scope": "personal"})
            assert not errored and "mcp-notes" in status  # a's note, seen from b
        assert "twine 5" in _notes(beta) and "twine 5" not in _notes(alpha)
        assert "emoji" in _notes(home / "personal")
        # the personal summary changes: a session that starts later gets the instructions as
        # they are now (one already started keeps its handshake's)
        assert not any("emoji in every answer" in text for text in started)
        summary = home / "personal" / "memories" / "memory_summary.md"
        summary.write_text("The person wants emoji in every answer.\n")
        async with client(alpha) as a:
            await _call(a, "memory_remember", {"text": "x", "kind": "preference"})  # a look
        async with client(beta) as b:
            assert "emoji in every answer" in started[-1]
            assert "[personal] personal memory" in started[-1]
    finally:
        proc.terminate()
        await anyio.to_thread.run_sync(proc.wait, 10)


async def test_subscribers_hear_changes_of_every_scope(tmp_path: Path) -> None:
    """A change made through the server in the personal scope and in the project of a root
    is announced on the scope's own URI (``memory://<scope>/<file>``)."""
    import warnings

    import anyio
    import mcp

    home = tmp_path / "home"
    _seed(home / "personal", "- personal note")
    alpha = _project(tmp_path / "alpha", "- alpha note")
    heard: list[str] = []
    both = anyio.Event()

    async def on_message(message: Any) -> None:
        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            heard.append(str(root.params.uri))
            if {"memory://personal/MEMORY.md", "memory://project/MEMORY.md"} <= set(heard):
                both.set()

    params = server_params([], env={"SANDMEM_HOME": str(home)})
    params.cwd = str(tmp_path)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(
            read,
            write,
            client_info=CLIENT,
            list_roots_callback=Roots(alpha),
            message_handler=on_message,
        ) as session,
    ):
        await session.initialize()
        uris = {str(r.uri) for r in (await session.list_resources()).resources}
        assert {"memory://personal/MEMORY.md", "memory://project/MEMORY.md"} <= uris
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", mcp.MCPDeprecationWarning)
            await session.subscribe_resource("memory://personal/MEMORY.md")
            await session.subscribe_resource("memory://project/MEMORY.md")
        for scope, line in (("personal", "- personal: dark mode"), ("project", "- alpha: ok")):
            patch = _patch(line, after="## Notes")
            errored, text = await _call(session, "memory_update", {"patch": patch, "scope": scope})
            assert not errored, text
        with anyio.fail_after(10):
            await both.wait()
        bad = await session.call_tool("memory_read", {"path": "nobody:MEMORY.md"})
        assert bad.is_error and "no scope 'nobody'" in text_of(bad)
        with pytest.raises(mcp.MCPError):
            await session.read_resource("memory://nobody/MEMORY.md")
        with pytest.raises(mcp.MCPError):
            await session.read_resource("memory://personal/../alpha/memories/MEMORY.md")


class Heard:
    """The notifications a test client hears: resources updated (by URI) and list changes."""

    def __init__(self) -> None:
        import anyio

        self.updated: list[str] = []
        self.lists = 0
        self._changed = anyio.Event()

    async def __call__(self, message: Any) -> None:
        import anyio

        root = getattr(message, "root", message)
        if isinstance(root, types.ResourceUpdatedNotification):
            self.updated.append(str(root.params.uri))
        elif isinstance(root, types.ResourceListChangedNotification):
            self.lists += 1
        else:
            return
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, uri: str, seconds: float = 10.0) -> None:
        import anyio

        with anyio.fail_after(seconds):
            while uri not in self.updated:
                await self._changed.wait()


async def _subscribe(session: ClientSession, *uris: str) -> None:
    import warnings

    import mcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mcp.MCPDeprecationWarning)
        for uri in uris:
            await session.subscribe_resource(uri)


async def _roots_changed(session: ClientSession) -> None:
    import warnings

    import mcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mcp.MCPDeprecationWarning)  # served before 2026-07-28
        await session.send_roots_list_changed()


async def _instructions(session: ClientSession) -> str:
    read = await session.read_resource("memory://instructions.md")
    return read.contents[0].text  # type: ignore[union-attr]


async def test_the_instructions_for_the_requests_roots_are_a_resource_and_a_prompt(
    tmp_path: Path,
) -> None:
    """The handshake's instructions are made before any roots are known (the server started
    outside any project); the resource ``memory://instructions.md`` and the prompt ``memory``
    are the same text made for the roots of each request, and a client that announces new
    roots is told the resource list and the instructions changed."""
    home = tmp_path / "home"
    _seed(home / "personal", "- person", "The person prefers short answers.")
    alpha = _project(tmp_path / "alpha", "- alpha", "Alpha builds with cargo build --release.")
    beta = _project(tmp_path / "beta", "- beta", "Beta builds with make dist.")
    roots = Roots(alpha)
    heard = Heard()
    async with scoped_session(home, [], roots=roots, cwd=tmp_path, heard=heard) as (
        session,
        init,
    ):
        assert init.instructions is not None and "short answers" in init.instructions
        assert "cargo" not in init.instructions and "make dist" not in init.instructions
        assert init.capabilities.prompts is not None

        uris = [str(r.uri) for r in (await session.list_resources()).resources]
        assert uris[0] == "memory://instructions.md"
        text = await _instructions(session)
        assert "[project] project memory" in text and "cargo build" in text
        assert "short answers" in text and "make dist" not in text
        assert text.index("[project]") < text.index("[personal]")
        assert "project's memory wins" in text
        prompts = (await session.list_prompts()).prompts
        assert [p.name for p in prompts] == ["memory"]
        got = await session.get_prompt("memory")
        assert got.messages[0].content.text == text  # type: ignore[union-attr]
        with pytest.raises(Exception, match="no prompt"):
            await session.get_prompt("other")

        await _subscribe(session, "memory://instructions.md")
        lists = heard.lists
        roots.paths = [beta]
        await _roots_changed(session)
        await heard.until("memory://instructions.md")
        assert heard.lists > lists  # it listed the resources: the list follows its roots
        text = await _instructions(session)
        assert "make dist" in text and "cargo" not in text and "short answers" in text
        got = await session.get_prompt("memory")
        assert "make dist" in got.messages[0].content.text  # type: ignore[union-attr]

        # a directory that is no project: the personal memory alone
        roots.paths = [tmp_path / "home"]
        text = await _instructions(session)
        assert "short answers" in text and "[project] project memory" not in text
        assert "make dist" not in text


async def test_a_projects_change_is_announced_to_the_sessions_in_that_project(
    tmp_path: Path,
) -> None:
    """Two projects' ``memory://project/memory_summary.md`` are watched apart: a change in
    the project a session is not in now is not announced to it; one in its project is, with
    the instructions resource (it holds the summary)."""
    home = tmp_path / "home"
    _seed(home / "personal", "- person")
    alpha = _project(tmp_path / "alpha", "- alpha", "Alpha summary one.")
    beta = _project(tmp_path / "beta", "- beta", "Beta summary one.")
    roots = Roots(alpha)
    heard = Heard()
    summary = "memory://project/memory_summary.md"
    async with scoped_session(home, [], roots=roots, cwd=tmp_path, heard=heard) as (session, _):
        await _subscribe(session, summary, "memory://instructions.md")
        await _call(session, "memory_status", {})  # alpha is watched from now on
        roots.paths = [beta]
        await _call(session, "memory_status", {})  # beta too; the session is in beta now
        await _subscribe(session, summary)  # again, on another request: still one subscriber
        await _call(session, "memory_remember", {"text": "settle", "scope": "personal"})
        heard.updated.clear()
        (alpha / "memories" / "memory_summary.md").write_text("Alpha summary two, longer.")
        # a write through the server looks for changes before it answers
        await _call(session, "memory_remember", {"text": "one", "scope": "personal"})
        assert summary not in heard.updated and "memory://instructions.md" not in heard.updated
        (beta / "memories" / "memory_summary.md").write_text("Beta summary two, longer.")
        await _call(session, "memory_remember", {"text": "two", "scope": "personal"})
        await heard.until(summary)
        await heard.until("memory://instructions.md")
        read = await session.read_resource(summary)
        assert read.contents[0].text == "Beta summary two, longer."  # type: ignore[union-attr]
        # back in alpha: its change is announced when it changes again
        roots.paths = [alpha]
        await _call(session, "memory_status", {})
        heard.updated.clear()
        (alpha / "memories" / "memory_summary.md").write_text("Alpha summary three, longest.")
        await _call(session, "memory_remember", {"text": "three", "scope": "personal"})
        await heard.until(summary)
        assert heard.updated.count(summary) == 1


async def test_a_client_whose_roots_fail_is_asked_once_over_many_requests(tmp_path: Path) -> None:
    """The SDK makes a ``ServerSession`` per request: a client whose ``roots/list`` failed is
    remembered by its connection, so its next requests go straight to the server's working
    directory instead of asking (and, for a client that hangs, waiting) again."""
    home = tmp_path / "home"
    repo = _project(tmp_path / "repo", "- repo builds with make")
    asked: list[int] = []

    async def failing(ctx: Any) -> types.ErrorData:
        asked.append(1)
        return types.ErrorData(code=types.INTERNAL_ERROR, message="no roots here")

    params = server_params([], env={"SANDMEM_HOME": str(home)})
    params.cwd = str(repo)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, client_info=CLIENT, list_roots_callback=failing) as session,
    ):
        await session.initialize()
        for _ in range(3):
            errored, hits = await _call(session, "memory_search", {"query": "builds"})
            assert not errored and "[project] " in hits and "make" in hits
        await session.list_resources()
    assert len(asked) == 1
