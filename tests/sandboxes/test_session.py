"""Session lifecycle: start/stop, pre-stop hooks that fail, hang or are cancelled, resume
and delete, state JSON."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

import sandmem.sandboxes as sandboxes_pkg
from sandmem._errors import SandboxStateError, UserError
from sandmem.sandboxes import (
    LocalSnapshotSpec,
    SandboxSession,
    SandboxSessionState,
    UnixLocalSandboxClient,
)
from sandmem.sandboxes._session import DEFAULT_PRE_STOP_HOOK_TIMEOUT


def test_public_api_is_sorted_and_complete() -> None:
    assert sandboxes_pkg.__all__ == sorted(sandboxes_pkg.__all__)
    # dir(): the names imported on first use too (not the helpers of that)
    helpers = {"annotations", "TYPE_CHECKING", "lazy_exports"}
    public = {n for n in dir(sandboxes_pkg) if not n.startswith("_") and n not in helpers}
    assert public == set(sandboxes_pkg.__all__)


async def test_async_with_starts_and_stops(client: UnixLocalSandboxClient) -> None:
    session = await client.create()
    assert not session.is_running
    async with session as started:
        assert started is session
        assert session.is_running
        await session.start()  # idempotent
    assert not session.is_running
    await session.stop()  # idempotent
    await client.delete(session)


async def test_state_round_trips_through_json(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    state = session.state
    assert state.backend == "unix_local"
    assert state.session_id == session.session_id
    assert state.manifest.root == session.root
    assert SandboxSessionState.model_validate_json(state.model_dump_json()) == state
    state.manifest.env["X"] = "changed"  # a copy: the session is unaffected
    assert "X" not in session.state.manifest.env
    await client.delete(session)


async def test_resume_without_snapshot_reattaches_to_the_workspace(
    client: UnixLocalSandboxClient,
) -> None:
    session = await client.create()
    async with session:
        await session.write("kept.txt", b"still here")
    resumed = await client.resume(session.state.model_dump_json())
    assert resumed.root == session.root
    async with resumed:
        assert await resumed.read_bytes("kept.txt") == b"still here"
    await client.delete(resumed)
    with pytest.raises(SandboxStateError, match="no longer exists") as info:
        await client.resume(session.state)
    assert isinstance(info.value, UserError)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: "{not json",
        lambda s: s.replace('"unix_local"', "42"),
        lambda s: s.replace('"session_id":"', '"session_id":"../../'),
        lambda s: s.replace('"workspace_owned":true', '"workspace_owned":true,"extra":1'),
    ],
)
async def test_invalid_state_is_a_clear_state_error(
    client: UnixLocalSandboxClient, mutate: Callable[[str], str]
) -> None:
    session = await client.create()
    text = mutate(session.state.model_dump_json())
    with pytest.raises(SandboxStateError, match="not valid"):
        await client.resume(text)
    await client.delete(session)


async def test_state_of_another_backend_or_type_is_refused(client: UnixLocalSandboxClient) -> None:
    session = await client.create()
    from sandmem.sandboxes import _ownership

    other = session.state.model_copy(update={"backend": "bubblewrap", "proof": None})
    other.proof = _ownership.sign(other.model_dump(mode="json"))  # a genuine state of bwrap
    with pytest.raises(SandboxStateError, match="bubblewrap"):
        await client.resume(other)
    with pytest.raises(SandboxStateError, match="JSON text"):
        await client.resume({"session_id": "x"})  # type: ignore[arg-type]
    await client.delete(session)


async def test_deleted_session_cannot_be_used(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    await session.start()
    await client.delete(session)  # a running session: no hooks, no snapshot
    assert not session.is_running
    assert not snapshot_spec.path_for(session.session_id).exists()
    for attempt in (session.start(), session.read("x"), session.exec("true")):
        with pytest.raises(SandboxStateError, match="deleted"):
            await attempt


# -- pre-stop hooks ------------------------------------------------------------------------------


async def _resumed_files(client: UnixLocalSandboxClient, session: SandboxSession) -> list[str]:
    resumed = await client.resume(session.state)
    names = await resumed.listdir()
    await client.delete(resumed)
    return names


async def test_failing_and_hanging_hooks_do_not_prevent_the_snapshot(
    snapshot_spec: LocalSnapshotSpec,
) -> None:
    assert DEFAULT_PRE_STOP_HOOK_TIMEOUT == 900.0
    client = UnixLocalSandboxClient(pre_stop_hook_timeout=0.2)
    session = await client.create(snapshot=snapshot_spec)
    calls: list[str] = []

    async def failing() -> None:
        calls.append("failing")
        raise RuntimeError("memory generation exploded")

    async def hanging() -> None:
        calls.append("hanging")
        await asyncio.sleep(3600)

    async def self_cancelling() -> None:
        calls.append("self_cancelling")
        raise asyncio.CancelledError

    def not_async() -> None:
        calls.append("not_async")

    async def writer() -> None:
        calls.append("writer")
        await session.write("memory/summary.md", b"written by a hook")

    async with session:
        for hook in (failing, hanging, self_cancelling, not_async, writer):
            session.register_pre_stop_hook(hook)  # type: ignore[arg-type]
        session.register_pre_stop_hook(writer)  # registered once only
    assert calls == ["failing", "hanging", "self_cancelling", "not_async", "writer"]
    assert not session.is_running
    assert snapshot_spec.path_for(session.session_id).exists()
    assert await _resumed_files(client, session) == ["memory"]
    await client.delete(session)


async def test_per_hook_timeout_overrides_the_client_default(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    await session.start()
    session.register_pre_stop_hook(lambda: asyncio.sleep(3600), timeout=0.1)
    await asyncio.wait_for(session.stop(), 5)
    assert snapshot_spec.path_for(session.session_id).exists()
    await client.delete(session)


async def test_cancelled_stop_still_snapshots_then_propagates(
    client: UnixLocalSandboxClient, snapshot_spec: LocalSnapshotSpec
) -> None:
    session = await client.create(snapshot=snapshot_spec)
    await session.start()
    await session.write("work.txt", b"precious")
    entered = asyncio.Event()
    later: list[str] = []

    async def slow_hook() -> None:
        entered.set()
        await asyncio.sleep(3600)

    async def later_hook() -> None:
        later.append("ran")

    session.register_pre_stop_hook(slow_hook)
    session.register_pre_stop_hook(later_hook)
    stopping = asyncio.create_task(session.stop())
    await entered.wait()
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert later == []  # remaining hooks are skipped
    assert not session.is_running
    assert await _resumed_files(client, session) == ["work.txt"]
    await client.delete(session)


async def test_unregister_and_hooks_run_on_every_stop(client: UnixLocalSandboxClient) -> None:
    session = await client.create()
    runs: list[int] = []

    async def hook() -> None:
        runs.append(1)

    session.register_pre_stop_hook(hook)
    async with session:
        pass
    async with session:
        pass
    session.unregister_pre_stop_hook(hook)
    async with session:
        pass
    assert runs == [1, 1]
    await client.delete(session)


def test_client_settings_are_validated() -> None:
    for kwargs in ({"exec_timeout": 0}, {"max_output_bytes": -1}, {"pre_stop_hook_timeout": 0}):
        with pytest.raises(UserError):
            UnixLocalSandboxClient(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(UserError):
        UnixLocalSandboxClient(env={"BAD=NAME": "x"})


def test_snapshot_spec_accepts_a_positional_path(tmp_path: Path) -> None:
    spec = LocalSnapshotSpec(tmp_path)
    assert spec == LocalSnapshotSpec(base_path=tmp_path)
    assert LocalSnapshotSpec.model_validate_json(spec.model_dump_json()) == spec
    assert spec.path_for("abc") == tmp_path / "abc.tar"
