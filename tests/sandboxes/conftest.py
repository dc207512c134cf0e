from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandmem.sandboxes import LocalSnapshotSpec, SandboxSession, UnixLocalSandboxClient


@pytest.fixture(autouse=True)
def _workspaces_in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Fresh workspaces (``mkdtemp``) are created under the test's tmp_path."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.fixture
def client() -> UnixLocalSandboxClient:
    return UnixLocalSandboxClient()


@pytest.fixture
def snapshot_spec(tmp_path: Path) -> LocalSnapshotSpec:
    return LocalSnapshotSpec(tmp_path / "snapshots")


@pytest.fixture
async def session(client: UnixLocalSandboxClient) -> AsyncIterator[SandboxSession]:
    sess = await client.create()
    await sess.start()
    yield sess
    await client.delete(sess)
