"""A command group whose commands are imported when one of them runs.

``sandmem memory status`` imports the memory commands and the memory API, never the agent
runtime, ``rich`` or the eval suites: a cold process pays for what it runs. ``--help`` imports
every command of the group it lists (their short help lives in their modules).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import click

from sandmem._lazy import load


class LazyGroup(click.Group):
    """A ``click.Group`` whose commands are named in ``lazy`` (``"module:attribute"`` by
    command name) and imported on first use; a command whose module, or the package it
    ``requires`` (an optional one, such as ``sandmem.demo``), is not installed is left out."""

    def __init__(
        self,
        *args: Any,
        lazy: Mapping[str, str],
        requires: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)
        self.requires = dict(requires or {})

    def _available(self, name: str) -> bool:
        return _installed(self.lazy[name]) and _installed(self.requires.get(name, "sandmem"))

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | {n for n in self.lazy if self._available(n)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is not None or cmd_name not in self.lazy:
            return command
        target = self.lazy[cmd_name]
        if not self._available(cmd_name):
            return None
        module, _, attribute = target.partition(":")
        command = getattr(load(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        self.add_command(command, cmd_name)
        return command


def _installed(target: str) -> bool:
    return importlib.util.find_spec(target.partition(":")[0]) is not None
