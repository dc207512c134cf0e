"""``OpenAIChatCompletionsModel``: a ``Model`` on the Chat Completions API.

Works with any OpenAI-compatible server (Ollama, vLLM, llama.cpp server, LiteLLM proxy).
Conversion from canonical (Responses-format) items to chat messages:

- ``instructions`` become the first ``system`` message; ``developer`` messages become ``system``;
- consecutive ``function_call`` items become one assistant message with ``tool_calls`` (joined
  to the assistant text right before them), keeping every ``call_id`` as the tool call ``id``;
- a ``function_call_output`` becomes a ``tool`` message with the same ``tool_call_id``; images in
  a tool output cannot go in a tool message, so they follow in a ``user`` message placed right
  after the group of tool messages;
- ``reasoning`` items are not sent.

Back from the API: text -> an assistant message item, each tool call -> a ``function_call``
item, and a server's ``reasoning_content`` (vLLM, DeepSeek...) -> a ``reasoning`` item.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

from openai.types.chat import ChatCompletion

from sandmem._errors import ModelBehaviorError, UserError
from sandmem._items import Item, content_text, item_kind
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

Message = dict[str, Any]

_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


class OpenAIChatCompletionsModel(OpenAIModelBase):
    """A model served through the Chat Completions API (arguments: ``OpenAIModelBase``)."""

    async def get_response(self, request: ModelRequest) -> ModelResponse:
        kwargs = build_request(self.model, request)
        with translated_errors(self.model, "Chat Completions"):
            client = await resolve_client(self._client, request.settings)
            completion = await client.chat.completions.create(
                **raw_body_call(kwargs, required=("messages",))
            )
        if not isinstance(completion, ChatCompletion):
            raise ModelBehaviorError(
                f"Chat Completions returned {type(completion).__name__}, expected a ChatCompletion"
            )
        output = recover_text_tool_calls(output_items(self.model, completion), request, client)
        finish = [str(c.finish_reason) for c in completion.choices if c.finish_reason]
        check_not_cut_off(output, finish[:1] == ["length"], self.model, request.settings.max_tokens)
        return ModelResponse(
            output=output,
            usage=_usage(completion),
            response_id=completion.id,
            model=completion.model,
            finish_reasons=finish,
        )

    async def stream_response(self, request: ModelRequest) -> AsyncIterator[Any]:
        """Stream through ``chat.completions.create(stream=True)``. Text deltas are yielded as
        Responses-style ``response.output_text.delta`` events (as the reference does), then the
        ``ModelResponse`` assembled from the chunks. Usage is asked for with
        ``stream_options.include_usage`` unless ``ModelSettings.include_usage`` is ``False``."""
        from sandmem.models._chat_stream import ChatStreamAccumulator

        kwargs = build_request(self.model, request)
        kwargs["stream"] = True
        if request.settings.include_usage is not False:
            kwargs["stream_options"] = {"include_usage": True}
        acc = ChatStreamAccumulator(self.model)
        with translated_errors(self.model, "Chat Completions"):
            client = await resolve_client(self._client, request.settings)
            stream = await client.chat.completions.create(
                **raw_body_call(kwargs, required=("messages",))
            )
            async with stream:
                async for chunk in stream:
                    for event in acc.add(chunk):
                        yield event
        response = acc.response(assemble_items)
        response.output = recover_text_tool_calls(response.output, request, client)
        cut_off = (response.finish_reasons or [])[:1] == ["length"]
        check_not_cut_off(response.output, cut_off, self.model, request.settings.max_tokens)
        yield response


def build_request(model: str, request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of ``client.chat.completions.create`` for ``request``."""
    if request.prompt is not None:
        raise UserError(
            "an agent's stored prompt (Agent(prompt=...)) needs the Responses API; Chat "
            "Completions has no prompts: use OpenAIResponsesModel, or instructions instead"
        )
    kwargs: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(request.instructions, request.input),
    }
    if request.tools:
        kwargs["tools"] = [_tool(spec) for spec in request.tools]
    if request.output_schema is not None:
        kwargs["response_format"] = _response_format(request.output_schema)
    apply_settings(kwargs, request)
    return kwargs


def apply_settings(kwargs: dict[str, Any], request: ModelRequest) -> None:
    """``request.settings`` as Chat Completions arguments, in place."""
    settings = request.settings
    set_if(
        kwargs,
        temperature=settings.temperature,
        top_p=settings.top_p,
        frequency_penalty=settings.frequency_penalty,
        presence_penalty=settings.presence_penalty,
        max_completion_tokens=settings.max_tokens,
        verbosity=settings.verbosity,
        metadata=settings.metadata,
        store=settings.store,
        top_logprobs=settings.top_logprobs,
    )
    if settings.top_logprobs is not None:
        kwargs["logprobs"] = True
    effort = settings.reasoning.effort if settings.reasoning is not None else None
    if effort is not None:
        kwargs["reasoning_effort"] = effort
    if settings.tool_choice is not None:
        kwargs["tool_choice"] = tool_choice(settings.tool_choice, chat=True)
    if settings.parallel_tool_calls is not None and request.tools:
        kwargs["parallel_tool_calls"] = settings.parallel_tool_calls
    apply_extra_args(kwargs, settings)


def chat_messages(instructions: str | None, items: list[Item]) -> list[Message]:
    """Canonical items (and the instructions) as Chat Completions messages."""
    messages: list[Message] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    images: list[dict[str, Any]] = []  # image parts of the current group of tool outputs
    for item in items:
        kind = item_kind(item)
        if kind != "function_call_output" and images:
            messages.append({"role": "user", "content": images})
            images = []
        if kind == "message":
            messages.append(_message(item))
        elif kind == "function_call":
            _add_tool_call(messages, item)
        elif kind == "function_call_output":
            text, found = _tool_output(item.get("output", ""))
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": text})
            images.extend(found)
        elif kind != "reasoning":
            raise UserError(
                f"Chat Completions cannot send a transcript item of type {kind!r}; "
                "use the Responses API (SANDMEM_OPENAI_API=responses) for it"
            )
    if images:
        messages.append({"role": "user", "content": images})
    return messages


def output_items(model: str, completion: ChatCompletion) -> list[Item]:
    """The completion's first choice as canonical items."""
    if not completion.choices:
        raise ModelBehaviorError(f"Chat Completions for {model!r} returned no choices")
    message = completion.choices[0].message
    calls: list[tuple[str | None, str, str]] = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if function is None:
            raise ModelBehaviorError(
                f"Chat Completions for {model!r} returned a tool call of type "
                f"{getattr(call, 'type', '?')!r}; only function tools are supported"
            )
        calls.append((call.id, function.name, function.arguments or "{}"))
    reasoning = (message.model_extra or {}).get("reasoning_content")
    return assemble_items(
        text=message.content or message.refusal or "",
        tool_calls=calls,
        reasoning=reasoning if isinstance(reasoning, str) else None,
    )


def assemble_items(
    *, text: str, tool_calls: list[tuple[str | None, str, str]], reasoning: str | None
) -> list[Item]:
    """Canonical items from an answer's parts: reasoning, text, then each (id, name,
    arguments) tool call. Shared by whole and streamed completions."""
    items: list[Item] = []
    if reasoning:
        items.append(
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}]}
        )
    if text or not tool_calls:
        items.append({"type": "message", "role": "assistant", "content": text})
    for call_id, name, arguments in tool_calls:
        items.append(
            {
                "type": "function_call",
                # some compatible servers omit ids; a generated one keeps calls and outputs paired
                "call_id": call_id or f"call_{uuid.uuid4().hex[:24]}",
                "name": name,
                "arguments": arguments or "{}",
            }
        )
    return items


def _message(item: Item) -> Message:
    role = item["role"]
    content = item.get("content", "")
    if role in ("system", "developer"):
        return {"role": "system", "content": content_text(content)}
    if role == "assistant":
        return {"role": "assistant", "content": content_text(content)}
    if isinstance(content, list):
        return {"role": role, "content": [_content_part(part) for part in content]}
    return {"role": role, "content": content}


def _add_tool_call(messages: list[Message], item: Item) -> None:
    last = messages[-1] if messages else None
    if last is None or last["role"] != "assistant":
        last = {"role": "assistant", "content": None}
        messages.append(last)
    if not last.get("content"):
        last["content"] = None
    last.setdefault("tool_calls", []).append(
        {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"},
        }
    )


def _tool_output(output: Any) -> tuple[str, list[dict[str, Any]]]:
    """A tool output as (text for the tool message, image parts for a user message)."""
    if isinstance(output, str):
        return output, []
    if not isinstance(output, list):
        return str(output), []
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for part in output:
        converted = _content_part(part)
        if converted["type"] == "text":
            texts.append(converted["text"])
        else:
            images.append(converted)
    if images:
        texts.append(f"[{len(images)} image(s) from this tool follow in the next user message]")
    return "\n".join(texts), images


def _content_part(part: Any) -> dict[str, Any]:
    if isinstance(part, str):
        return {"type": "text", "text": part}
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return {"type": "text", "text": part.get("text", "")}
    if kind == "input_image" and part.get("image_url"):
        image: dict[str, Any] = {"url": part["image_url"]}
        if part.get("detail"):
            image["detail"] = part["detail"]
        return {"type": "image_url", "image_url": image}
    if kind == "image_url":
        return dict(part)
    raise UserError(
        f"Chat Completions cannot send a content part of type {kind!r} (only text and images "
        "given by URL or data URL); use the Responses API for it"
    )


def _usage(completion: ChatCompletion) -> Usage:
    usage = completion.usage
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
    )


def _tool(spec: ToolSpec) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.params_json_schema,
    }
    if spec.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _response_format(schema: OutputSchema) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": schema.name, "schema": schema.json_schema, "strict": schema.strict},
    }
