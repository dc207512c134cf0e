"""``sandmem demo`` (listed only when the separately built ``sandmem.demo`` package is
installed): the demo's command with the model client options."""

from __future__ import annotations

from sandmem.cli._models import client_options
from sandmem.demo import demo_command as _demo_command

demo_command = client_options(_demo_command)
