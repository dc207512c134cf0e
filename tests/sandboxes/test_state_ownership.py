"""Session states from outside the process are untrusted (issue 25, class 1): an edited state
never makes sandmem delete, overwrite, restore into or mount something it did not create."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from sandmem import LocalSnapshotSpec, Manifest, UnixLocalSandboxClient
from sandmem._errors import SandboxStateError
from sandmem.sandboxes import File, SandboxSessionState
from sandmem.sandboxes._local import UnixLocalSandboxSession


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "home"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".ssh/id_ed25519").write_text("private")
    return victim


def _edited(state: SandboxSessionState, **changes: Any) -> str:
    data = json.loads(state.model_dump_json())
    for key, value in changes.items():
        target = data
        *parents, last = key.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
    return json.dumps(data)


EDITS = {
    "root": lambda victim, state: {"manifest.root": str(victim)},
    "root-and-unowned": lambda victim, state: {
        "manifest.root": str(victim),
        "workspace_owned": False,
    },
    "root-relative": lambda victim, state: {"manifest.root": f"{state.manifest.root}/../home"},
    "owned-flipped": lambda victim, state: {"workspace_owned": not state.workspace_owned},
    "proof-dropped": lambda victim, state: {"proof": None},
    "proof-of-another": lambda victim, state: {"proof": "0" * 64},
    "env-added": lambda victim, state: {"manifest.environment": {"LD_PRELOAD": "/x.so"}},
}


@pytest.mark.parametrize("snapshot", [False, True], ids=["attach", "snapshot"])
@pytest.mark.parametrize("edit", sorted(EDITS))
async def test_an_edited_state_is_refused_and_nothing_outside_is_touched(
    edit: str, snapshot: bool, tmp_path: Path
) -> None:
    victim = _victim(tmp_path)
    client = UnixLocalSandboxClient()
    spec = LocalSnapshotSpec(tmp_path / "snaps") if snapshot else None
    session = await client.create(
        manifest=Manifest(entries={"a.txt": File(content=b"a")}), snapshot=spec
    )
    async with session:
        pass
    state = session.state
    text = _edited(state, **EDITS[edit](victim, state))
    with pytest.raises(SandboxStateError, match="cannot be trusted"):
        await client.resume(text)
    assert (victim / ".ssh/id_ed25519").read_text() == "private"
    resumed = await client.resume(state.model_dump_json())  # the unmodified state works
    await client.delete(resumed)
    assert (victim / ".ssh/id_ed25519").read_text() == "private"


async def test_a_proven_state_round_trips_through_json(tmp_path: Path) -> None:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(entries={"a.txt": File(content=b"a")}))
    text = session.state.model_dump_json()
    resumed = await client.resume(SandboxSessionState.model_validate_json(text))
    assert resumed.root == session.root and resumed.proven
    await client.delete(resumed)
    assert not session.root.exists()


async def test_a_root_replaced_by_a_link_is_refused(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest())
    state = session.state
    shutil.rmtree(session.root)
    session.root.symlink_to(victim)
    try:
        with pytest.raises(SandboxStateError, match="no longer the directory"):
            await client.resume(state)
    finally:
        session.root.unlink()
    assert (victim / ".ssh/id_ed25519").exists()


async def test_delete_removes_only_what_a_client_handed_over(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    client = UnixLocalSandboxClient()
    made = await client.create(manifest=Manifest())
    # a session built by hand from a state that names another directory as owned
    forged = made.state.model_copy(
        update={"manifest": made.state.manifest.model_copy(update={"root": victim})}
    )
    with pytest.raises(SandboxStateError, match="refusing to remove"):
        await client.delete(UnixLocalSandboxSession(forged))
    assert (victim / ".ssh/id_ed25519").exists()
    await client.delete(made)


async def test_a_caller_chosen_root_is_never_removed(tmp_path: Path) -> None:
    chosen = tmp_path / "mine"
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=chosen))
    (chosen / "keep.txt").write_text("k")
    await client.delete(await client.resume(session.state.model_dump_json()))
    assert (chosen / "keep.txt").read_text() == "k"


async def test_the_state_key_can_be_shared_by_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = UnixLocalSandboxClient()
    monkeypatch.setenv("SANDMEM_STATE_KEY", "host-a-and-b")
    session = await client.create(manifest=Manifest())
    text = session.state.model_dump_json()
    await client.resume(text)
    monkeypatch.setenv("SANDMEM_STATE_KEY", "another-host")
    with pytest.raises(SandboxStateError, match="changed after sandmem wrote it"):
        await client.resume(text)
    monkeypatch.delenv("SANDMEM_STATE_KEY")
    await client.delete(session)


async def test_a_runner_owning_the_sandbox_refuses_an_edited_state(tmp_path: Path) -> None:
    """The Runner resumes ``SandboxRunConfig.session_state`` (a model, not JSON: from a
    database, say) through the client, which proves it: an edited one never runs, and the
    workspace it names is never deleted at the end of the run."""
    from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, Shell
    from sandmem.testing import FunctionModel

    victim = _victim(tmp_path)
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(), snapshot=LocalSnapshotSpec(tmp_path / "s"))
    async with session:
        pass
    forged = SandboxSessionState.model_validate_json(
        _edited(session.state, **{"manifest.root": str(victim)})
    )
    agent = SandboxAgent(
        name="a", model=FunctionModel(lambda request: "done"), capabilities=[Shell()]
    )
    for state in (forged, forged.model_copy(update={"workspace_owned": False})):
        run = RunConfig(sandbox=SandboxRunConfig(client=client, session_state=state))
        with pytest.raises(SandboxStateError, match="cannot be trusted"):
            await Runner.run(agent, "hi", run_config=run)
    assert (victim / ".ssh/id_ed25519").read_text() == "private"
    await client.delete(session)


async def test_the_bubblewrap_client_refuses_an_edited_state_before_it_mounts_anything(
    tmp_path: Path,
) -> None:
    from sandmem.sandboxes._bubblewrap import BubblewrapSandboxClient
    from sandmem.sandboxes._bwrap_host import probe_bwrap

    probe = probe_bwrap()
    if probe.error is not None:
        pytest.skip(f"bubblewrap is not usable here: {probe.error}")
    victim = _victim(tmp_path)
    client = BubblewrapSandboxClient()
    session = await client.create(manifest=Manifest())
    for changes in (
        {"manifest.root": str(victim)},
        {"backend_settings.network": True},
        {"backend_settings.readonly_binds": ["/"]},
    ):
        with pytest.raises(SandboxStateError, match="cannot be trusted"):
            await client.resume(_edited(session.state, **changes))
    await client.delete(await client.resume(session.state.model_dump_json()))
    assert (victim / ".ssh/id_ed25519").read_text() == "private"


async def test_a_snapshot_is_never_restored_through_a_root_swapped_for_a_link(
    tmp_path: Path,
) -> None:
    """A proven state, its workspace replaced by a link to another directory: the resume
    renames the link aside and restores a directory of its own there; nothing is written
    through the link, and delete removes only that directory."""
    victim = _victim(tmp_path)
    client = UnixLocalSandboxClient()
    session = await client.create(
        manifest=Manifest(entries={"a.txt": File(content=b"a")}),
        snapshot=LocalSnapshotSpec(tmp_path / "snaps"),
    )
    async with session:
        pass
    state = session.state
    shutil.rmtree(session.root)
    session.root.symlink_to(victim)
    resumed = await client.resume(state.model_dump_json())
    assert resumed.root.is_dir() and not resumed.root.is_symlink()
    assert (resumed.root / "a.txt").read_bytes() == b"a"
    await client.delete(resumed)
    assert sorted(p.name for p in victim.iterdir()) == [".ssh"]
    assert (victim / ".ssh/id_ed25519").read_text() == "private"


def test_a_key_made_by_two_processes_at_once_is_whole_and_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sandmem processes starting on a machine without a key (a fresh CI machine, two
    test workers): the second looks while the first is still writing the key. It must see
    no key or a whole one, and both must sign with the same key."""
    import os
    import stat

    from sandmem.sandboxes import _ownership

    path = str(tmp_path / "state" / "sandmem" / "state-key")
    real_fdopen = os.fdopen
    second: list[bytes] = []

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        if not second:  # the other process starts now: the first one's key file is open,
            second.append(b"")  # not yet written
            second[0] = _ownership._file_key.__wrapped__(path)
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    first = _ownership._file_key.__wrapped__(path)
    assert len(first) == 32 and second == [first]
    assert os.listdir(os.path.dirname(path)) == ["state-key"]  # no spare file left behind
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
