"""The public surface: ``__all__`` sorted, complete, and resolvable; SPEC names present."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

import pytest

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
        "MCPServerError",
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


PUBLIC_MODULES = [
    "sandmem",
    "sandmem.capabilities",
    "sandmem.cli",
    "sandmem.demo",
    "sandmem.distributed",
    "sandmem.eval",
    "sandmem.memory",
    "sandmem.memory.extractive",
    "sandmem.mcp",
    "sandmem.models",
    "sandmem.redaction",
    "sandmem.sandboxes",
    "sandmem.testing",
    "sandmem.tracing",
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_public_module_all_resolves(name: str) -> None:
    """Files move inside the package without changing what users import: every name a public
    module exports resolves (lazy exports included)."""
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    for attr in exported:
        assert getattr(module, attr) is not None, f"{name}.{attr}"


def test_reference_paths_kept() -> None:
    from sandmem.memory.state import GenerationState
    from sandmem.redaction import redact

    assert GenerationState().rollouts == {}
    assert redact("nothing secret") == "nothing secret"
    assert importlib.import_module("sandmem.cli").main is not None
    assert importlib.util.find_spec("sandmem.demo.__main__") is not None


@dataclass
class _Ctx:
    user: str


def test_generic_agents_subscript() -> None:
    assert sandmem.Agent[_Ctx](name="a").name == "a"
    assert isinstance(sandmem.SandboxAgent[_Ctx](name="s"), sandmem.Agent)


def test_reference_type_names_are_aliases() -> None:
    assert sandmem.AgentBase is sandmem.Agent
    assert sandmem.AgentHookContext is sandmem.RunContextWrapper
    assert sandmem.Tool is sandmem.FunctionTool
