"""Capabilities: small units that add tools and instructions to a ``SandboxAgent``; owns
them and imports ``memory`` (through its public modules and folders' surfaces), ``run``,
``agent`` and the floors below, never ``distributed``, ``eval``, ``demo`` or ``cli``.

``SandboxAgent`` and the ``Shell``, ``Filesystem``, ``Memory`` and ``Skills`` capabilities (the
``Capability`` base lives in ``sandmem.agent``).
"""

from __future__ import annotations

from sandmem.agent._capability import Capability
from sandmem.capabilities.filesystem import Filesystem
from sandmem.capabilities.memory import Memory
from sandmem.capabilities.shell import Shell
from sandmem.capabilities.skills import Skills

__all__ = [
    "Capability",
    "Filesystem",
    "Memory",
    "Shell",
    "Skills",
]
