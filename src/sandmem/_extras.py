"""The install hint for optional extras, in one place."""

from __future__ import annotations

import importlib
from types import ModuleType

from sandmem._errors import UserError

#: what each extra is for, named in the install hint
_PURPOSES = {
    "distributed": "distributed memory (S3 store, Redis job queue, leases)",
    "mcp": "MCP (the memory server `sandmem mcp`, and MCP servers on agents)",
    "semantic": "hybrid memory search (an offline embedding model fused with BM25)",
}


def require(module: str, extra: str = "distributed") -> ModuleType:
    """Import ``module`` or raise ``UserError`` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        purpose = _PURPOSES.get(extra, f"the {extra!r} extra")
        raise UserError(
            f"{module} is needed for {purpose}; install it with: pip install 'sandmem[{extra}]'"
        ) from exc
