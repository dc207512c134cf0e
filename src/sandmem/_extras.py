"""The install hint for the ``distributed`` extra, in one place."""

from __future__ import annotations

import importlib
from types import ModuleType

from sandmem._errors import UserError


def require(module: str) -> ModuleType:
    """Import ``module`` or raise ``UserError`` naming the extra that provides it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise UserError(
            f"{module} is needed for distributed memory (S3 store, Celery workers, leases); "
            "install it with: pip install 'sandmem[distributed]'"
        ) from exc
