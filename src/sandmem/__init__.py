"""sandmem: sandboxed LLM agents with memory that carries across runs.

Everything a user needs is importable from here; submodules hold the seams:
``sandmem.models``, ``sandmem.sandboxes``, ``sandmem.capabilities``, ``sandmem.memory``,
``sandmem.testing``.
"""

from __future__ import annotations

from sandmem._agent import Agent
from sandmem._errors import (
    MaxTurnsExceeded,
    MemoryGenerationError,
    ModelBehaviorError,
    ModelRequestError,
    SandboxError,
    SandboxPathError,
    SandboxStateError,
    SandmemError,
    UserError,
)
from sandmem._run import Runner, RunResult
from sandmem._run_config import RunConfig, SandboxRunConfig
from sandmem._sandbox_agent import SandboxAgent
from sandmem._session import Session, SQLiteSession
from sandmem._settings import ModelSettings
from sandmem._tools import FunctionTool, function_tool
from sandmem._usage import Usage

__all__ = [
    "Agent",
    "FunctionTool",
    "MaxTurnsExceeded",
    "MemoryGenerationError",
    "ModelBehaviorError",
    "ModelRequestError",
    "ModelSettings",
    "RunConfig",
    "RunResult",
    "Runner",
    "SQLiteSession",
    "SandboxAgent",
    "SandboxError",
    "SandboxPathError",
    "SandboxRunConfig",
    "SandboxStateError",
    "SandmemError",
    "Session",
    "Usage",
    "UserError",
    "function_tool",
]
