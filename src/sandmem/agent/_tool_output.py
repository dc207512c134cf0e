"""What a tool's return value becomes for the model: text, or content parts.

A tool returns text, any value (sent as JSON), or the reference SDK's result types:
``ToolOutputText``, ``ToolOutputImage`` and ``ToolOutputFileContent`` (or their dict forms
``{"type": "image", "image_url": ...}``, or a list of them), which become ``input_text`` /
``input_image`` / ``input_file`` content parts.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ValidationError, model_validator

#: what a tool returns to the model: text, or a list of content parts (e.g. an image)
ToolOutput = str | list[dict[str, Any]]


class ToolOutputText(BaseModel):
    """A tool result sent to the model as text (a tool may return it, or a list of parts)."""

    type: Literal["text"] = "text"
    text: str


class ToolOutputImage(BaseModel):
    """A tool result sent to the model as an image: an ``image_url`` (a URL or a data URL) or
    a ``file_id``; ``detail`` is the vision detail."""

    type: Literal["image"] = "image"
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto"] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ToolOutputImage:
        if self.image_url is None and self.file_id is None:
            raise ValueError("ToolOutputImage needs an image_url or a file_id")
        return self


class ToolOutputFileContent(BaseModel):
    """A tool result sent to the model as a file: ``file_data`` (base64), ``file_url`` or
    ``file_id``, with an optional ``filename``."""

    type: Literal["file"] = "file"
    file_data: str | None = None
    file_url: str | None = None
    file_id: str | None = None
    filename: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ToolOutputFileContent:
        if self.file_data is None and self.file_url is None and self.file_id is None:
            raise ValueError("ToolOutputFileContent needs file_data, file_url or file_id")
        return self


#: the dict forms a tool may return instead (``{"type": "image", "image_url": ...}``)
ToolOutputTextDict = dict[str, Any]
ToolOutputImageDict = dict[str, Any]
ToolOutputFileContentDict = dict[str, Any]

_OUTPUT_PARTS: dict[str, tuple[type[BaseModel], str]] = {
    "text": (ToolOutputText, "input_text"),
    "image": (ToolOutputImage, "input_image"),
    "file": (ToolOutputFileContent, "input_file"),
}


def _content_part(value: Any) -> dict[str, Any] | None:
    """``value`` as a content part when it is a ``ToolOutput*`` (object or dict form)."""
    if isinstance(value, dict) and value.get("type") in _OUTPUT_PARTS:
        try:
            value = _OUTPUT_PARTS[value["type"]][0].model_validate(value)
        except ValidationError:
            return None
    if not isinstance(value, ToolOutputText | ToolOutputImage | ToolOutputFileContent):
        return None
    part = value.model_dump(exclude_none=True)
    part["type"] = _OUTPUT_PARTS[value.type][1]
    return part


def to_tool_output(value: Any) -> ToolOutput:
    """A tool's return value as what the model sees: text as is; ``ToolOutputText`` /
    ``ToolOutputImage`` / ``ToolOutputFileContent`` (or their dict forms, or a list of them) as
    content parts; a pydantic model or other value as JSON."""
    if isinstance(value, str):
        return value
    single = _content_part(value)
    if single is not None:
        return [single]
    if isinstance(value, list | tuple) and value:
        parts = [_content_part(v) for v in value]
        if all(part is not None for part in parts):
            return [part for part in parts if part is not None]
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    if isinstance(value, list) and all(isinstance(v, dict) and "type" in v for v in value):
        return value
    try:
        return json.dumps(value)
    except TypeError:
        return str(value)
