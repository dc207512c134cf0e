"""The typed values of the records sandmem reads back from its own files: digests, memory file
names, proposal ids; and the one way a directory of JSON records is loaded.

A record under ``.history/`` (a version, a proposal) was written by sandmem, but anyone who can
write the workspace or the store can change it: it is parsed once, where it is read, into a
value whose fields cannot hold a name that leaves the layout, an id that is a path, or a
digest that is not a SHA-256. A record that does not parse is skipped and reported in one line
(``Problem``); it never stops the command that read it.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, ValidationError

from sandmem.memory._json import loads_bounded
from sandmem.memory._store_seam import safe_name
from sandmem.memory.layout import is_editable

logger = logging.getLogger("sandmem.memory")

T = TypeVar("T")

_DIGEST = re.compile(r"[0-9a-f]{64}")
_PROPOSAL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def is_digest(value: object) -> bool:
    """A SHA-256 hex digest (lower case): the only thing that may name a history object."""
    return isinstance(value, str) and _DIGEST.fullmatch(value) is not None


def is_memory_name(value: object) -> bool:
    """A memory file's name relative to ``memories_dir`` that a version or proposal may hold:
    normalized and inside the layout (``safe_name``), and one of the files a commit writes
    (``MEMORY.md``, ``memory_summary.md``, ``skills/**``)."""
    return isinstance(value, str) and safe_name(value) and is_editable(value)


def is_proposal_id(value: object) -> bool:
    """A proposal id: letters, digits, ``_`` and ``-``, at most 64 (never a path)."""
    return isinstance(value, str) and _PROPOSAL_ID.fullmatch(value) is not None


def _checked(rule: Callable[[object], bool], what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not rule(value):
            raise ValueError(f"{what} {_shown(value)} is refused")
        return value

    return check


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


Digest = Annotated[str, AfterValidator(_checked(is_digest, "digest"))]
MemoryName = Annotated[str, AfterValidator(_checked(is_memory_name, "memory file name"))]
ProposalId = Annotated[str, AfterValidator(_checked(is_proposal_id, "proposal id"))]


@dataclass(frozen=True)
class Problem:
    """A record or file that was skipped, rebuilt or repaired: where it is and why (one line)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def reason_of(exc: Exception) -> str:
    """One line for why a record did not parse."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        message = str(first.get("msg", "invalid"))
        return f"{where}: {message}" if where else message
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def parse_record(path: str, data: bytes | None, parse: Callable[[Any], T]) -> T | Problem:
    """``parse`` applied to the JSON in ``data``; a ``Problem`` (never an exception) when the
    file is missing, is not JSON, or does not parse."""
    if data is None:
        return Problem(path, "missing or unreadable")
    try:
        return parse(loads_bounded(data))
    except (ValueError, TypeError, KeyError) as exc:  # ValidationError is a ValueError
        return Problem(path, f"skipped ({reason_of(exc)})")


def report(problems: Iterable[Problem]) -> None:
    """Each skipped record as one warning line (the CLI shows sandmem's warnings one a line),
    once: a command reads the history several times, and says so once."""
    for problem in problems:
        _warn_once(str(problem))


@functools.lru_cache(maxsize=256)
def _warn_once(line: str) -> None:
    logger.warning("%s", line)
