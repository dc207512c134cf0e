"""A memory layout's reach past the text a pattern matches: the secrets found anywhere in a
layout (transcripts, memory files, history), their derived forms (``_secret_forms``), and the
memory files whose *names* hold one, renamed.

A name is cleaned where sandmem derived it from a transcript: a rollout summary's slug (the
part after its rollout id), a skill's folders and files, a file planted anywhere else. Names
the layout fixes (``MEMORY.md``, the layout's folders, its hidden state files, a raw memory's
``<rollout id>.md``, ``SKILL.md``) are kept (a rollout id is the conversation's key: a secret
in one is reported, see ``docs/security.md``), and copies of layout files kept by name (phase
two's journal, the store's merge bases) follow their originals. Renames go through the
file-access layer, one file at a time (each an atomic ``rename``); every text that names a
renamed file (a raw memory's header, ``Sources:`` lines, state files, history blobs and
records) is rewritten with the new name by ``Renamer.text`` before redaction, so references
stay true. Called under the layout lock by ``redact-history`` (``memory/api/_history.py``),
versioning (``journal.versioned_files``) and the stop-time redaction pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import TypeVar

from sandmem._errors import SandboxError
from sandmem.memory import _files, recording
from sandmem.memory._secret_forms import (
    SecretForms,
    case_blind,
    clean_name,
    own_rules,
    secret_values,
)
from sandmem.memory.layout import (
    BACKUP_DIR,
    HISTORY_DIR,
    INDEX_DB,
    MEMORY_ENTRIES,
    RAW_DIR,
    SKILLS_DIR,
    STORE_DIR,
    SUMMARIES_DIR,
    MemoryPaths,
)

__all__ = [
    "Renamer",
    "clean_names",
    "gather",
    "remove_secret_folders",
    "rename_files",
    "rewrite_references",
    "rollout_ids",
    "unreadable",
]
from sandmem.memory.rollouts import ROLLOUT_ID_PATTERN
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession
from sandmem.sandboxes._types import EntryKind

_BATCH = 64
#: folders that keep copies of layout files by their names: phase two's journal, the store's
#: merge bases
_MIRRORS = (f"{BACKUP_DIR}/", f"{STORE_DIR}/base/")
_SEPARATORS = re.compile(r"[-_.:/@+=]")
_SKILL_FILE = "SKILL.md"
_NO_FORMS = SecretForms()
_V = TypeVar("_V")


def unreadable(path: str) -> bool:
    """Files never read or rewritten as text here: the lock, the search index (binary,
    removed whole when it must go), write temps (a write in flight)."""
    name = path.rsplit("/", 1)[-1]
    temp = name.startswith(".") and name.endswith(".tmp")
    return name == ".lock" or name.startswith(INDEX_DB) or temp


async def _tree(session: SandboxSession, top: str) -> list[str]:
    if not await _files.is_dir(session, top):
        return []
    found = await _files.walk(session, top, depth=_files.MAX_DEPTH * 4, hidden=True)
    return sorted(p for p in found if not p.endswith("/.lock"))


async def gather(
    session: SandboxSession,
    paths: MemoryPaths,
    finders: tuple[Redactor, ...],
    skip: Callable[[str], bool],
) -> SecretForms:
    """The derived forms of every secret ``finders`` find in the layout: its transcripts,
    its memory files and its history (files ``skip`` names, such as the search index, left
    out), and in the names of them all."""
    files = [
        p
        for top in (paths.sessions_dir, paths.memories_dir)
        for p in await _tree(session, top)
        if not skip(p)
    ]
    found: list[tuple[str, str]] = []
    for path in files:  # a name: also with its separators as spaces (a key glued by one)
        for finder in finders:
            found += secret_values(finder, path)
            found += secret_values(finder, _SEPARATORS.sub(" ", path))
    for start in range(0, len(files), _BATCH):
        batch = await _files.read_many(session, files[start : start + _BATCH])
        for data in batch.values():
            if data is not None:
                text = data.decode("utf-8", "surrogateescape")
                for finder in finders:
                    found += secret_values(finder, text)
    return SecretForms(found)


class Renamer:
    """The clean name of each memory file (relative to ``memories_dir``) and the rewriting of
    texts that name a renamed one."""

    def __init__(
        self,
        redactor: Redactor,
        forms: SecretForms,
        rollout_ids: set[str],
        *,
        words: bool = True,
    ) -> None:
        self.redactor = redactor
        self.forms = forms
        self.rollout_ids = rollout_ids
        #: take out single words of a secret from every name (``redact-history``), or only
        #: those of its random-looking words (a live file's name: ``SecretForms.redact_name``)
        self.words = words
        own = own_rules(redactor)
        self._own = case_blind(own) if own else None
        self._seen: dict[str, str] = {}
        #: every rename made or needed, by old name: whole relative names and components
        self.renamed: dict[str, str] = {}

    def _clean(self, part: str) -> str:
        forms = self.forms
        if self._own is not None:  # a name is lower-case: one's own patterns in any case
            found = self._found_in_name(part)
            forms = SecretForms(forms.values + found) if found else forms
        return clean_name(part, self.redactor, forms, words=self.words)

    def _found_in_name(self, part: str) -> list[tuple[str, str]]:
        if self._own is None:
            return []
        spaced = _SEPARATORS.sub(" ", part)
        return secret_values(self._own, part) + secret_values(self._own, spaced)

    def name(self, rel: str) -> str:
        """``rel``'s clean name (the same name when nothing in it is derived from a secret)."""
        if rel in self.renamed:
            return self.renamed[rel]
        if rel not in self._seen:  # every version names the same files again
            self._seen[rel] = self._name(rel)
        return self._seen[rel]

    def _name(self, rel: str) -> str:
        for mirror in _MIRRORS:  # copies of layout files under their own names
            if rel.startswith(mirror) and len(rel) > len(mirror):
                return mirror + self.name(rel[len(mirror) :])
        parts = rel.split("/")
        top, rest = parts[0], parts[1:]
        if top == HISTORY_DIR or (not rest and top in MEMORY_ENTRIES):
            return rel
        if top.startswith("."):  # sandmem's own state: only a name the rules see as a secret
            return "/".join(self._by_rules(p) for p in parts)
        if top == RAW_DIR and len(parts) == 2 and parts[1].removesuffix(".md") in self.rollout_ids:
            return rel  # a conversation's key (a secret in it is reported, not renamed)
        if top == SUMMARIES_DIR and len(parts) == 2:
            rid = self._rollout_prefix(parts[1])
            tail = parts[1][len(rid) :]
            return f"{top}/{rid}{self._clean(tail) if tail else ''}"
        kept = [top] if top in MEMORY_ENTRIES else [self._clean(top)]
        for part in rest:
            kept.append(part if part == _SKILL_FILE and top == SKILLS_DIR else self._clean(part))
        return "/".join(kept)

    def _by_rules(self, part: str) -> str:
        return clean_name(part, self.redactor, _NO_FORMS)

    def _rollout_prefix(self, name: str) -> str:
        """The rollout id (and its ``_``) a summary's name starts with: the longest known one,
        else nothing (the whole name is cleaned)."""
        best = ""
        for rid in self.rollout_ids:
            if name.startswith(f"{rid}_") and len(rid) + 1 > len(best):
                best = f"{rid}_"
        return best

    def text(self, text: str) -> str:
        """``text`` naming each renamed file by its new name."""
        for old in sorted(self.renamed, key=len, reverse=True):
            if old in text:
                text = text.replace(old, self.renamed[old])
        return text

    def _redact(self, text: str) -> str:
        return self.forms.redact(self.redactor.redact(text))

    def holds(self, text: str) -> bool:
        """Whether ``text`` (a name: a conversation id too) holds a secret in some form."""
        return self._redact(text) != text or clean_name(text, self.redactor, self.forms) != text

    def cleaner(self) -> Callable[[str], str]:
        """The whole rewrite of a text: new names, then the rules, then the derived forms. A
        rollout id that holds a secret is kept as it is (it is the conversation's key in
        state, raw memories and citations; ``forget`` removes the conversation whole, which
        needs them intact): ``redact-history`` reports its transcript instead."""
        keys = sorted((r for r in self.rollout_ids if self._redact(r) != r), key=len, reverse=True)
        holders = [f"\x00{i}\x00" for i in range(len(keys))]

        def clean(text: str) -> str:
            text = self.text(text)
            kept = [k for k in keys if k in text]
            for key in kept:
                text = text.replace(key, holders[keys.index(key)])
            text = self._redact(text)
            for key in kept:
                text = text.replace(holders[keys.index(key)], key)
            return text

        return clean

    def names_of(self, files: dict[str, _V]) -> dict[str, _V]:
        """A record's ``{name: value}`` with clean names (two names that clean to one get
        ``-2``, ``-3``... before the extension)."""
        out: dict[str, _V] = {}
        for name, digest in sorted(files.items()):
            out[_unique(self.name(name), out)] = digest
        return out


def _unique(name: str, taken: Collection[str]) -> str:
    if name not in taken:
        return name
    head, dot, ext = name.rpartition(".")
    if not dot or "/" in ext:
        head, dot, ext = name, "", ""
    n = 2
    while f"{head}-{n}{dot}{ext}" in taken:
        n += 1
    return f"{head}-{n}{dot}{ext}"


async def rollout_ids(
    session: SandboxSession, raw_dir: str, paths: MemoryPaths | None = None
) -> set[str]:
    """The rollout ids the layout knows: its raw memories' and (with ``paths``) its
    recorded conversations' (``recording.rollout_ids``)."""
    found = set(await recording.rollout_ids(session, paths)) if paths is not None else set()
    if await _files.is_dir(session, raw_dir):
        for name in await _files.listdir(session, raw_dir):
            rid = name.removesuffix(".md")
            if name.endswith(".md") and ROLLOUT_ID_PATTERN.fullmatch(rid):
                found.add(rid)
    return found


async def rename_files(
    session: SandboxSession,
    md: str,
    renamer: Renamer,
    skip: Callable[[str], bool],
    only: Collection[str] | None = None,
) -> list[tuple[str, str]]:
    """Rename every file under ``md`` (the memories dir; ``only`` these paths when given)
    whose name holds a secret's form (never into an existing name); folders left empty by
    it are removed. Returns ``(old, new)`` relative names and records each rename (whole
    names and changed components) in ``renamer.renamed``."""
    history = f"{md}/{HISTORY_DIR}/"
    every = [p for p in await _tree(session, md) if not skip(p) and not p.startswith(history)]
    taken = {p.removeprefix(f"{md}/") for p in every}
    files = every if only is None else [p for p in every if p in only]
    moved: list[tuple[str, str]] = []
    emptied: set[str] = set()
    for path in files:
        rel = path.removeprefix(f"{md}/")
        new = renamer.name(rel)
        if new == rel:
            continue
        new = _unique(new, taken)
        taken.add(new)
        parent = new.rpartition("/")[0]
        if parent:
            await _files.mkdir(session, f"{md}/{parent}")
        await _files.rename(session, path, f"{md}/{new}")
        moved.append((rel, new))
        renamer.renamed[rel] = new
        old_parts, new_parts = rel.split("/"), new.split("/")
        for i, (a, b) in enumerate(zip(old_parts, new_parts, strict=False)):
            if a != b:
                renamer.renamed.setdefault(a, b)
                if i < len(old_parts) - 1:
                    emptied.add("/".join(old_parts[: i + 1]))
    for folder in sorted(emptied, key=len, reverse=True):
        if not await _files.walk(session, f"{md}/{folder}", hidden=True):
            await _files.remove(session, f"{md}/{folder}", recursive=True, missing_ok=True)
    return moved


async def rewrite_references(
    session: SandboxSession, md: str, renamer: Renamer, skip: Callable[[str], bool]
) -> list[str]:
    """Every file under ``md`` (not its history) that names a renamed file rewritten to name
    the new one (``Renamer.text``); returns the files rewritten."""
    if not renamer.renamed:
        return []
    history = f"{md}/{HISTORY_DIR}/"
    files = [p for p in await _tree(session, md) if not skip(p) and not p.startswith(history)]
    rewritten = []
    for start in range(0, len(files), _BATCH):
        for path, data in (await _files.read_many(session, files[start : start + _BATCH])).items():
            if data is None:
                continue
            text = data.decode("utf-8", "surrogateescape")
            if (new := renamer.text(text)) != text:
                await _files.write(session, path, new.encode("utf-8", "surrogateescape"))
                rewritten.append(path)
    return rewritten


def _suspect(rel: str, renamer: Renamer) -> bool:
    """A cheap first look (one pass of the rules): whether ``rel`` may need a new name."""
    # each component, from every separator on (a key glued to a word by one), one per line,
    # and with its separators as spaces: one pass of the rules over them all
    lines = []
    for part in rel.split("/"):
        lines.append(_SEPARATORS.sub(" ", part))
        lines += [part[i:] for i in range(len(part)) if i == 0 or part[i - 1] in "-_.:@+="]
    text = "\n".join(lines)
    if renamer.redactor.redact(text) != text or renamer._found_in_name(rel):
        return True
    return bool(renamer.forms) and renamer.name(rel) != rel


async def clean_names(
    session: SandboxSession,
    md: str,
    redactor: Redactor,
    forms: SecretForms,
    candidates: Collection[str],
    skip: Callable[[str], bool],
) -> list[tuple[str, str]]:
    """Rename the files among ``candidates`` (paths under ``md``) whose name holds a secret
    (``redactor``'s rules, ``forms``' derived forms): a skill's folder an agent's shell named
    after a key; then rewrite what names them. For writers of live files (versioning, the
    stop-time pass), under the layout lock. Returns ``(old, new)`` relative names."""
    probe = Renamer(redactor, forms, set(), words=False)
    if not any(_suspect(p.removeprefix(f"{md}/"), probe) for p in candidates):
        return []
    rids = await rollout_ids(session, f"{md}/{RAW_DIR}")  # then no conversation's key moves
    renamer = Renamer(redactor, forms, rids, words=False)
    moved = await rename_files(session, md, renamer, skip, only=set(candidates))
    await rewrite_references(session, md, renamer, skip)
    return moved


#: folders whose subfolders sandmem never makes (its own records, flat folders of files):
#: not looked through for folders named after a secret
_FLAT = frozenset({HISTORY_DIR, STORE_DIR, BACKUP_DIR, RAW_DIR, SUMMARIES_DIR})


async def remove_secret_folders(
    session: SandboxSession, md: str, redactor: Redactor, forms: SecretForms
) -> list[str]:
    """Remove each folder under ``md`` whose name holds a secret and that holds no file (one
    a shell made and left empty, or one its files were renamed out of): a folder's name is on
    disk too. Returns the folders removed (relative names are not shown: they hold it)."""
    renamer = Renamer(redactor, forms, set(), words=False)
    removed: list[str] = []
    pending = [(md, 0)]
    while pending:
        folder, level = pending.pop()
        try:
            listed = await _files.stat_dir(session, folder)
        except SandboxError:
            continue
        for name, kind, _size, _mtime in listed:
            if kind != EntryKind.DIRECTORY or (level == 0 and name in _FLAT):
                continue
            path = f"{folder}/{name}"
            if _suspect(name, renamer) and renamer._clean(name) != name:
                if not await _files.walk(session, path, depth=_files.MAX_DEPTH, hidden=True):
                    await _files.remove(session, path, recursive=True, missing_ok=True)
                    removed.append(path)
                    continue
            if level < _files.MAX_DEPTH:
                pending.append((path, level + 1))
    return removed
