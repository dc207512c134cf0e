"""``sandmem demo`` (listed only when the separately built ``sandmem.demo`` package is
installed): the demo's command with the model client options, and, before a demo on a model
starts, the same quick check of the model server as ``run`` (one line with the offline way
out, instead of a failure in the middle of run 1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sandmem._errors import UserError
from sandmem.cli._models import check_server, client_options
from sandmem.cli._settings_file import ConfigError
from sandmem.demo import demo_command as _demo_command
from sandmem.demo._scenario import wants_offline

#: how to run the demo without a model, for the errors of a demo that needs one
OFFLINE_DEMO_HINT = "; or run the demo offline: make demo OFFLINE=1 (sandmem demo --offline)"

_callback = _demo_command.callback
assert _callback is not None
_run_demo: Callable[..., Any] = _callback


def _checked(**params: Any) -> Any:
    try:
        online = not wants_offline(params.get("model"), params.get("offline"))
    except UserError:
        online = False  # the demo's own command says what is wrong with the flags
    if online:
        try:
            check_server(hint=OFFLINE_DEMO_HINT, unreachable_hint=OFFLINE_DEMO_HINT)
        except UserError as exc:  # nothing configured: a setting is missing (exit 2)
            raise ConfigError(str(exc)) from None
    return _run_demo(**params)


_demo_command.callback = _checked  # the demo's own command, checked first
demo_command = client_options(_demo_command)
