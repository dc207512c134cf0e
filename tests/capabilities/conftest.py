"""Capabilities are tested on a real local sandbox session whose workspace is under tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The workspace directory; ``tmp_path`` around it is the "outside" escapes aim at."""
    return tmp_path / "ws"


@pytest.fixture
async def session(workspace: Path) -> AsyncIterator[SandboxSession]:
    client = UnixLocalSandboxClient()
    sess = await client.create(manifest=Manifest(root=workspace))
    async with sess:
        yield sess
    await client.delete(sess)
