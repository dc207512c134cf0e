"""Which host variables commands inherit: the host environment minus credentials (local), a
minimal one (bubblewrap), allowlists, and the layers on top."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from sandmem._errors import UserError
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.sandboxes._environment import (
    MINIMAL_HOST_VARIABLES,
    HostEnvironmentPolicy,
    looks_like_credential,
)

PLANTED = {
    "MY_SERVICE_TOKEN": "tok-planted-4711",
    "OPENAI_API_KEY": "sk-planted-4712",
    "DB_PASSWORD": "pw-planted-4713",
    "AWS_REGION": "planted-4714",  # a provider prefix, even when not secret-looking
    "my_api_key": "lower-planted-4715",
    "SANDMEM_PLAIN_SETTING": "visible-4716",
}


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    return PLANTED


async def _env_of(session: SandboxSession) -> dict[str, str]:
    result = await session.exec("env -0", shell=True)
    pairs = [line.split("=", 1) for line in result.stdout.decode().split("\0") if "=" in line]
    return dict(pairs)


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("MY_SERVICE_TOKEN", True),
        ("GITHUB_SHA", True),
        ("ANTHROPIC_BASE_URL", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("AZURE_OPENAI_ENDPOINT", True),
        ("ssh_passwd", True),
        ("SECRET", True),
        ("PATH", False),
        ("VIRTUAL_ENV", False),
        ("PYTHONPATH", False),
        ("LANG", False),
    ],
)
def test_credential_names(name: str, credential: bool) -> None:
    assert looks_like_credential(name) is credential


def test_policy_selection() -> None:
    host = {"PATH": "/p", "HOME": "/h", "X_TOKEN": "t", "EDITOR": "vi"}
    assert HostEnvironmentPolicy.of(True, None).select(host) == {
        "PATH": "/p",
        "HOME": "/h",
        "EDITOR": "vi",
    }
    assert HostEnvironmentPolicy.of(True, ["X_TOKEN"]).select(host)["X_TOKEN"] == "t"
    assert HostEnvironmentPolicy.of(False, None).select(host) == {"PATH": "/p"}
    assert HostEnvironmentPolicy.of(False, ["EDITOR"]).select(host) == {"EDITOR": "vi"}
    assert "PATH" in MINIMAL_HOST_VARIABLES
    with pytest.raises(UserError, match="collection"):
        HostEnvironmentPolicy.of(False, "PATH")


async def test_local_commands_inherit_the_host_environment_without_credentials(
    planted: dict[str, str],
) -> None:
    client = UnixLocalSandboxClient()
    session = await client.create()
    async with session:
        env = await _env_of(session)
        everything = (await session.exec("env; cat /proc/self/environ")).output
    await client.delete(session)
    for name in ("MY_SERVICE_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD", "AWS_REGION", "my_api_key"):
        assert name not in env
        assert planted[name] not in everything
    assert env["SANDMEM_PLAIN_SETTING"] == "visible-4716"
    assert env["HOME"] == str(session.root)


async def test_python_on_the_users_path_works_in_the_sandbox(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a PATH entry that exists only in this (host) process, like a virtualenv's bin/
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    client = UnixLocalSandboxClient()
    session = await client.create()
    async with session:
        result = await session.exec("command -v python && python -c 'print(6 * 7)'")
    await client.delete(session)
    assert result.ok(), result.output
    assert result.stdout.decode().splitlines() == [str(tools / "python"), "42"]


async def test_allowlisted_credentials_pass_by_name(planted: dict[str, str]) -> None:
    client = UnixLocalSandboxClient(host_environment_allowlist=["MY_SERVICE_TOKEN"])
    session = await client.create()
    async with session:
        env = await _env_of(session)
    await client.delete(session)
    assert env["MY_SERVICE_TOKEN"] == "tok-planted-4711"
    assert "OPENAI_API_KEY" not in env


async def test_not_inheriting_keeps_only_the_allowlist(planted: dict[str, str]) -> None:
    client = UnixLocalSandboxClient(inherit_host_environment=False)
    session = await client.create()
    async with session:
        env = await _env_of(session)
    await client.delete(session)
    assert "SANDMEM_PLAIN_SETTING" not in env and "MY_SERVICE_TOKEN" not in env
    assert set(env) <= MINIMAL_HOST_VARIABLES | {"HOME", "PWD", "SHLVL", "_"}
    assert env["LANG"]  # a default when the host has none


async def test_layers_on_top_of_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDMEM_LAYER", "host")
    client = UnixLocalSandboxClient(env={"SANDMEM_LAYER": "client", "B": "client"})
    manifest = Manifest(environment={"B": "manifest", "C": "manifest"})
    session = await client.create(manifest=manifest)
    async with session:
        result = await session.exec('echo "$SANDMEM_LAYER $B $C $D"', env={"D": "call"})
    await client.delete(session)
    assert result.stdout == b"client manifest manifest call\n"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_bubblewrap_keeps_a_minimal_environment(planted: dict[str, str]) -> None:
    from sandmem.sandboxes import BubblewrapSandboxClient

    client = BubblewrapSandboxClient()
    session = await client.create()
    async with session:
        env = await _env_of(session)
    await client.delete(session)
    assert set(env) <= {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_"}
    assert env["HOME"] == "/workspace"

    allowing = BubblewrapSandboxClient(host_environment_allowlist=["SANDMEM_PLAIN_SETTING"])
    session = await allowing.create()
    async with session:
        env = await _env_of(session)
    await allowing.delete(session)
    assert env["SANDMEM_PLAIN_SETTING"] == "visible-4716" and "MY_SERVICE_TOKEN" not in env
