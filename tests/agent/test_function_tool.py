"""function_tool: the reference's options, docstring styles, failure handling, enablement."""

from __future__ import annotations

from typing import Any

import pytest

from sandmem import (
    Agent,
    FunctionTool,
    RunContextWrapper,
    Runner,
    UserError,
    default_tool_error_function,
    function_tool,
)
from sandmem._docstrings import parse_docstring
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, tool_call, tool_outputs


def google(city: str, days: int = 3) -> str:
    """Plan a trip.

    Picks sights for each day.

    Args:
        city: Where to go.
        days (int): How long to stay,
            counted in nights.

    Returns:
        The plan.
    """
    return f"{city}:{days}"


def numpy(city: str, days: int = 3) -> str:
    """Plan a trip.

    Parameters
    ----------
    city : str
        Where to go.
    days : int
        How long to stay.

    Returns
    -------
    str
    """
    return f"{city}:{days}"


def sphinx(city: str, days: int = 3) -> str:
    """Plan a trip.

    :param city: Where to go.
    :param int days: How long to stay.
    :returns: The plan.
    """
    return f"{city}:{days}"


@pytest.mark.parametrize("fn", [google, numpy, sphinx], ids=["google", "numpy", "sphinx"])
def test_docstring_styles_give_argument_descriptions(fn: Any) -> None:
    tool = function_tool(fn)
    props = tool.params_json_schema["properties"]
    assert props["city"]["description"] == "Where to go."
    assert props["days"]["description"].startswith("How long to stay")
    assert tool.description.startswith("Plan a trip.")
    assert "Returns" not in tool.description and ":param" not in tool.description


def test_google_continuation_lines_are_joined() -> None:
    info = parse_docstring(google.__doc__)
    assert info.params["days"] == "How long to stay, counted in nights."
    assert info.description == "Plan a trip.\n\nPicks sights for each day."


def test_plain_docstring_and_none() -> None:
    assert parse_docstring("Just text.\n\nMore text.").description == "Just text.\n\nMore text."
    assert parse_docstring(None).params == {}


def test_use_docstring_info_false() -> None:
    tool = function_tool(use_docstring_info=False)(google)
    assert tool.description == ""
    assert "description" not in tool.params_json_schema["properties"]["city"]


def test_overrides_and_aliases() -> None:
    ref = function_tool(name_override="plan", description_override="Plan it.")(google)
    short = function_tool(name="plan2", description="Plan again.")(google)
    assert (ref.name, ref.description) == ("plan", "Plan it.")
    assert (short.name, short.description) == ("plan2", "Plan again.")


def test_strict_mode_schema_and_opt_out() -> None:
    strict = function_tool(google)
    assert strict.params_json_schema["required"] == ["city", "days"]
    assert strict.params_json_schema["additionalProperties"] is False
    assert strict.spec().strict is True
    loose = function_tool(strict_mode=False)(google)
    assert loose.params_json_schema["required"] == ["city"]
    assert loose.spec().strict is False


def test_strict_mode_refuses_free_form_dicts() -> None:
    def tags(values: dict[str, Any]) -> str:
        return ""

    with pytest.raises(UserError, match="strict_mode=False"):
        function_tool(tags)
    assert function_tool(strict_mode=False)(tags).name == "tags"


def test_schema_built_once_per_tool() -> None:
    tool = function_tool(google)
    assert tool.spec() is tool.spec()


async def test_closures_made_per_run_share_their_shape_but_call_their_own_function() -> None:
    def make(prefix: str, days: int = 3) -> FunctionTool:
        @function_tool
        async def plan(city: str, nights: int = days) -> str:
            """Plan a trip.

            Args:
                city: Where to go.
            """
            return f"{prefix}{city}:{nights}"

        return plan

    a, b, c = make("a-"), make("b-"), make("c-", days=5)
    assert a.params_json_schema == b.params_json_schema
    assert a.params_json_schema is not b.params_json_schema  # each tool owns its copy
    assert a.description == "Plan a trip."
    ctx: Any = None
    assert await a.on_invoke_tool(ctx, '{"city": "Rome"}') == "a-Rome:3"
    assert await b.on_invoke_tool(ctx, '{"city": "Rome"}') == "b-Rome:3"
    # another default is another signature: its own model (the default is 5 here)
    assert await c.on_invoke_tool(ctx, '{"city": "Rome"}') == "c-Rome:5"


async def test_spec_objects_reused_across_turns() -> None:
    tool = function_tool(google)

    def fn(request: ModelRequest) -> Any:
        if len(model.requests) < 3:
            return [tool_call(tool.name, {"city": "Rome", "days": 1})]
        return "done"

    model = FunctionModel(fn)
    await Runner.run(Agent("t", model=model, tools=[tool]), "go")
    specs = [request.tools[0] for request in model.requests]
    assert all(spec is specs[0] for spec in specs)


def _failing_model(name: str) -> FunctionModel:
    def fn(request: ModelRequest) -> Any:
        if not tool_outputs(request):
            return [tool_call(name, {"x": 1}, "f1")]
        return "saw: " + str(tool_outputs(request)[0]["output"])

    return FunctionModel(fn)


async def test_failure_error_function_shapes_the_output() -> None:
    def explain(ctx: RunContextWrapper[Any], error: Exception) -> str:
        return f"tool failed politely: {error}"

    @function_tool(failure_error_function=explain)
    def fragile(x: int) -> str:
        """Fails."""
        raise ValueError("bad x")

    result = await Runner.run(Agent("t", model=_failing_model("fragile"), tools=[fragile]), "go")
    assert result.final_output == "saw: tool failed politely: bad x"


async def test_default_failure_text_and_none_fails_the_run() -> None:
    @function_tool
    def fragile(x: int) -> str:
        """Fails."""
        raise ValueError("bad x")

    result = await Runner.run(Agent("t", model=_failing_model("fragile"), tools=[fragile]), "go")
    assert result.final_output == "saw: Error: ValueError: bad x"
    assert default_tool_error_function(RunContextWrapper(None), KeyError("k")).startswith(
        "Error: KeyError"
    )

    @function_tool(failure_error_function=None)
    def strict_fragile(x: int) -> str:
        """Fails."""
        raise ValueError("bad x")

    agent = Agent("t", model=_failing_model("strict_fragile"), tools=[strict_fragile])
    with pytest.raises(ValueError, match="bad x"):
        await Runner.run(agent, "go")


async def test_is_enabled_bool_and_callable() -> None:
    @function_tool(is_enabled=False)
    def hidden() -> str:
        """Hidden."""
        return ""

    def only_admins(ctx: RunContextWrapper[dict[str, bool]], agent: Agent) -> bool:
        return ctx.context["admin"]

    @function_tool(is_enabled=only_admins)
    def admin() -> str:
        """Admin only."""
        return ""

    async def names(context: dict[str, bool]) -> list[str]:
        model = FunctionModel(lambda r: "ok")
        await Runner.run(Agent("t", model=model, tools=[hidden, admin]), "x", context=context)
        return [spec.name for spec in model.requests[0].tools]

    assert await names({"admin": True}) == ["admin"]
    assert await names({"admin": False}) == []


async def test_calling_a_disabled_tool_is_an_unknown_tool() -> None:
    @function_tool(is_enabled=False)
    def hidden(x: int) -> str:
        """Hidden."""
        return "secret"

    result = await Runner.run(Agent("t", model=_failing_model("hidden"), tools=[hidden]), "go")
    assert "UnknownTool" in result.final_output


async def test_reference_style_function_tool_construction() -> None:
    async def invoke(ctx: Any, arguments: str) -> str:
        return f"{ctx.tool_name} got {arguments}"

    tool = FunctionTool(
        name="raw",
        description="A hand-made tool.",
        params_json_schema={"type": "object", "properties": {}, "additionalProperties": False},
        on_invoke_tool=invoke,
    )
    model = _failing_model("raw")
    result = await Runner.run(Agent("t", model=model, tools=[tool]), "go")
    assert result.final_output == 'saw: raw got {"x": 1}'
    assert await tool.on_invoke("{}") == "raw got {}"


def test_context_parameter_must_come_first() -> None:
    def bad(x: int, ctx: RunContextWrapper[Any]) -> str:
        return ""

    with pytest.raises(UserError, match="must come first"):
        function_tool(bad)
