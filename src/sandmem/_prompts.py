"""Prompt templates shipped as ``.md`` package data, with ``{placeholder}`` filling.

Each template starts with an HTML comment stating its job; the comment is stripped on load.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_LEADING_COMMENT = re.compile(r"\A\s*<!--.*?-->\s*", re.S)


@functools.cache
def load_prompt(package: str, name: str) -> str:
    """The text of ``<package>/prompts/<name>.md`` without its leading comment."""
    raw = resources.files(package).joinpath("prompts", f"{name}.md").read_text("utf-8")
    return _LEADING_COMMENT.sub("", raw, count=1)


def render_prompt(template: str, **values: str) -> str:
    """Fill every ``{name}`` in ``template``; a missing value or an unused one is an error, so
    no template residue can reach a model."""
    names = set(_PLACEHOLDER.findall(template))
    missing = names - values.keys()
    unused = values.keys() - names
    if missing or unused:
        raise KeyError(f"prompt placeholders missing {sorted(missing)}, unused {sorted(unused)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


#: what may start a tag: "<" and the characters a model may read as one
_TAG_OPEN = "<\uff1c\ufe64\u2039\u3008\u27e8"


def escape_fence(text: str, tag: str) -> str:
    """``text`` made safe to place between ``<tag>`` and ``</tag>``: every form of either tag
    inside it (any case, spaces or slashes around the name, a full-width or other look-alike
    ``<``, a JSON-escaped ``<\\/tag>``) has its ``<`` written ``&lt;``, so content cannot end
    the block it is fenced in (or open a second one). Other text is unchanged."""
    pattern = _fence_pattern(tag)
    return pattern.sub(lambda m: "&lt;" + m.group(1), text)


@functools.cache
def _fence_pattern(tag: str) -> re.Pattern[str]:
    name = re.escape(tag).replace("_", "[_ -]?")
    return re.compile(
        f"[{_TAG_OPEN}]" + r"((?:\s|\\)*/?(?:\s|\\|/)*" + name + r")(?![A-Za-z0-9])",
        re.IGNORECASE,
    )


_BACKTICK_RUNS = re.compile(r"`{3,}")


def code_block(text: str, info: str = "") -> str:
    """``text`` in a Markdown code block that nothing inside it can close: its fence is one
    backtick longer than the longest run of three or more in the text (a closing fence must be
    at least as long as the opening one, whatever its indentation)."""
    longest = max((len(run) for run in _BACKTICK_RUNS.findall(text)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"
