"""What a run does after a turn of tool calls: ask the model again (the default), or stop with
a final output taken from the tools (``Agent.tool_use_behavior``, in the reference's forms).

- ``"run_llm_again"``: send the tool outputs to the model for another turn;
- ``"stop_on_first_tool"``: the first tool's output is the final output;
- ``{"stop_at_tool_names": [...]}``: stop when one of these tools was called (its output is
  the final output);
- a function ``(ctx, results) -> ToolsToFinalOutputResult`` (sync or async) deciding from the
  turn's ``FunctionToolResult`` list.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sandmem._items import Item

if TYPE_CHECKING:
    from sandmem.agent._context import RunContextWrapper
    from sandmem.agent._tools import FunctionTool


@dataclass(frozen=True)
class FunctionToolResult:
    """One tool call of a turn: the tool, what it returned, and the output item sent back."""

    tool: FunctionTool
    output: Any
    run_item: Item


@dataclass(frozen=True)
class ToolsToFinalOutputResult:
    """A tool-use decision: ``is_final_output`` ends the run with ``final_output``."""

    is_final_output: bool
    final_output: Any = None


ToolsToFinalOutputFunction = Callable[
    ["RunContextWrapper[Any]", list[FunctionToolResult]],
    ToolsToFinalOutputResult | Awaitable[ToolsToFinalOutputResult],
]
ToolUseBehavior = (
    Literal["run_llm_again", "stop_on_first_tool"]
    | Mapping[str, list[str]]
    | ToolsToFinalOutputFunction
)

_NOT_FINAL = ToolsToFinalOutputResult(is_final_output=False)


def check_tool_use_behavior(value: object) -> None:
    """Raise ``TypeError`` for a value that is none of the forms above."""
    if value in ("run_llm_again", "stop_on_first_tool") or callable(value):
        return
    if isinstance(value, Mapping) and isinstance(value.get("stop_at_tool_names"), list):
        return
    raise TypeError(
        "Agent.tool_use_behavior must be 'run_llm_again', 'stop_on_first_tool', "
        "{'stop_at_tool_names': [...]} or a function (ctx, results) -> ToolsToFinalOutputResult"
    )


async def tools_final_output(
    behavior: ToolUseBehavior, ctx: RunContextWrapper[Any], results: list[FunctionToolResult]
) -> ToolsToFinalOutputResult:
    """The decision of ``behavior`` after a turn whose tool calls gave ``results``."""
    if behavior == "run_llm_again" or not results:
        return _NOT_FINAL
    if behavior == "stop_on_first_tool":
        return ToolsToFinalOutputResult(True, results[0].output)
    if isinstance(behavior, Mapping):
        names = behavior.get("stop_at_tool_names") or []
        hit = next((r for r in results if r.tool.name in names), None)
        return _NOT_FINAL if hit is None else ToolsToFinalOutputResult(True, hit.output)
    assert callable(behavior)
    decision = behavior(ctx, results)
    if inspect.isawaitable(decision):
        decision = await decision
    if not isinstance(decision, ToolsToFinalOutputResult):
        raise TypeError(
            f"tool_use_behavior returned {type(decision).__name__}, not ToolsToFinalOutputResult"
        )
    return decision
