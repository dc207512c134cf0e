"""Fixtures shared by the memory tests. The memory tests' shared helpers (``memory_doubles``,
``memory_worker``) live in this folder: pytest puts it on ``sys.path`` for this conftest, so
the tests in its subfolders (which mirror ``sandmem/memory/``) import them as the ones here do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    """A started local sandbox session on an empty workspace (``tmp_path / "ws"``); a test
    module may define its own ``sandbox`` instead."""
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    await session.start()
    yield session
    await client.delete(session)
