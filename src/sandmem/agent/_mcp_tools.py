"""The tools an agent gets from its MCP servers, built once per run (``mcp_tools``).

Each MCP tool becomes a ``FunctionTool`` with the server's name, description and input schema
(sent non-strict unless ``mcp_config["convert_schemas_to_strict"]``). A call sends the model's
arguments to the server; the result is the tool's output: its text (several text blocks joined
by newlines), content parts when it holds images, or, with ``use_structured_content``, the
structured content as JSON. A failed call (``MCPServerError``) reaches the model through the
tool's ``failure_error_function`` like any tool error.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sandmem._errors import ModelBehaviorError, UserError
from sandmem.agent._context import RunContextWrapper, ToolContext
from sandmem.agent._mcp import UNSET, MCPServer
from sandmem.agent._tools import FunctionTool, ToolErrorFunction, default_tool_error_function

if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool

    from sandmem.agent._agent import Agent

#: the keys ``Agent(mcp_config=...)`` understands
MCP_CONFIG_KEYS = frozenset({"convert_schemas_to_strict", "failure_error_function"})


def check_mcp_config(servers: Any, config: Any) -> None:
    """``Agent(mcp_servers=..., mcp_config=...)`` checked at construction."""
    if not isinstance(servers, list) or not all(isinstance(s, MCPServer) for s in servers):
        raise UserError(
            "Agent.mcp_servers must be a list of MCP servers (MCPServerStdio, "
            "MCPServerStreamableHttp)"
        )
    if not isinstance(config, dict):
        raise UserError("Agent.mcp_config must be a dict")
    unknown = set(config) - MCP_CONFIG_KEYS
    if unknown:
        raise UserError(
            f"Agent.mcp_config does not support {sorted(unknown)}; it takes "
            f"{sorted(MCP_CONFIG_KEYS)}"
        )


def tool_output(result: CallToolResult, structured: bool) -> Any:
    """What the model sees of an MCP tool result (see the module docstring)."""
    if structured and result.structured_content and not result.is_error:
        return json.dumps(result.structured_content)
    parts: list[dict[str, Any]] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append({"type": "input_text", "text": block.text})  # type: ignore[union-attr]
        elif kind == "image":
            mime, data = block.mime_type, block.data  # type: ignore[union-attr]
            parts.append({"type": "input_image", "image_url": f"data:{mime};base64,{data}"})
        else:
            text = block.model_dump_json(exclude_none=True)
            parts.append({"type": "input_text", "text": text})
    if all(part["type"] == "input_text" for part in parts):
        return "\n".join(part["text"] for part in parts)
    return parts


def _strict(schema: dict[str, Any]) -> dict[str, Any] | None:
    """``schema`` in the API's strict form, or ``None`` when it cannot be (free-form objects)."""
    from sandmem.agent._schema import strict_json_schema

    try:
        return strict_json_schema(schema)
    except (UserError, ValueError, TypeError):
        return None


def _function_tool(
    server: MCPServer, tool: Tool, failure: ToolErrorFunction | None, strict: bool
) -> FunctionTool:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    strict_form = _strict(schema) if strict else None

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise ModelBehaviorError(
                f"invalid JSON arguments for MCP tool {tool.name!r}: {exc}"
            ) from exc
        if not isinstance(parsed, dict):
            raise ModelBehaviorError(f"MCP tool {tool.name!r} needs a JSON object of arguments")
        result = await server.call_tool(tool.name, parsed)
        return tool_output(result, server.use_structured_content)

    return FunctionTool(
        name=tool.name,
        description=tool.description or tool.title or "",
        params_json_schema=strict_form or schema,
        on_invoke_tool=invoke,
        strict_json_schema=strict_form is not None,
        failure_error_function=failure,
    )


async def mcp_tools(agent: Agent, run_context: RunContextWrapper[Any]) -> list[FunctionTool]:
    """The function tools of the agent's MCP servers for one run, in server order (each server
    lists its tools now, or from its cache, and applies its filter)."""
    config: dict[str, Any] = dict(agent.mcp_config)
    default_failure = config.get("failure_error_function", default_tool_error_function)
    strict = bool(config.get("convert_schemas_to_strict", False))
    tools: list[FunctionTool] = []
    for server in agent.mcp_servers:
        own = server.failure_error_function
        failure = default_failure if own is UNSET else own
        for tool in await server.list_tools(run_context, agent):
            tools.append(_function_tool(server, tool, failure, strict))
    return tools
