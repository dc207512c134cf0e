"""``sandmem demo`` (listed only when the separately built ``sandmem.demo`` package is
installed): the demo's command with the model client options, and, before a demo on a model
starts, the same quick check of the model server as ``run`` (one line with the offline way
out, instead of a failure in the middle of run 1)."""

from __future__ import annotations

from typing import Any

import click

from sandmem.cli._models import check_server, client_options
from sandmem.demo import demo_command as _demo_command
from sandmem.demo._scenario import wants_offline

#: how to run the demo without a model, for the errors of a demo that needs one
OFFLINE_DEMO_HINT = "; or run the demo offline: make demo OFFLINE=1 (sandmem demo --offline)"


def _checked(**params: Any) -> Any:
    if not wants_offline(params.get("model"), params.get("offline")):
        check_server(hint=OFFLINE_DEMO_HINT, unreachable_hint=OFFLINE_DEMO_HINT)
    assert _demo_command.callback is not None
    return _demo_command.callback(**params)


demo_command = client_options(
    click.Command(
        _demo_command.name,
        params=list(_demo_command.params),
        callback=_checked,
        help=_demo_command.help,
        short_help=_demo_command.short_help,
    )
)
