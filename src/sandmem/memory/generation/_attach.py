"""A layout's generation manager for a sandbox session: found or created, checked against the
session's other layouts, and attached to the session's stop (``memory.generation._stop``).

The session owns its managers (one per layout); this module is the only one that creates a
manager for a live session.
"""

from __future__ import annotations

from sandmem._errors import UserError
from sandmem.memory._store_seam import MemoryStore
from sandmem.memory.config import MemoryGenerateConfig
from sandmem.memory.generation._stop import on_stop
from sandmem.memory.generation.manager import MemoryGenerationManager
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes._session import SandboxSession


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _check_conflicts(paths: MemoryPaths, others: list[MemoryPaths]) -> None:
    if _overlaps(paths.memories_dir, paths.sessions_dir):
        raise UserError(
            f"memories_dir {paths.memories_dir!r} and sessions_dir {paths.sessions_dir!r} "
            "overlap; use separate directories"
        )
    for other in others:
        pairs = [
            (a, b)
            for a in (paths.memories_dir, paths.sessions_dir)
            for b in (other.memories_dir, other.sessions_dir)
        ]
        clash = next(((a, b) for a, b in pairs if _overlaps(a, b)), None)
        if clash is not None:
            raise UserError(
                f"memory layout ({paths.memories_dir}, {paths.sessions_dir}) conflicts with "
                f"layout ({other.memories_dir}, {other.sessions_dir}) in this sandbox session: "
                f"{clash[0]!r} and {clash[1]!r} share or nest directories. Use fully different "
                "directories, or the same layout for agents that should share memory."
            )


def get_manager(
    session: SandboxSession,
    paths: MemoryPaths,
    config: MemoryGenerateConfig,
    store: MemoryStore | None = None,
) -> MemoryGenerationManager:
    """The session's manager for ``paths``, created (and registered as a pre-stop hook) on
    first use. Raises ``UserError`` for layouts that conflict with one already in use."""
    managers: dict[MemoryPaths, MemoryGenerationManager] = session._memory_managers
    existing = managers.get(paths)
    if existing is not None:
        if existing.config.comparable() != config.comparable():
            raise UserError(
                f"layout ({paths.memories_dir}, {paths.sessions_dir}) is already used in this "
                "sandbox session with a different MemoryGenerateConfig; agents sharing a layout "
                "must share its generate config"
            )
        return existing
    _check_conflicts(paths, list(managers))
    manager = MemoryGenerationManager(session, paths, config, store=store)

    async def stop() -> None:
        await on_stop(manager)

    manager.stop_hook = stop
    session.register_pre_stop_hook(stop)
    managers[paths] = manager
    return manager
