"""Models: owns the ``Model`` seam and its OpenAI implementations, and imports only the
foundation (never ``sandboxes``, ``agent``, ``run``, ``memory`` or anything above).

The OpenAI classes are imported on first use, so ``import sandmem`` does not pay for importing
the ``openai`` package until a model is needed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sandmem.models._base import (
    Model,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OutputSchema,
    ToolSpec,
)

if TYPE_CHECKING:
    from sandmem.models._provider import OpenAIProvider
    from sandmem.models.openai_chat import OpenAIChatCompletionsModel
    from sandmem.models.openai_responses import OpenAIResponsesModel

__all__ = [
    "Model",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OpenAIChatCompletionsModel",
    "OpenAIProvider",
    "OpenAIResponsesModel",
    "OutputSchema",
    "ToolSpec",
]

_LAZY = {
    "OpenAIProvider": "sandmem.models._provider",
    "OpenAIChatCompletionsModel": "sandmem.models.openai_chat",
    "OpenAIResponsesModel": "sandmem.models.openai_responses",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
