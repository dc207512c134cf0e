"""The Skills capability: lists the skills of a directory in the instructions, so the agent
opens a skill's ``SKILL.md`` only when its task matches (progressive disclosure).

A skill is a directory ``<skills_dir>/<name>/`` with a ``SKILL.md`` whose front matter names
it and says what it is for::

    ---
    name: release-build
    description: Build and tag a release; use when asked to cut a release.
    ---
    1. ...

Without ``skills_dir`` the directory is the ``skills/`` of the agent's ``Memory`` layout (what
phase two writes), else ``skills``. It is read through the memory file layer
(``memory/_files.py``): a link in it is never followed, a FIFO never opened. The list keeps
to ``max_bytes``; skills past it are counted, not listed. The agent reads a skill with its
shell, so ``Shell`` is required.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandmem._errors import SandboxError
from sandmem._prompts import load_prompt, render_prompt
from sandmem.agent._capability import Capability
from sandmem.memory.config import normalize_dir

if TYPE_CHECKING:
    from sandmem.agent._context import SandboxRunContext

#: bytes of a ``SKILL.md`` read to find its front matter
_HEAD_BYTES = 4096


@dataclass(frozen=True)
class SkillInfo:
    """One skill as listed: its name, description and the path of its ``SKILL.md``."""

    name: str
    description: str
    path: str


def parse_front_matter(text: str) -> dict[str, str]:
    """The ``key: value`` lines between the leading ``---`` fences (empty when there are
    none)."""
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return fields
        key, sep, value = line.partition(":")
        if sep and key.strip():
            fields[key.strip().lower()] = value.strip().strip("\"'")
    return {}


def render_skill_list(skills: list[SkillInfo], max_bytes: int) -> str:
    """One line per skill, within ``max_bytes``; a last line counts the skills left out."""
    lines: list[str] = []
    used = 0
    for index, skill in enumerate(skills):
        line = f"- {skill.name}: {skill.description or '(no description)'} ({skill.path})"
        if used + len(line.encode()) + 1 > max_bytes:
            lines.append(f"- ... and {len(skills) - index} more under the skills directory")
            break
        lines.append(line)
        used += len(line.encode()) + 1
    return "\n".join(lines)


class Skills(Capability):
    """Lists skills (name, description, path) in the instructions; see the module docstring."""

    type = "skills"

    def __init__(self, skills_dir: str | None = None, max_bytes: int = 8000) -> None:
        if max_bytes < 200:
            raise ValueError("Skills(max_bytes=...) must be at least 200")
        self.skills_dir = None if skills_dir is None else normalize_dir(skills_dir, "skills_dir")
        self.max_bytes = max_bytes

    def required_capability_types(self) -> frozenset[builtins.type[Capability]]:
        from sandmem.capabilities.shell import Shell

        return frozenset({Shell})

    def directory(self, ctx: SandboxRunContext) -> str:
        """The directory listed: ``skills_dir``, else the Memory layout's ``skills/``."""
        if self.skills_dir is not None:
            return self.skills_dir
        from sandmem.capabilities.memory import Memory

        for cap in getattr(ctx.agent, "capabilities", []):
            if isinstance(cap, Memory):
                return cap.paths.skills_dir
        return "skills"

    async def find(self, directory: str) -> list[SkillInfo]:
        """The skills under ``directory`` (sorted by name; a directory without a readable
        ``SKILL.md`` is skipped)."""
        from sandmem.memory import _files

        session = self.session
        try:  # a memory layout's files: no link is followed, no special file read
            if not await _files.is_dir(session, directory):
                return []
            names = await _files.listdir(session, directory)
        except SandboxError:
            return []
        skills: list[SkillInfo] = []
        for name in names:
            path = f"{directory}/{name}/SKILL.md"
            try:
                data = await _files.read(session, path)
            except (SandboxError, OSError):
                continue
            if data is None:
                continue
            text = data[:_HEAD_BYTES].decode("utf-8", "replace")
            meta = parse_front_matter(text)
            skills.append(SkillInfo(meta.get("name") or name, meta.get("description", ""), path))
        return sorted(skills, key=lambda s: s.name)

    async def instructions(self, ctx: SandboxRunContext) -> str | None:
        directory = self.directory(ctx)
        skills = await self.find(directory)
        if not skills:
            return None
        scope, root = self.workspace_scope, self.session.display_root
        skills = [
            SkillInfo(s.name, s.description, scope.resource_path(root, s.path)) for s in skills
        ]
        return render_prompt(
            load_prompt("sandmem", "skills"),
            skills_dir=scope.resource_path(root, directory),
            skill_list=render_skill_list(skills, self.max_bytes),
        )
