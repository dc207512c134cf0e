"""The workspace's own settings file, ``sandmem.toml`` (``[memory] model = "extractive"``),
and the one-line error of a command that cannot start as configured."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import click

__all__ = ["SETTINGS_FILE", "ConfigError", "workspace_memory_model"]


class ConfigError(click.ClickException):
    """The command cannot start as invoked: a setting in the environment is missing or
    wrong. Printed as one line (``Error: ...``), exit status 2 like a usage error."""

    exit_code = 2


#: the per-workspace settings file (``[memory] model = "extractive"``), in the workspace root
SETTINGS_FILE = "sandmem.toml"
_SETTINGS_MAX_BYTES = 64 * 1024


def workspace_memory_model(workspace: Path | None) -> str | None:
    """The memory model the workspace's ``sandmem.toml`` names (``[memory] model``), if any.

    The file is the user's, but read as untrusted: a link is not followed, only a regular file
    of at most 64 KiB is read, and anything unreadable or malformed is a ``ConfigError``."""
    if workspace is None:
        return None
    import tomllib

    path = workspace / SETTINGS_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{path} is not a regular file")
        data = handle.read(_SETTINGS_MAX_BYTES + 1)
    try:
        if len(data) > _SETTINGS_MAX_BYTES:
            raise ValueError("larger than 64 KiB")
        memory = tomllib.loads(data.decode("utf-8")).get("memory", {})
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc})") from None
    model = memory.get("model") if isinstance(memory, dict) else None
    if model is None:
        return None
    if not isinstance(model, str) or not model.strip():
        raise ConfigError(f'{path}: [memory] model must be a model name or "extractive"')
    return model.strip()
