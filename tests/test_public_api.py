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
    ):
        assert issubclass(getattr(sandmem, name), sandmem.SandmemError)
    assert not issubclass(sandmem.SandmemError, MemoryError)
