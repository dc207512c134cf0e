"""Strict JSON schemas from pydantic models, and parsing structured output."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from sandmem._errors import ModelBehaviorError, UserError
from sandmem.agent._schema import output_schema_for, parse_structured_output


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Author(BaseModel):
    name: str = Field(title="Full name", description="who wrote it")
    email: str | None = None


class Book(BaseModel):
    title: str  # a *property* named like the keyword must survive
    default: int = 3
    authors: list[Author]
    editor: Author | None = Field(default=None, description="the editor, if any")
    cover: Color = Field(default=Color.RED, description="cover colour")
    kind: Literal["novel", "essay"] = "novel"


class Cat(BaseModel):
    pet: Literal["cat"]
    lives: int


class Dog(BaseModel):
    pet: Literal["dog"]
    good: bool


class Owner(BaseModel):
    pet: Annotated[Cat | Dog, Field(discriminator="pet")]


class Tree(BaseModel):
    label: str
    children: list[Tree] = Field(default_factory=list, description="sub-trees")


def walk(schema: Any, path: str = "#") -> list[tuple[str, dict[str, Any]]]:
    """Every sub-schema with its path (property names are not visited as keywords)."""
    found: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(schema, dict):
        return found
    found.append((path, schema))
    for key, value in schema.items():
        if key in ("properties", "$defs"):
            for name, sub in value.items():
                found += walk(sub, f"{path}/{key}/{name}")
        elif key in ("items", "not"):
            found += walk(value, f"{path}/{key}")
        elif key in ("anyOf", "oneOf", "allOf"):
            for i, sub in enumerate(value):
                found += walk(sub, f"{path}/{key}/{i}")
    return found


def assert_strict(schema: dict[str, Any]) -> None:
    for path, sub in walk(schema):
        assert "title" not in sub and "default" not in sub, path
        assert "oneOf" not in sub and "discriminator" not in sub, path
        if "$ref" in sub:
            assert list(sub) == ["$ref"], path
        if sub.get("type") == "object":
            assert sub["additionalProperties"] is False, path
            assert sub["required"] == list(sub["properties"]), path


@pytest.mark.parametrize("tp", [Book, Owner, Tree])
def test_schema_is_strict_everywhere(tp: type[BaseModel]) -> None:
    out = output_schema_for(tp)
    assert out.strict is True
    assert out.name == tp.__name__
    assert_strict(out.json_schema)


def test_book_schema_details() -> None:
    schema = output_schema_for(Book).json_schema
    assert schema["required"] == ["title", "default", "authors", "editor", "cover", "kind"]
    assert schema["properties"]["title"] == {"type": "string"}
    assert schema["properties"]["default"] == {"type": "integer"}
    assert schema["properties"]["editor"]["description"] == "the editor, if any"
    # strict mode allows nothing beside $ref: the referenced enum is inlined with its note
    assert schema["properties"]["cover"] == {
        "enum": ["red", "blue"],
        "type": "string",
        "description": "cover colour",
    }
    author = schema["$defs"]["Author"]
    assert author["properties"]["name"] == {"type": "string", "description": "who wrote it"}
    assert author["required"] == ["name", "email"]


def test_recursive_model() -> None:
    schema = output_schema_for(Tree).json_schema
    assert schema["type"] == "object"
    assert schema["properties"]["children"]["items"] == {"$ref": "#/$defs/Tree"}
    text = '{"label": "a", "children": [{"label": "b", "children": []}]}'
    tree = parse_structured_output(Tree, text)
    assert tree.children[0].label == "b"


def test_free_form_dict_is_refused_with_advice() -> None:
    class Bag(BaseModel):
        counts: dict[str, int]

    with pytest.raises(UserError, match="pydantic model with named fields"):
        output_schema_for(Bag)


def test_non_object_types_are_wrapped() -> None:
    out = output_schema_for(list[int])
    assert out.json_schema["required"] == ["response"]
    assert out.json_schema["properties"]["response"]["type"] == "array"
    assert parse_structured_output(list[int], '{"response": [1, 2]}') == [1, 2]
    with pytest.raises(ModelBehaviorError, match="response"):
        parse_structured_output(list[int], "[1, 2]")


def test_parse_valid_and_fenced() -> None:
    text = '{"name": "Ada", "email": null}'
    assert parse_structured_output(Author, text) == Author(name="Ada")
    assert parse_structured_output(Author, f"```json\n{text}\n```") == Author(name="Ada")


def test_parse_invalid_json_says_so() -> None:
    with pytest.raises(ModelBehaviorError) as info:
        parse_structured_output(Author, "Sure! Here is the author: Ada")
    assert "Author" in str(info.value)
    assert "not valid JSON" in str(info.value)
    assert "Here is the author" in str(info.value)


def test_parse_validation_failure_names_the_field() -> None:
    with pytest.raises(ModelBehaviorError) as info:
        parse_structured_output(Book, '{"title": "T", "authors": [{"email": "x"}]}')
    message = str(info.value)
    assert "does not match Book" in message
    assert "authors.0.name" in message
