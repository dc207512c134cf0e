"""Structured output: strict JSON schemas generated from Python types, and parsing the answer.

``output_schema_for(tp)`` turns a pydantic model (or any type pydantic can describe) into the
schema that the OpenAI "strict" JSON-schema response format accepts: every object closed
(``additionalProperties: false``), every property required, no ``title``/``default`` keywords.
Types whose schema is not an object (``list[int]``, ``str``...) are wrapped in an object with a
single ``response`` property, and ``parse_structured_output`` unwraps them again.
"""

from __future__ import annotations

import abc
import functools
import json
import re
from collections.abc import Hashable
from typing import Any, cast

from pydantic import BaseModel, TypeAdapter, ValidationError

from sandmem._errors import ModelBehaviorError, UserError
from sandmem._prompts import load_prompt, render_prompt
from sandmem.models._base import OutputSchema

#: key of the wrapper object used for types whose schema is not an object
WRAPPER_KEY = "response"

# keywords that strict mode rejects or that only add noise for the model
_DROPPED_KEYWORDS = frozenset({"title", "default"})
# keywords whose value is a mapping from names to schemas (not a schema itself)
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
# keywords whose value is one schema, or a list of schemas
_SCHEMA_VALUES = ("items", "not", "contains", "additionalItems")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")

_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")


def output_schema_for(tp: type[Any]) -> OutputSchema:
    """A strict-mode ``OutputSchema`` for ``tp`` (normally a pydantic model).

    Raises ``UserError`` when the type cannot be expressed in strict mode (e.g. a ``dict`` with
    free-form keys, or ``Any``).
    """
    try:
        raw = TypeAdapter(tp).json_schema()
    except Exception as exc:  # pydantic raises several error types for unsupported types
        raise UserError(
            f"cannot build a JSON schema for output type {_type_name(tp)}: {exc}. "
            "Use a pydantic model with typed fields."
        ) from exc
    raw = _hoist_root_ref(raw)
    if not _is_object_schema(raw):
        defs = raw.pop("$defs", None)
        raw = {"type": "object", "properties": {WRAPPER_KEY: raw}}
        if defs:
            raw["$defs"] = defs
    strict = _strictify(raw, path="#", root=raw, inlining=frozenset())
    return OutputSchema(name=_schema_name(tp), json_schema=strict, strict=True)


def strict_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (an object schema, e.g. a tool's arguments) in the API's strict form: every
    object closed, every property required, no ``title``/``default``. Raises ``UserError`` for
    free-form objects, which strict mode cannot express."""
    result: dict[str, Any] = _strictify(schema, path="#", root=schema, inlining=frozenset())
    return result


def is_wrapped(tp: type[Any]) -> bool:
    """Whether the schema for ``tp`` wraps it in a ``{"response": ...}`` object."""
    try:
        return _is_wrapped(cast(Hashable, tp))
    except TypeError:  # an unhashable type form: not memoised
        return _is_wrapped.__wrapped__(tp)


@functools.lru_cache(maxsize=256)
def _is_wrapped(tp: Any) -> bool:
    # memoised: every structured answer asks it (each phase-one extraction does)
    return not _is_object_schema(_hoist_root_ref(TypeAdapter(tp).json_schema()))


def parse_structured_output(tp: type[Any], text: str) -> Any:
    """Parse and validate the model's JSON answer as ``tp``.

    Raises ``ModelBehaviorError`` saying what was wrong when the text is not JSON or does not
    validate. A Markdown code fence around the JSON, and text before or after it, are
    tolerated (``json_answer``).
    """
    name = _type_name(tp)
    try:
        data = json_answer(text)
    except json.JSONDecodeError as exc:
        raise ModelBehaviorError(
            f"the model's structured output for {name} is not valid JSON ({exc}); "
            f"it answered: {_preview(text)}"
        ) from exc
    if is_wrapped(tp):
        if not isinstance(data, dict) or WRAPPER_KEY not in data:
            raise ModelBehaviorError(
                f"the model's structured output for {name} lacks the {WRAPPER_KEY!r} key; "
                f"it answered: {_preview(text)}"
            )
        data = data[WRAPPER_KEY]
    try:
        return TypeAdapter(tp).validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}"
            for err in exc.errors(include_url=False)
        )
        raise ModelBehaviorError(
            f"the model's structured output does not match {name}: {problems}; "
            f"it answered: {_preview(text)}"
        ) from exc


class AgentOutputSchemaBase(abc.ABC):
    """An agent's output format written by hand (``Agent(output_type=MySchema())``): the
    schema the model is asked to follow and how its answer is parsed."""

    @abc.abstractmethod
    def is_plain_text(self) -> bool:
        """True for plain text output (no schema is sent)."""

    @abc.abstractmethod
    def name(self) -> str:
        """The schema's name, as the API's response format names it."""

    @abc.abstractmethod
    def json_schema(self) -> dict[str, Any]:
        """The JSON schema of the output."""

    @abc.abstractmethod
    def is_strict_json_schema(self) -> bool:
        """Whether the schema is sent in the API's strict mode."""

    @abc.abstractmethod
    def validate_json(self, json_str: str) -> Any:
        """The final output parsed from the model's text (raise to reject it)."""


class AgentOutputSchema(AgentOutputSchemaBase):
    """The output format of a Python type; ``strict_json_schema=False`` sends its schema
    without strict mode, for types strict mode cannot express (``dict[int, str]``)."""

    def __init__(self, output_type: type[Any], strict_json_schema: bool = True) -> None:
        self.output_type = output_type
        self._strict = strict_json_schema
        if not self.is_plain_text():
            self._schema = (
                output_schema_for(output_type)
                if strict_json_schema
                else OutputSchema(_schema_name(output_type), _loose_schema(output_type), False)
            )

    def is_plain_text(self) -> bool:
        return self.output_type is None or self.output_type is str

    def name(self) -> str:
        return _type_name(self.output_type)

    def json_schema(self) -> dict[str, Any]:
        if self.is_plain_text():
            raise UserError("a plain-text output type has no JSON schema")
        return self._schema.json_schema

    def is_strict_json_schema(self) -> bool:
        return self._strict

    def validate_json(self, json_str: str) -> Any:
        return parse_structured_output(self.output_type, json_str)


def _loose_schema(tp: type[Any]) -> dict[str, Any]:
    raw = _hoist_root_ref(TypeAdapter(tp).json_schema())
    if _is_object_schema(raw):
        return raw
    defs = raw.pop("$defs", None)
    wrapped: dict[str, Any] = {"type": "object", "properties": {WRAPPER_KEY: raw}}
    if defs:
        wrapped["$defs"] = defs
    return wrapped


def agent_output_schema(output_type: Any) -> OutputSchema | None:
    """The response format an agent's ``output_type`` asks for (``None``: plain text)."""
    if output_type is None:
        return None
    if isinstance(output_type, AgentOutputSchemaBase):
        if output_type.is_plain_text():
            return None
        return OutputSchema(
            name=_NAME_OK.sub("_", output_type.name())[:64] or "output",
            json_schema=output_type.json_schema(),
            strict=output_type.is_strict_json_schema(),
        )
    return output_schema_for(output_type)


def parse_agent_output(output_type: Any, text: str) -> Any:
    """The final output parsed from the model's text for the agent's ``output_type``."""
    if not isinstance(output_type, AgentOutputSchemaBase):
        return parse_structured_output(output_type, text)
    if output_type.is_plain_text():
        return text
    try:
        return output_type.validate_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        raise ModelBehaviorError(
            f"the model's structured output was refused by {output_type.name()}: {exc}; "
            f"it answered: {_preview(text)}"
        ) from exc


def _strictify(schema: Any, *, path: str, root: dict[str, Any], inlining: frozenset[str]) -> Any:
    if not isinstance(schema, dict):
        return schema

    def sub(value: Any, where: str) -> Any:
        return _strictify(value, path=where, root=root, inlining=inlining)

    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED_KEYWORDS:
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: sub(v, f"{path}/{key}/{name}") for name, v in value.items()}
        elif key in _SCHEMA_VALUES:
            out[key] = sub(value, f"{path}/{key}")
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            # strict mode knows anyOf only; a pydantic tagged union (oneOf) means the same here
            target = "anyOf" if key == "oneOf" else key
            out[target] = [sub(v, f"{path}/{key}/{i}") for i, v in enumerate(value)]
        elif key != "discriminator":
            out[key] = value
    if _is_object_schema(out):
        extra = out.get("additionalProperties")
        if extra not in (None, False) or "properties" not in out:
            raise UserError(
                f"the output schema at {path} is an object with free-form keys, which strict "
                "structured output cannot express. Use a pydantic model with named fields "
                "(or a list of such models) instead of dict/Any."
            )
        out["additionalProperties"] = False
        out["required"] = list(out["properties"])
    if "$ref" in out and len(out) > 1:
        out = _inline_ref(out, path=path, root=root, inlining=inlining)
    return out


def _inline_ref(
    schema: dict[str, Any], *, path: str, root: dict[str, Any], inlining: frozenset[str]
) -> dict[str, Any]:
    """Strict mode allows no keywords beside ``$ref``: merge the referenced schema in.

    A recursive reference met while inlining keeps only its ``$ref``."""
    ref = schema["$ref"]
    if ref in inlining:
        return {"$ref": ref}
    prefix = "#/$defs/"
    if not isinstance(ref, str) or not ref.startswith(prefix):
        raise UserError(f"unsupported $ref {ref!r} at {path} in the output schema")
    target = root.get("$defs", {}).get(ref[len(prefix) :])
    if target is None:
        raise UserError(f"unresolved $ref {ref!r} at {path} in the output schema")
    merged = _strictify(target, path=ref, root=root, inlining=inlining | {ref})
    siblings = {k: v for k, v in schema.items() if k != "$ref"}
    return {**merged, **siblings}


def _hoist_root_ref(schema: dict[str, Any]) -> dict[str, Any]:
    """A root that is only a ``$ref`` (pydantic does this for recursive models) replaced by the
    definition it points to; strict mode needs an object at the root."""
    ref = schema.get("$ref")
    defs = schema.get("$defs", {})
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return schema
    target = defs.get(ref[len("#/$defs/") :])
    if not isinstance(target, dict):
        return schema
    siblings = {k: v for k, v in schema.items() if k not in ("$ref", "$defs")}
    return {**target, **siblings, "$defs": defs}


def _is_object_schema(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object" or ("properties" in schema and "type" not in schema)


def _schema_name(tp: type[Any]) -> str:
    name = _NAME_OK.sub("_", getattr(tp, "__name__", "") or "output")
    return name[:64] or "output"


def _type_name(tp: type[Any]) -> str:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__name__
    return getattr(tp, "__name__", repr(tp))


_FENCED = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\n(.*?)\n[ \t]*```", re.DOTALL)


def json_answer(text: str) -> Any:
    """The JSON value of a model's answer: the whole text, else a fenced block in it, else the
    first object or list in it with whatever follows cut off (small models add a sentence
    after the JSON, or wrap it in a fence). Raises ``json.JSONDecodeError`` (the whole text's)
    when none parses."""
    body = _strip_code_fence(text)
    try:
        return json.loads(body)
    except json.JSONDecodeError as first:
        for match in _FENCED.finditer(text):
            try:
                return json.loads(match.group(1))
            except json.JSONDecodeError:
                continue
        decoder = json.JSONDecoder()
        starts = sorted(i for i in (body.find("{"), body.find("[")) if i != -1)
        for start in starts:
            try:
                return decoder.raw_decode(body, start)[0]
            except json.JSONDecodeError:
                continue
        raise first


def json_repair_message(exc: Exception) -> str:
    """The follow-up sent once when a structured answer could not be parsed: what was wrong
    (without the answer itself, which the model has) and the form wanted."""
    problem = " ".join(str(exc).split("; it answered:", 1)[0].split())
    if len(problem) > 300:
        problem = problem[:297] + "..."
    return render_prompt(load_prompt("sandmem", "json_repair"), problem=problem)


def _strip_code_fence(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        inner = stripped[3:-3]
        first_newline = inner.find("\n")
        if first_newline != -1 and inner[:first_newline].strip().isalnum():
            inner = inner[first_newline + 1 :]
        return inner.strip()
    return stripped


def _preview(text: str, limit: int = 300) -> str:
    text = text.strip()
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + f" ... ({len(text)} characters)"
