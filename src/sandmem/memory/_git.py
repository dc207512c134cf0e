"""Keeping a project's memory in git (``docs/scopes.md``): what to commit, what to ignore, and
a merge of memory files that keeps both sides.

- ``IGNORED`` (``<memories_dir>/.gitignore``) leaves out what is derived or local: the index,
  the locks, the generation state and log, the last selection, phase two's scratch files;
  ``<sessions_dir>/.gitignore`` leaves out the raw transcripts. Committed: ``MEMORY.md``,
  the summary, rollout summaries, skills, phase one's notes (``raw_memories/``, redacted), and
  the history's versions and objects (``.history/``: new files on each side, named by number,
  second and a tag of their bytes or by content, so two branches' versions sit side by side
  after a merge, even two made in the same second).
- ``merge_texts`` is the merge driver's rule (``sandmem memory merge-driver``, set up by
  ``ATTRIBUTES`` and ``git config``): a three-way merge by lines in which a region both sides
  changed keeps both — ours first, then the lines of theirs that ours lacks. No conflict
  markers: the file stays valid Markdown, and the next consolidation reconciles the two
  versions (a line that reads twice is the cue).
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher

from sandmem.memory import _files
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes._session import SandboxSession

#: the merge driver's name in ``.gitattributes`` and ``git config merge.<name>.driver``
DRIVER = "sandmem-memory"
#: the command git runs to merge a memory file (%O base, %A ours and the result, %B theirs)
DRIVER_COMMAND = "sandmem memory merge-driver %O %A %B %P"

IGNORED = """\
# sandmem: what of this memory is derived or local (docs/scopes.md). Committed: MEMORY.md,
# memory_summary.md, rollout_summaries/, skills/, raw_memories/ and .history/.
.index.sqlite
.index.sqlite-*
.index.lock
.lock
.settled.json
.copied.json
.store/
.phase_two_backup/
.consolidated_MEMORY.md
.history/proposals/
*.moved-*
generation_state.json
generation_log.jsonl
phase_two_selection.json
raw_memories.md
"""

SESSIONS_IGNORED = """\
# sandmem: raw transcripts never go into git (docs/scopes.md)
*
!.gitignore
"""

ATTRIBUTES = f"""\
# sandmem: memory files merge keeping both sides (docs/scopes.md); needs
#   git config merge.{DRIVER}.driver "{DRIVER_COMMAND}"
*.md merge={DRIVER}
"""


async def write_git_files(session: SandboxSession, paths: MemoryPaths) -> list[str]:
    """Write the layout's ``.gitignore`` files and ``.gitattributes`` (replacing sandmem's
    own earlier ones); returns the workspace paths written."""
    files = {
        f"{paths.memories_dir}/.gitignore": IGNORED,
        f"{paths.memories_dir}/.gitattributes": ATTRIBUTES,
        f"{paths.sessions_dir}/.gitignore": SESSIONS_IGNORED,
    }
    for path, text in files.items():
        await _files.write(session, path, text)
    return list(files)


def merge_texts(base: str, ours: str, theirs: str) -> str:
    """Three-way merge by lines: a region only one side changed takes that side's lines; a
    region both changed keeps ours, then theirs' lines that ours does not hold."""
    merged = merge_lines(base.splitlines(True), ours.splitlines(True), theirs.splitlines(True))
    text = "".join(merged)
    return text


def merge_lines(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]) -> list[str]:
    to_ours = _matches(base, ours)
    to_theirs = _matches(base, theirs)
    merged: list[str] = []
    i = j = k = 0
    for b in range(len(base)):
        o, t = to_ours.get(b), to_theirs.get(b)
        if o is None or t is None or o < j or t < k:
            continue  # not a line both sides kept in place
        merged += _resolve(base[i:b], ours[j:o], theirs[k:t])
        merged.append(ours[o])
        i, j, k = b + 1, o + 1, t + 1
    merged += _resolve(base[i:], ours[j:], theirs[k:])
    return _end_lines(merged)


def _matches(base: Sequence[str], other: Sequence[str]) -> dict[int, int]:
    """Each line of ``base`` that ``other`` kept, and where it is in ``other``."""
    found: dict[int, int] = {}
    for block in SequenceMatcher(None, base, other, autojunk=False).get_matching_blocks():
        for n in range(block.size):
            found[block.a + n] = block.b + n
    return found


def _resolve(base: Sequence[str], ours: Sequence[str], theirs: Sequence[str]) -> list[str]:
    if list(ours) == list(theirs) or list(theirs) == list(base):
        return list(ours)
    if list(ours) == list(base):
        return list(theirs)
    seen = {line.rstrip("\n") for line in ours}
    return [*ours, *(line for line in theirs if line.rstrip("\n") not in seen)]


def _end_lines(lines: list[str]) -> list[str]:
    """Every line but the last ends in a newline (a side's last line may have had none)."""
    return [
        line if line.endswith("\n") or n == len(lines) - 1 else line + "\n"
        for n, line in enumerate(lines)
    ]
