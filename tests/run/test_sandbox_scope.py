"""Which sandbox a run uses: an injected session (started when needed, left running) or a
runner-owned one (created or resumed, stopped with hooks and snapshot, then deleted)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Capability, Shell
from sandmem.models import ModelRequest
from sandmem.sandboxes import (
    File,
    LocalSnapshotSpec,
    Manifest,
    SandboxSession,
    UnixLocalSandboxClient,
)
from sandmem.testing import FunctionModel, tool_call, tool_outputs


@pytest.fixture(autouse=True)
def _workspaces_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


class Recorder(Capability):
    """Remembers the session it was bound to and leaves a file from a pre-stop hook."""

    def __init__(self) -> None:
        self.sessions: list[SandboxSession] = []

    def bind(self, session: SandboxSession) -> Recorder:
        self.sessions.append(session)

        async def on_stop() -> None:
            await session.write("stopped-by-hook.txt", b"hook ran")

        session.register_pre_stop_hook(on_stop)
        return super().bind(session)


def _cat_then_answer(request: ModelRequest) -> list[dict[str, object]] | str:
    outputs = tool_outputs(request)
    if not outputs:
        return [tool_call("exec_command", {"cmd": "cat task.md"})]
    return f"saw: {outputs[-1]['output'].splitlines()[-1]}"


MANIFEST = Manifest(entries={"task.md": File(content=b"the task\n")})


def _agent(recorder: Recorder | None = None) -> SandboxAgent:
    capabilities: list[Capability] = [Shell()]
    if recorder is not None:
        capabilities.append(recorder)
    return SandboxAgent(
        name="worker",
        model=FunctionModel(_cat_then_answer),
        capabilities=capabilities,
        default_manifest=MANIFEST,
    )


async def test_an_injected_session_that_is_not_running_is_started_and_left_running() -> None:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=MANIFEST)
    assert not await session.running()
    config = RunConfig(sandbox=SandboxRunConfig(session=session))
    result = await Runner.run(_agent(), "read the task", run_config=config)
    assert result.final_output == "saw: the task"
    assert await session.running()  # its owner stops it
    second = await Runner.run(_agent(), "again", run_config=config)
    assert second.final_output == "saw: the task"
    await session.aclose()
    await client.delete(session)


async def test_a_runner_owned_sandbox_is_stopped_then_deleted(tmp_path: Path) -> None:
    recorder = Recorder()
    spec = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    config = RunConfig(
        sandbox=SandboxRunConfig(client=UnixLocalSandboxClient(), snapshot=spec, manifest=MANIFEST)
    )
    result = await Runner.run(_agent(recorder), "read the task", run_config=config)
    assert result.final_output == "saw: the task"
    (owned,) = recorder.sessions
    assert not await owned.running()
    assert not owned.root.exists()  # no workspace left behind
    assert spec.path_for(owned.session_id).exists()  # the snapshot is kept, hook output in it

    # a later run resumes it from its state: the hook's file came back with the snapshot
    resumed_config = RunConfig(
        sandbox=SandboxRunConfig(client=UnixLocalSandboxClient(), session_state=owned.state)
    )

    def read_hook_file(request: ModelRequest) -> list[dict[str, object]] | str:
        outputs = tool_outputs(request)
        if not outputs:
            return [tool_call("exec_command", {"cmd": "cat stopped-by-hook.txt"})]
        return outputs[-1]["output"].splitlines()[-1]

    agent = SandboxAgent(name="resumer", model=FunctionModel(read_hook_file))
    again = await Runner.run(agent, "what did the hook write?", run_config=resumed_config)
    assert again.final_output == "hook ran"
    assert not owned.root.exists()


async def test_a_failed_run_still_cleans_up_its_sandbox() -> None:
    recorder = Recorder()

    def explode(request: ModelRequest) -> str:
        raise RuntimeError("model down")

    agent = SandboxAgent(
        name="worker", model=FunctionModel(explode), capabilities=[Shell(), recorder]
    )
    config = RunConfig(sandbox=SandboxRunConfig(client=UnixLocalSandboxClient()))
    with pytest.raises(RuntimeError, match="model down"):
        await Runner.run(agent, "go", run_config=config)
    (owned,) = recorder.sessions
    assert not owned.root.exists()


async def test_options_must_be_none_for_the_local_clients() -> None:
    from sandmem import UserError

    config = RunConfig(
        sandbox=SandboxRunConfig(client=UnixLocalSandboxClient(), options={"exposed_ports": [1]})
    )
    with pytest.raises(UserError, match="no per-session options"):
        await Runner.run(
            SandboxAgent(name="x", model=FunctionModel(lambda r: "hi")),
            "go",
            run_config=config,
        )
