"""The bubblewrap client's API: same lifecycle as the local client, state round trip with its
settings, paths as the sandbox shows them, validation, and the errors when bwrap cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem._errors import SandboxPathError, SandboxStateError, UserError
from sandmem._items import Item
from sandmem.capabilities import Shell
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import (
    Dir,
    File,
    LocalSnapshotSpec,
    Manifest,
    SandboxSessionState,
    UnixLocalSandboxClient,
    _bubblewrap,
)
from sandmem.sandboxes._bubblewrap import (
    DEFAULT_READONLY_BINDS,
    BubblewrapSandboxClient,
    BubblewrapSandboxSession,
    SandboxPolicy,
    bwrap_argv,
)
from sandmem.sandboxes._bwrap_host import BwrapProbe, bind_args, probe_bwrap, run_probe
from sandmem.testing import FunctionModel, tool_call, tool_outputs

_PROBE = probe_bwrap()
needs_bwrap = pytest.mark.skipif(_PROBE.error is not None, reason=str(_PROBE.error))


@needs_bwrap
async def test_state_round_trip_and_resume_give_a_bubblewrap_session(
    snapshot_spec: LocalSnapshotSpec,
) -> None:
    client = BubblewrapSandboxClient(memory_limit_mb=512)
    session = await client.create(
        manifest=Manifest(entries={"a.txt": File(content=b"one\n")}), snapshot=snapshot_spec
    )
    assert isinstance(session, BubblewrapSandboxSession)
    async with session:
        result = await session.exec("cat a.txt && echo two > b.txt && pwd")
        assert result.output == "one\n/workspace\n"
    state = SandboxSessionState.model_validate_json(session.state.model_dump_json())
    assert state.backend == "bubblewrap"
    assert state.backend_settings == {
        "network": False,
        "memory_limit_mb": 512,
        "max_processes": None,
        "readonly_binds": list(DEFAULT_READONLY_BINDS),
        "sandbox_root": "/workspace",
    }
    resumed = await BubblewrapSandboxClient(network=True).resume(state.model_dump_json())
    assert isinstance(resumed, BubblewrapSandboxSession)
    # the resuming client's settings govern (and are recorded)
    assert resumed.state.backend_settings["network"] is True
    assert resumed.state.backend_settings["memory_limit_mb"] is None
    assert resumed.root == session.root  # restored into the state's root, which is free
    async with resumed:
        assert (await resumed.exec("cat b.txt")).output == "two\n"
    with pytest.raises(SandboxStateError, match="bubblewrap"):
        await UnixLocalSandboxClient().resume(state)
    local = await UnixLocalSandboxClient().create()
    with pytest.raises(SandboxStateError, match="unix_local"):
        await client.resume(local.state)
    await client.delete(resumed)
    assert not resumed.root.exists()
    assert not (snapshot_spec.base_path / f"{state.session_id}.tar").exists()


@needs_bwrap
async def test_paths_as_the_sandbox_shows_them() -> None:
    client = BubblewrapSandboxClient()
    async with await client.create() as session:
        await session.mkdir("/workspace/sub")
        await session.write("/workspace/sub/x.txt", "x")
        assert await session.read_bytes("sub/x.txt") == b"x"
        assert await session.listdir("/workspace") == ["sub"]
        for workdir in ("sub", "/workspace/sub"):
            result = await session.exec("pwd; cat x.txt", workdir=workdir)
            assert result.output == "/workspace/sub\nx"
        assert session.display_root == "/workspace"  # type: ignore[attr-defined]
        with pytest.raises(SandboxPathError):
            await session.read_bytes("/workspace/../etc/passwd")
        with pytest.raises(SandboxPathError):
            await session.read_bytes("/etc/passwd")


@needs_bwrap
async def test_shell_tool_shows_sandbox_paths() -> None:
    def model(request: ModelRequest) -> list[Item] | str:
        outputs = tool_outputs(request)
        if not outputs:
            return [tool_call("exec_command", {"cmd": "pwd; echo $HOME", "workdir": "sub"})]
        return str(outputs[0]["output"])

    agent = SandboxAgent(name="a", model=FunctionModel(model), capabilities=[Shell()])
    client = BubblewrapSandboxClient()
    async with await client.create(manifest=Manifest(entries={"sub": Dir()})) as session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        result = await Runner.run(agent, "where am I?", run_config=config)
    assert "Exit code: 0" in result.final_output
    assert "/workspace/sub\n/workspace" in result.final_output
    assert str(session.root) not in result.final_output


@needs_bwrap
async def test_extra_readonly_bind(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "hello.sh").write_text("echo hello from tools\n")
    client = BubblewrapSandboxClient(readonly_binds=(*DEFAULT_READONLY_BINDS, str(tools)))
    async with await client.create() as session:
        result = await session.exec(f"sh {tools}/hello.sh; touch {tools}/new")
    assert result.stdout == b"hello from tools\n"
    assert "Read-only file system" in result.stderr.decode()
    assert not (tools / "new").exists()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"readonly_binds": "/usr"}, "not one string"),
        ({"readonly_binds": ("usr",)}, "absolute"),
        ({"readonly_binds": ("/",)}, "not '/'"),
        ({"readonly_binds": ("/tmp",)}, "mounts itself"),
        ({"readonly_binds": ("/workspace/x",)}, "mounts itself"),
        ({"readonly_binds": ("/proc",)}, "mounts itself"),
        ({"memory_limit_mb": 0}, "memory_limit_mb"),
        ({"max_processes": 0}, "max_processes"),
        ({"max_processes": True}, "max_processes"),
        ({"network": "yes"}, "network"),
        ({"env": {"A=B": "x"}}, "env"),
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UserError, match=match):
        BubblewrapSandboxClient(**kwargs)  # type: ignore[arg-type]


def test_missing_bwrap_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = run_probe(None)
    assert probe.error is not None and "apt-get install bubblewrap" in probe.error
    monkeypatch.setattr(_bubblewrap, "probe_bwrap", lambda: probe)
    with pytest.raises(UserError, match="apt-get install bubblewrap"):
        BubblewrapSandboxClient()


def test_unusable_bwrap_says_how_to_enable_user_namespaces(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    probe = run_probe(str(fake))
    assert probe.error is not None
    assert "No permissions to create new namespace" in probe.error
    assert "sysctl -w kernel.unprivileged_userns_clone=1" in probe.error
    assert "user.max_user_namespaces" in probe.error


def _policy(**overrides: object) -> SandboxPolicy:
    values: dict[str, object] = {
        "bwrap": "/usr/bin/bwrap",
        "network": False,
        "readonly_binds": ("/usr",),
        "prlimit": "/usr/bin/prlimit",
    }
    values.update(overrides)
    return SandboxPolicy(**values)  # type: ignore[arg-type]


def test_argv_namespaces_limits_and_mounts() -> None:
    argv = bwrap_argv(
        _policy(), ["--ro-bind-try", "/usr", "/usr"], Path("/h/ws"), "/workspace", ["true"]
    )
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert "--share-net" not in argv and "--clearenv" not in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--bind") + 1 : argv.index("--bind") + 3] == ["/h/ws", "/workspace"]
    assert argv.index("--tmpfs") < argv.index("--ro-bind-try") < argv.index("--remount-ro")
    assert argv[-2:] == ["--", "true"]  # no limits: no prlimit

    limited = bwrap_argv(
        _policy(network=True, memory_limit_mb=64, max_processes=9, tmpfs_size=True),
        [],
        Path("/h/ws"),
        "/workspace/sub",
        ["bash", "-c", "x"],
    )
    assert "--share-net" in limited
    assert limited[limited.index("--chdir") + 1] == "/workspace/sub"
    tail = limited[limited.index("--", limited.index("--chdir")) + 1 :]
    assert tail == ["/usr/bin/prlimit", f"--as={64 << 20}", "--nproc=10", "--", "bash", "-c", "x"]
    assert limited.count("--size") == 2  # /dev/shm and /tmp are capped too

    cgroup = bwrap_argv(
        _policy(max_processes=9, pids_cgroup=Path("/cg")), [], Path("/w"), "/workspace", ["true"]
    )
    assert "prlimit" not in " ".join(cgroup)  # root hosts: the pids cgroup enforces the count


def test_bind_args_keep_symlinks_into_bound_dirs(tmp_path: Path) -> None:
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "outside").symlink_to(tmp_path / "elsewhere")
    usr, bin_, out = (str(tmp_path / n) for n in ("usr", "bin", "outside"))
    args = bind_args([usr, bin_, out, str(tmp_path / "missing"), str(tmp_path / "u*")])
    assert args == [
        *("--ro-bind-try", usr, usr),
        *("--symlink", "usr/bin", bin_),
        *("--ro-bind-try", out, out),  # its target is not bound: mount the target's contents
    ]


def test_probe_reports_a_working_bwrap_once() -> None:
    assert probe_bwrap() is probe_bwrap()  # cached for the process
    if _PROBE.error is None:
        assert _PROBE == BwrapProbe(_PROBE.path, None, _PROBE.disable_userns, _PROBE.tmpfs_size)
