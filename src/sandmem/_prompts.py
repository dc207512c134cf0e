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
