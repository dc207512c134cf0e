"""sandmem: sandboxed LLM agents with memory that carries across runs; this folder owns the
foundation modules and the public surface, and the surface imports every floor but the
applications (``eval``, ``demo``) and ``cli``, which alone may import it.

Everything a user needs is importable from here; submodules hold the seams:
``sandmem.models``, ``sandmem.sandboxes``, ``sandmem.capabilities``, ``sandmem.memory``,
``sandmem.testing``, ``sandmem.redaction``. The OpenAI model classes are imported on first use,
so ``import sandmem`` does not import the ``openai`` package.

Foundation modules at this level (errors, items, settings, usage, truncation, prompts,
docstrings, version, ``_extras``, ``_log_lines`` and the public ``redaction``) import no
folder of the package; the public ``tracing`` imports only ``models``; ``docs/architecture.md``
has the whole map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandmem._errors import (
    ExecTimeoutError,
    ExecTransportError,
    MaxTurnsExceeded,
    MCPServerError,
    MemoryGenerationError,
    MemoryLockedError,
    MemoryNotFoundError,
    ModelBehaviorError,
    ModelRequestError,
    SandboxError,
    SandboxPathError,
    SandboxStateError,
    SandmemError,
    ToolTimeoutError,
    UserError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
    WorkspaceWriteTypeError,
)
from sandmem._items import Item as TResponseInputItem
from sandmem._retry import (
    ModelRetryBackoffSettings,
    ModelRetryNormalizedError,
    RetryDecision,
    RetryPolicy,
    RetryPolicyContext,
    retry_policies,
)
from sandmem._settings import ModelRetrySettings, ModelSettings, Reasoning
from sandmem._usage import Usage
from sandmem._version import __version__ as __version__
from sandmem.agent._agent import Agent, GenerateDynamicPromptData
from sandmem.agent._agent import Agent as AgentBase
from sandmem.agent._agent_tool import AgentToolStreamEvent
from sandmem.agent._context import RunContextWrapper, ToolContext
from sandmem.agent._context import RunContextWrapper as AgentHookContext
from sandmem.agent._hooks import AgentHooks, RunHooks
from sandmem.agent._run_config import RunConfig, SandboxRunConfig
from sandmem.agent._run_items import (
    ItemHelpers,
    MessageOutputItem,
    ReasoningItem,
    RunItem,
    ToolCallItem,
    ToolCallOutputItem,
)
from sandmem.agent._schema import AgentOutputSchema, AgentOutputSchemaBase
from sandmem.agent._session import Session, SQLiteSession
from sandmem.agent._stream_events import (
    AgentUpdatedStreamEvent,
    RawResponsesStreamEvent,
    RunItemStreamEvent,
    StreamEvent,
)
from sandmem.agent._tool_output import (
    ToolOutputFileContent,
    ToolOutputFileContentDict,
    ToolOutputImage,
    ToolOutputImageDict,
    ToolOutputText,
    ToolOutputTextDict,
)
from sandmem.agent._tool_use import (
    FunctionToolResult,
    ToolsToFinalOutputFunction,
    ToolsToFinalOutputResult,
)
from sandmem.agent._tools import FunctionTool, default_tool_error_function, function_tool, tool
from sandmem.agent._tools import FunctionTool as Tool
from sandmem.capabilities import Capability, Filesystem, Memory, Shell, Skills
from sandmem.capabilities._sandbox_agent import SandboxAgent
from sandmem.mcp import (
    MCPServer,
    MCPServerStdio,
    MCPServerStreamableHttp,
    create_static_tool_filter,
)
from sandmem.memory import (
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    validate_rollout_id,
)
from sandmem.models import Model, ModelProvider, ModelResponse
from sandmem.run._runner import Runner, RunResult, RunResultStreaming
from sandmem.sandboxes import (
    BubblewrapSandboxClient,
    Dir,
    ExecResult,
    File,
    GitRepo,
    LocalDir,
    LocalFile,
    LocalSnapshotSpec,
    Manifest,
    SandboxClient,
    SandboxSession,
    SandboxSessionState,
    SandboxWorkspaceScope,
    UnixLocalSandboxClient,
)
from sandmem.sandboxes._types import FileMode, Permissions
from sandmem.tracing import trace

if TYPE_CHECKING:
    from sandmem.models import OpenAIChatCompletionsModel, OpenAIProvider, OpenAIResponsesModel

__all__ = [
    "Agent",
    "AgentBase",
    "AgentHookContext",
    "AgentHooks",
    "AgentOutputSchema",
    "AgentOutputSchemaBase",
    "AgentToolStreamEvent",
    "AgentUpdatedStreamEvent",
    "BubblewrapSandboxClient",
    "Capability",
    "Dir",
    "ExecResult",
    "ExecTimeoutError",
    "ExecTransportError",
    "File",
    "FileMode",
    "Filesystem",
    "FunctionTool",
    "FunctionToolResult",
    "GenerateDynamicPromptData",
    "GitRepo",
    "ItemHelpers",
    "LocalDir",
    "LocalFile",
    "LocalSnapshotSpec",
    "MCPServer",
    "MCPServerError",
    "MCPServerStdio",
    "MCPServerStreamableHttp",
    "Manifest",
    "MaxTurnsExceeded",
    "Memory",
    "MemoryGenerateConfig",
    "MemoryGenerationError",
    "MemoryLayoutConfig",
    "MemoryLockedError",
    "MemoryNotFoundError",
    "MemoryReadConfig",
    "MessageOutputItem",
    "Model",
    "ModelBehaviorError",
    "ModelProvider",
    "ModelRequestError",
    "ModelResponse",
    "ModelRetryBackoffSettings",
    "ModelRetryNormalizedError",
    "ModelRetrySettings",
    "ModelSettings",
    "OpenAIChatCompletionsModel",
    "OpenAIProvider",
    "OpenAIResponsesModel",
    "Permissions",
    "RawResponsesStreamEvent",
    "Reasoning",
    "ReasoningItem",
    "RetryDecision",
    "RetryPolicy",
    "RetryPolicyContext",
    "RunConfig",
    "RunContextWrapper",
    "RunHooks",
    "RunItem",
    "RunItemStreamEvent",
    "RunResult",
    "RunResultStreaming",
    "Runner",
    "SQLiteSession",
    "SandboxAgent",
    "SandboxClient",
    "SandboxError",
    "SandboxPathError",
    "SandboxRunConfig",
    "SandboxSession",
    "SandboxSessionState",
    "SandboxStateError",
    "SandboxWorkspaceScope",
    "SandmemError",
    "Session",
    "Shell",
    "Skills",
    "StreamEvent",
    "TResponseInputItem",
    "Tool",
    "ToolCallItem",
    "ToolCallOutputItem",
    "ToolContext",
    "ToolOutputFileContent",
    "ToolOutputFileContentDict",
    "ToolOutputImage",
    "ToolOutputImageDict",
    "ToolOutputText",
    "ToolOutputTextDict",
    "ToolTimeoutError",
    "ToolsToFinalOutputFunction",
    "ToolsToFinalOutputResult",
    "UnixLocalSandboxClient",
    "Usage",
    "UserError",
    "WorkspaceArchiveReadError",
    "WorkspaceArchiveWriteError",
    "WorkspaceReadNotFoundError",
    "WorkspaceWriteTypeError",
    "create_static_tool_filter",
    "default_tool_error_function",
    "function_tool",
    "retry_policies",
    "tool",
    "trace",
    "validate_rollout_id",
]

#: imported from ``sandmem.models`` on first use (it imports ``openai`` lazily too)
_FROM_MODELS = frozenset({"OpenAIChatCompletionsModel", "OpenAIProvider", "OpenAIResponsesModel"})


def __getattr__(name: str) -> Any:
    if name in _FROM_MODELS:
        from sandmem import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
