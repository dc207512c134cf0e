"""SandboxSession: the narrow backend seam plus what every backend gets for free.

INTERFACE SKELETON — the sandbox work fills in the bodies; signatures are the contract that the
runner, capabilities and memory code are written against.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

PreStopHook = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    #: True when output beyond the capture bound was discarded
    truncated: bool = False

    @property
    def output(self) -> str:
        """stdout then stderr, decoded with replacement."""
        return (self.stdout + self.stderr).decode("utf-8", "replace")


class SandboxSessionState(BaseModel):
    """JSON-serialisable: enough to resume the session in a new process."""

    session_id: str
    backend: str
    manifest: Any  # Manifest (with root)
    snapshot: Any | None = None  # LocalSnapshotSpec | None
    backend_settings: dict[str, Any] = {}


class SandboxSession(abc.ABC):
    """A live workspace. ``async with session:`` starts and stops it.

    Paths are workspace-relative; escapes raise ``SandboxPathError``.
    """

    @property
    @abc.abstractmethod
    def state(self) -> SandboxSessionState: ...

    @property
    @abc.abstractmethod
    def root(self) -> Path:
        """Host path of the workspace root."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...

    async def __aenter__(self) -> SandboxSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def register_pre_stop_hook(self, hook: PreStopHook) -> None: ...

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult: ...

    async def read(self, path: str) -> bytes: ...
    async def write(self, path: str, data: bytes | str) -> None: ...
    async def append(self, path: str, data: bytes | str) -> None: ...
    async def mkdir(self, path: str, parents: bool = True) -> None: ...
    async def ls(self, path: str = ".") -> list[str]: ...
    async def exists(self, path: str) -> bool: ...
    async def remove(self, path: str, recursive: bool = False) -> None: ...
    async def rename(self, src: str, dst: str) -> None: ...

    @contextlib.asynccontextmanager
    async def lock(self, path: str, timeout: float = 30.0) -> AsyncIterator[None]:
        yield
