"""The workspace's own settings file, ``sandmem.toml`` (``[memory] model = "extractive"``),
and the one-line error of a command that cannot start as configured."""

from __future__ import annotations

from pathlib import Path

import click

from sandmem._errors import UserError
from sandmem._toml_file import read_toml

__all__ = ["SETTINGS_FILE", "ConfigError", "workspace_memory_model"]


class ConfigError(click.ClickException):
    """The command cannot start as invoked: a setting in the environment is missing or
    wrong. Printed as one line (``Error: ...``), exit status 2 like a usage error."""

    exit_code = 2


#: the per-workspace settings file (``[memory] model = "extractive"``), in the workspace root
SETTINGS_FILE = "sandmem.toml"


def workspace_memory_model(workspace: Path | None) -> str | None:
    """The memory model the workspace's ``sandmem.toml`` names (``[memory] model``), if any.

    The file is the user's, but read as untrusted: a link is not followed, only a regular file
    of at most 64 KiB is read, and anything unreadable or malformed is a ``ConfigError``."""
    if workspace is None:
        return None
    path = workspace / SETTINGS_FILE
    try:
        document = read_toml(path)
    except UserError as exc:
        raise ConfigError(str(exc)) from None
    memory = (document or {}).get("memory", {})
    model = memory.get("model") if isinstance(memory, dict) else None
    if model is None:
        return None
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f'{path}: [memory] model must be a model name or "extractive"')
    return model.strip()
