"""``OpenAIResponsesModel``: a ``Model`` on the OpenAI Responses API (``client.responses.create``).

The canonical transcript already is in Responses item format, so input needs little work:
``reasoning`` items are not sent back (requests use ``store=False``, so the server cannot
resolve them), and known item types are reduced to the fields the API accepts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from openai.types.responses import Response

from sandmem._errors import ModelBehaviorError, ModelRequestError
from sandmem._items import Item, item_kind
from sandmem._usage import Usage
from sandmem.models._base import ModelRequest, ModelResponse, OutputSchema, ToolSpec
from sandmem.models._openai_common import (
    OpenAIModelBase,
    apply_extra_args,
    check_not_cut_off,
    raw_body_call,
    recover_text_tool_calls,
    resolve_client,
    set_if,
    tool_choice,
    translated_errors,
)

_FUNCTION_CALL_KEYS = ("type", "call_id", "name", "arguments")
_FUNCTION_OUTPUT_KEYS = ("type", "call_id", "output")


class OpenAIResponsesModel(OpenAIModelBase):
    """A model served through the Responses API (see ``OpenAIModelBase`` for the arguments)."""

    async def get_response(self, request: ModelRequest) -> ModelResponse:
        kwargs = build_request(self.model, request)
        with translated_errors(self.model, "Responses API"):
            client = await resolve_client(self._client, request.settings)
            response = await client.responses.create(**raw_body_call(kwargs, required=("input",)))
        if not isinstance(response, Response):
            raise ModelBehaviorError(
                f"Responses API returned {type(response).__name__}, expected a Response"
            )
        result = _model_response(self.model, response)
        result.output = recover_text_tool_calls(result.output, request, client)
        check_not_cut_off(
            result.output, _cut_off(response), self.model, request.settings.max_tokens
        )
        return result

    async def stream_response(self, request: ModelRequest) -> AsyncIterator[Any]:
        """Stream through ``responses.create(stream=True)``: yields the API's own events (text
        deltas are ``response.output_text.delta``), then the ``ModelResponse`` built from the
        ``response.completed`` event."""
        kwargs = build_request(self.model, request)
        final: Response | None = None
        with translated_errors(self.model, "Responses API"):
            client = await resolve_client(self._client, request.settings)
            stream = await client.responses.create(
                **raw_body_call(kwargs, required=("input",)), stream=True
            )
            async with stream:
                async for event in stream:
                    if event.type in ("response.completed", "response.failed"):
                        final = event.response
                    elif event.type == "response.incomplete":
                        final = event.response
                    yield event
        if final is None:
            raise ModelBehaviorError(
                f"the Responses API stream for model {self.model!r} ended without a completed "
                "response"
            )
        result = _model_response(self.model, final)
        result.output = recover_text_tool_calls(result.output, request, client)
        check_not_cut_off(result.output, _cut_off(final), self.model, request.settings.max_tokens)
        yield result


def _model_response(model: str, response: Response) -> ModelResponse:
    _check_status(model, response)
    return ModelResponse(
        output=output_items(response),
        usage=_usage(response),
        response_id=response.id,
        model=response.model,
    )


def build_request(model: str, request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of ``client.responses.create`` for ``request``."""
    kwargs: dict[str, Any] = {
        "model": model,
        "input": input_items(request.input),
        "store": False,
    }
    if request.instructions:
        kwargs["instructions"] = request.instructions
    if request.tools:
        kwargs["tools"] = [_tool(spec) for spec in request.tools]
    if request.output_schema is not None:
        kwargs["text"] = {"format": _text_format(request.output_schema)}
    if request.prompt is not None:
        kwargs["prompt"] = request.prompt
    apply_settings(kwargs, request)
    return kwargs


def apply_settings(kwargs: dict[str, Any], request: ModelRequest) -> None:
    """``request.settings`` (and server-side state) as Responses API arguments, in place."""
    settings = request.settings
    server_state = request.previous_response_id or request.conversation_id
    if settings.store is not None:
        kwargs["store"] = settings.store
    elif server_state:
        kwargs.pop("store")  # continuing server-side state needs stored responses
    set_if(
        kwargs,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_output_tokens=settings.max_tokens,
        truncation=settings.truncation,
        metadata=settings.metadata,
        top_logprobs=settings.top_logprobs,
        previous_response_id=request.previous_response_id,
        conversation=request.conversation_id,
    )
    if settings.reasoning is not None:
        kwargs["reasoning"] = settings.reasoning.model_dump(exclude_none=True)
    if settings.tool_choice is not None:
        kwargs["tool_choice"] = tool_choice(settings.tool_choice, chat=False)
    if settings.parallel_tool_calls is not None and request.tools:
        kwargs["parallel_tool_calls"] = settings.parallel_tool_calls
    if settings.verbosity is not None:
        kwargs["text"] = {**kwargs.get("text", {}), "verbosity": settings.verbosity}
    include = list(settings.response_include or [])
    if settings.top_logprobs is not None and "message.output_text.logprobs" not in include:
        include.append("message.output_text.logprobs")
    if include:
        kwargs["include"] = include
    apply_extra_args(kwargs, settings)


def input_items(items: list[Item]) -> list[Item]:
    """Canonical items as Responses API input (reasoning items dropped)."""
    converted: list[Item] = []
    for item in items:
        kind = item_kind(item)
        if kind == "reasoning":
            continue
        if kind == "message":
            message = {"role": item["role"], "content": item.get("content", "")}
            converted.append({"type": "message", **message})
        elif kind == "function_call":
            converted.append({k: item[k] for k in _FUNCTION_CALL_KEYS if k in item})
        elif kind == "function_call_output":
            converted.append({k: item[k] for k in _FUNCTION_OUTPUT_KEYS if k in item})
        else:
            converted.append(dict(item))
    return converted


def output_items(response: Response) -> list[Item]:
    """The response's output as canonical items."""
    items: list[Item] = []
    for out in response.output:
        if out.type == "message":
            items.append(_message_item(out.model_dump(exclude_none=True)))
        elif out.type == "function_call":
            items.append(
                {
                    "type": "function_call",
                    "call_id": out.call_id,
                    "name": out.name,
                    "arguments": out.arguments,
                }
            )
        else:
            items.append(out.model_dump(exclude_none=True))
    return items


def _message_item(data: dict[str, Any]) -> Item:
    texts: list[str] = []
    refusals: list[str] = []
    for part in data.get("content", []):
        if part.get("type") == "output_text":
            texts.append(part.get("text", ""))
        elif part.get("type") == "refusal":
            refusals.append(part.get("refusal", ""))
    item: Item = {"type": "message", "role": "assistant", "content": "".join(texts)}
    if refusals and not texts:
        item["content"] = "".join(refusals)
    return item


def _cut_off(response: Response) -> bool:
    """Whether the response stopped at its output token limit."""
    details = response.incomplete_details
    return response.status == "incomplete" and getattr(details, "reason", None) == (
        "max_output_tokens"
    )


def _check_status(model: str, response: Response) -> None:
    if response.status == "failed":
        detail = response.error.message if response.error is not None else "no detail given"
        raise ModelRequestError(
            f"Responses API request for model {model!r} failed on the server: {detail}; "
            "try again later",
            retryable=True,
        )


def _usage(response: Response) -> Usage:
    usage = response.usage
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
    )


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.params_json_schema,
        "strict": spec.strict,
    }


def _text_format(schema: OutputSchema) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "name": schema.name,
        "schema": schema.json_schema,
        "strict": schema.strict,
    }
