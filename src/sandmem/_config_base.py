"""The base of the public pydantic configs: subclasses decorated with ``@dataclass`` keep working.

The reference SDK's configs are dataclasses, so code written for it subclasses them with
``@dataclass class MySettings(ModelSettings): ...``. On a pydantic model that decorator would
(a) replace pydantic's ``__init__``, ``__repr__`` and ``__eq__`` with its own, which know only the
subclass's new annotations, and (b) probe every class attribute for ``__isabstractmethod__``,
which on a model whose build is deferred (``defer_build``) builds it mid-iteration and fails with
"dictionary changed size during iteration". So each *subclass* of a public config is built when
it is defined (the public configs themselves stay deferred) and carries pydantic's methods in its
own namespace, where ``@dataclass`` leaves them alone. The subclass is then a pydantic model with
the dataclass markers: its new fields are pydantic fields, validated like the others.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_KEPT = ("__init__", "__repr__", "__eq__")


class ConfigModel(BaseModel):
    """A public config (``ModelSettings``, the memory configs, ...)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if ConfigModel in cls.__bases__:
            return  # a public config itself: its build stays deferred
        for name in _KEPT:
            if name not in cls.__dict__:
                setattr(cls, name, getattr(cls, name))
        if not cls.__pydantic_complete__:
            cls.model_rebuild(raise_errors=False)
