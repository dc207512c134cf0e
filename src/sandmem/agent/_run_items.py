"""Typed views of transcript items, and ``ItemHelpers``, in the reference's shapes.

sandmem's canonical item is a plain dict in the Responses API format (``sandmem._items``), and
that is what memory records. Code written for the reference reads a run's items as objects:
``isinstance(item, MessageOutputItem)``, ``item.type == "tool_call_item"``, ``item.agent``,
``item.raw_item.name``. The classes here give both at once: each is a ``dict`` subclass holding
the item unchanged (``item["type"] == "function_call"``, ``json.dumps(item)`` works), with the
reference's attributes on top. Copying or pickling one gives back the plain dict.

- ``item.type`` — the reference's item type (``message_output_item``, ``tool_call_item``,
  ``tool_call_output_item``, ``reasoning_item``); the dict's own ``"type"`` key is untouched;
- ``item.raw_item`` — the same item with attribute access (``raw_item.content[0].text``);
- ``item.agent`` — the agent whose turn produced it; ``item.output`` for tool outputs.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from sandmem._items import Item, content_texts, input_message, item_kind

if TYPE_CHECKING:
    from sandmem.agent._agent import Agent

RunItemType = Literal[
    "message_output_item", "tool_call_item", "tool_call_output_item", "reasoning_item"
]


class _PlainWhenCopied(dict[str, Any]):
    """A dict subclass that copying, deep-copying or pickling turns back into a plain dict."""

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class ItemView(_PlainWhenCopied):
    """A dict whose keys also read as attributes, nested dicts and lists of dicts included
    (``view.content[0].text``). A missing key raises ``AttributeError``."""

    def __getattr__(self, name: str) -> Any:
        try:
            return _view(self[name])
        except KeyError:
            raise AttributeError(name) from None


def _view(value: Any) -> Any:
    if isinstance(value, dict) and not isinstance(value, ItemView):
        return ItemView(value)
    if isinstance(value, list):
        return [_view(v) for v in value]
    return value


class RunItem(_PlainWhenCopied):
    """A transcript item produced by a run: the plain item dict plus the reference's
    ``type``, ``raw_item``, ``agent`` and ``to_input_item()``."""

    item_type: ClassVar[RunItemType] = "message_output_item"

    def __init__(self, raw_item: Item, agent: Agent | None = None) -> None:
        super().__init__(raw_item)
        self._agent = agent

    @property
    def type(self) -> RunItemType:
        return self.item_type

    @property
    def raw_item(self) -> ItemView:
        return ItemView(self)

    @property
    def agent(self) -> Agent | None:
        return self._agent

    @property
    def output(self) -> Any:
        return None

    def to_input_item(self) -> Item:
        return dict(self)


class MessageOutputItem(RunItem):
    """An assistant message."""

    item_type = "message_output_item"


class ToolCallItem(RunItem):
    """A function tool call."""

    item_type = "tool_call_item"


class ToolCallOutputItem(RunItem):
    """A tool call's output (``output``: what the model sees)."""

    item_type = "tool_call_output_item"

    @property
    def output(self) -> Any:
        return self.get("output")


class ReasoningItem(RunItem):
    """A reasoning item."""

    item_type = "reasoning_item"


_CLASSES: dict[str, type[RunItem]] = {
    "message": MessageOutputItem,
    "function_call": ToolCallItem,
    "function_call_output": ToolCallOutputItem,
    "reasoning": ReasoningItem,
}


def as_run_item(item: Item, agent: Agent | None) -> Item:
    """``item`` as its typed view (kinds without one stay plain dicts)."""
    if isinstance(item, RunItem):
        return item
    cls = _CLASSES.get(item_kind(item))
    return item if cls is None else cls(item, agent)


def _message(item: Any) -> Item | None:
    raw = item if isinstance(item, dict) else getattr(item, "raw_item", None)
    if isinstance(raw, dict) and item_kind(raw) == "message" and raw.get("role") == "assistant":
        return raw
    return None


class ItemHelpers:
    """Text out of items, and items out of text (the reference's helper of the same name).
    Each method takes sandmem's dict items, the typed views above, or the reference's
    ``RunItem``-like objects with a ``raw_item``."""

    @classmethod
    def extract_last_content(cls, message: Any) -> str:
        """The last text part of an assistant message (``""`` for anything else)."""
        raw = _message(message)
        if raw is None:
            return ""
        texts = content_texts(raw.get("content"))
        return texts[-1] if texts else ""

    @classmethod
    def extract_last_text(cls, message: Any) -> str | None:
        """Like ``extract_last_content``, but ``None`` when there is no text."""
        raw = _message(message)
        if raw is None:
            return None
        texts = content_texts(raw.get("content"))
        return texts[-1] if texts else None

    @classmethod
    def text_message_output(cls, message: Any) -> str:
        """All the text of one assistant message, concatenated."""
        raw = _message(message)
        return "" if raw is None else "".join(content_texts(raw.get("content")))

    @classmethod
    def text_message_outputs(cls, items: list[Any]) -> str:
        """The text of every assistant message in ``items``, concatenated."""
        return "".join(cls.text_message_output(item) for item in items)

    @classmethod
    def input_to_new_input_list(cls, input: str | list[Any]) -> list[Item]:
        """A run input as a new list of items (a string becomes one user message)."""
        if isinstance(input, str):
            return [input_message(input)]
        return [copy.deepcopy(dict(item)) for item in input]

    @classmethod
    def tool_call_output_item(cls, tool_call: Any, output: Any) -> Item:
        """The output item answering ``tool_call`` (a dict or an object with ``call_id``)."""
        call_id = tool_call.get("call_id") if isinstance(tool_call, dict) else tool_call.call_id
        text = output if isinstance(output, str | list) else str(output)
        return {"type": "function_call_output", "call_id": call_id, "output": text}
