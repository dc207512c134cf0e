"""Capabilities: small units that add tools and instructions to a ``SandboxAgent``."""

from __future__ import annotations

from sandmem.capabilities._base import Capability
from sandmem.capabilities.filesystem import Filesystem
from sandmem.capabilities.memory import Memory
from sandmem.capabilities.shell import Shell

__all__ = [
    "Capability",
    "Filesystem",
    "Memory",
    "Shell",
]
