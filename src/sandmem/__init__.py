"""sandmem: sandboxed LLM agents with memory that carries across runs; this folder owns the
foundation modules and the public surface, and the surface imports every floor but the
applications (``eval``, ``demo``) and ``cli``, which alone may import it.

Everything a user needs is importable from here; submodules hold the seams:
``sandmem.models``, ``sandmem.sandboxes``, ``sandmem.capabilities``, ``sandmem.memory``,
``sandmem.testing``, ``sandmem.redaction``. Apart from the exceptions, each name is imported
from the module that defines it on first use (``_lazy``): ``import sandmem`` imports neither
the agent runtime nor ``openai`` until they are needed, and ``sandmem memory status`` never
does.

Foundation modules at this level (errors, items, settings, usage, truncation, prompts,
docstrings, version, ``_extras``, ``_lazy``, ``_log_lines`` and the public ``redaction``) import no
folder of the package; the public ``tracing`` imports only ``models``; ``docs/architecture.md``
has the whole map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    RepeatedToolCallError,
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
from sandmem._lazy import lazy_exports
from sandmem._version import __version__ as __version__

if TYPE_CHECKING:
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
        MemoryScopesConfig,
        validate_rollout_id,
    )
    from sandmem.models import (
        Model,
        ModelProvider,
        ModelResponse,
        OpenAIChatCompletionsModel,
        OpenAIProvider,
        OpenAIResponsesModel,
    )
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
    "MemoryScopesConfig",
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
    "RepeatedToolCallError",
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


#: where each name not imported above is defined (imported on first use)
_WHERE = {
    "Agent": "sandmem.agent._agent",
    "AgentBase": "sandmem.agent._agent:Agent",
    "AgentHookContext": "sandmem.agent._context:RunContextWrapper",
    "AgentHooks": "sandmem.agent._hooks",
    "AgentOutputSchema": "sandmem.agent._schema",
    "AgentOutputSchemaBase": "sandmem.agent._schema",
    "AgentToolStreamEvent": "sandmem.agent._agent_tool",
    "AgentUpdatedStreamEvent": "sandmem.agent._stream_events",
    "BubblewrapSandboxClient": "sandmem.sandboxes",
    "Capability": "sandmem.capabilities",
    "Dir": "sandmem.sandboxes",
    "ExecResult": "sandmem.sandboxes",
    "File": "sandmem.sandboxes",
    "FileMode": "sandmem.sandboxes._types",
    "Filesystem": "sandmem.capabilities",
    "FunctionTool": "sandmem.agent._tools",
    "FunctionToolResult": "sandmem.agent._tool_use",
    "GenerateDynamicPromptData": "sandmem.agent._agent",
    "GitRepo": "sandmem.sandboxes",
    "ItemHelpers": "sandmem.agent._run_items",
    "LocalDir": "sandmem.sandboxes",
    "LocalFile": "sandmem.sandboxes",
    "LocalSnapshotSpec": "sandmem.sandboxes",
    "MCPServer": "sandmem.mcp",
    "MCPServerStdio": "sandmem.mcp",
    "MCPServerStreamableHttp": "sandmem.mcp",
    "Manifest": "sandmem.sandboxes",
    "Memory": "sandmem.capabilities",
    "MemoryGenerateConfig": "sandmem.memory",
    "MemoryLayoutConfig": "sandmem.memory",
    "MemoryReadConfig": "sandmem.memory",
    "MemoryScopesConfig": "sandmem.memory",
    "MessageOutputItem": "sandmem.agent._run_items",
    "Model": "sandmem.models",
    "ModelProvider": "sandmem.models",
    "ModelResponse": "sandmem.models",
    "ModelRetryBackoffSettings": "sandmem._retry",
    "ModelRetryNormalizedError": "sandmem._retry",
    "ModelRetrySettings": "sandmem._settings",
    "ModelSettings": "sandmem._settings",
    "OpenAIChatCompletionsModel": "sandmem.models",
    "OpenAIProvider": "sandmem.models",
    "OpenAIResponsesModel": "sandmem.models",
    "Permissions": "sandmem.sandboxes._types",
    "RawResponsesStreamEvent": "sandmem.agent._stream_events",
    "Reasoning": "sandmem._settings",
    "ReasoningItem": "sandmem.agent._run_items",
    "RetryDecision": "sandmem._retry",
    "RetryPolicy": "sandmem._retry",
    "RetryPolicyContext": "sandmem._retry",
    "RunConfig": "sandmem.agent._run_config",
    "RunContextWrapper": "sandmem.agent._context",
    "RunHooks": "sandmem.agent._hooks",
    "RunItem": "sandmem.agent._run_items",
    "RunItemStreamEvent": "sandmem.agent._stream_events",
    "RunResult": "sandmem.run._runner",
    "RunResultStreaming": "sandmem.run._runner",
    "Runner": "sandmem.run._runner",
    "SQLiteSession": "sandmem.agent._session",
    "SandboxAgent": "sandmem.capabilities._sandbox_agent",
    "SandboxClient": "sandmem.sandboxes",
    "SandboxRunConfig": "sandmem.agent._run_config",
    "SandboxSession": "sandmem.sandboxes",
    "SandboxSessionState": "sandmem.sandboxes",
    "SandboxWorkspaceScope": "sandmem.sandboxes",
    "Session": "sandmem.agent._session",
    "Shell": "sandmem.capabilities",
    "Skills": "sandmem.capabilities",
    "StreamEvent": "sandmem.agent._stream_events",
    "TResponseInputItem": "sandmem._items:Item",
    "Tool": "sandmem.agent._tools:FunctionTool",
    "ToolCallItem": "sandmem.agent._run_items",
    "ToolCallOutputItem": "sandmem.agent._run_items",
    "ToolContext": "sandmem.agent._context",
    "ToolOutputFileContent": "sandmem.agent._tool_output",
    "ToolOutputFileContentDict": "sandmem.agent._tool_output",
    "ToolOutputImage": "sandmem.agent._tool_output",
    "ToolOutputImageDict": "sandmem.agent._tool_output",
    "ToolOutputText": "sandmem.agent._tool_output",
    "ToolOutputTextDict": "sandmem.agent._tool_output",
    "ToolsToFinalOutputFunction": "sandmem.agent._tool_use",
    "ToolsToFinalOutputResult": "sandmem.agent._tool_use",
    "UnixLocalSandboxClient": "sandmem.sandboxes",
    "Usage": "sandmem._usage",
    "create_static_tool_filter": "sandmem.mcp",
    "default_tool_error_function": "sandmem.agent._tools",
    "function_tool": "sandmem.agent._tools",
    "retry_policies": "sandmem._retry",
    "tool": "sandmem.agent._tools",
    "trace": "sandmem.tracing",
    "validate_rollout_id": "sandmem.memory",
}

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
