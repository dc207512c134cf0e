"""The public surface: ``__all__`` sorted, complete, and resolvable; SPEC names present."""

from __future__ import annotations

import sandmem

SPEC_NAMES = {
    "Agent",
    "SandboxAgent",
    "Runner",
    "RunConfig",
    "SandboxRunConfig",
    "RunResult",
    "MaxTurnsExceeded",
    "UserError",
    "ModelBehaviorError",
    "SandmemError",
    "SQLiteSession",
    "ModelSettings",
    "function_tool",
    "Manifest",
    "File",
    "Dir",
    "UnixLocalSandboxClient",
    "LocalSnapshotSpec",
    "SandboxSession",
    "SandboxSessionState",
    "Capability",
    "Filesystem",
    "Shell",
    "Memory",
    "MemoryLayoutConfig",
    "MemoryReadConfig",
    "MemoryGenerateConfig",
    "validate_rollout_id",
    "OpenAIResponsesModel",
    "OpenAIChatCompletionsModel",
}


def test_all_sorted_and_resolves() -> None:
    assert sandmem.__all__ == sorted(sandmem.__all__)
    for name in sandmem.__all__:
        assert getattr(sandmem, name) is not None, name


def test_spec_names_are_exported() -> None:
    assert SPEC_NAMES <= set(sandmem.__all__)


def test_errors_share_one_base() -> None:
    for name in (
        "UserError",
        "MaxTurnsExceeded",
        "ModelBehaviorError",
        "SandboxError",
        "MemoryGenerationError",
        "ModelRequestError",
        "MemoryLockedError",
        "MemoryNotFoundError",
    ):
        assert issubclass(getattr(sandmem, name), sandmem.SandmemError)
    assert not issubclass(sandmem.SandmemError, MemoryError)


def test_memory_api_is_exported_and_not_shadowed() -> None:
    """``sandmem.memory.search`` is the function even after every submodule is imported (a
    submodule named ``search`` would replace it on import)."""
    import importlib
    import pkgutil

    from sandmem import memory

    assert memory.__all__ == sorted(memory.__all__, key=lambda n: (not n.isupper(), n))
    for info in pkgutil.walk_packages(memory.__path__, "sandmem.memory."):
        importlib.import_module(info.name)
    for name in memory.__all__:
        assert getattr(memory, name) is not None, name
    for name in ("status", "list_conversations", "list_files", "show", "search", "generate"):
        assert callable(getattr(memory, name)) and callable(getattr(memory, f"{name}_sync"))
        assert not isinstance(getattr(memory, name), type(memory)), name
