"""``python -m sandmem.demo``: the same as ``sandmem demo``."""

from __future__ import annotations

from sandmem.demo._cli import demo_command

demo_command(prog_name="python -m sandmem.demo")
