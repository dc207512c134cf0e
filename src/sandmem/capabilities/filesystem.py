"""The ``Filesystem`` capability: ``apply_patch`` to edit files and ``view_image`` to see images."""

from __future__ import annotations

import base64
import contextlib
import posixpath
from typing import TYPE_CHECKING, Any

from sandmem._errors import SandboxError
from sandmem.agent._capability import Capability
from sandmem.agent._tools import FunctionTool, function_tool
from sandmem.sandboxes._apply_patch import apply_patch

if TYPE_CHECKING:
    from sandmem.agent._context import SandboxRunContext
    from sandmem.redaction import Redactor
    from sandmem.sandboxes._session import SandboxSession

#: images larger than this are refused by ``view_image``
MAX_IMAGE_BYTES = 10 * 1024 * 1024

_APPLY_PATCH_DESCRIPTION = """\
Create, edit, delete or move text files in the workspace with one patch:
*** Begin Patch
*** Add File: <path>            then every line of the new file, each prefixed with +
*** Update File: <path>         optionally followed by: *** Move to: <new path>
@@ <optional line to find first, e.g. a def or class line>
 <unchanged context line>
-<line to remove>
+<line to add>
*** Delete File: <path>
*** End Patch
Paths are relative to the workspace root. Give about three unchanged lines around each change \
and list hunks in file order. If any part does not fit, nothing is changed."""

_VIEW_IMAGE_DESCRIPTION = (
    "Look at an image file in the workspace (PNG, JPEG, GIF or WEBP, at most "
    f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB). The path is relative to the workspace root."
)


#: key in the run's extras: ``[(memories_dir, Redactor)]``; ``apply_patch`` redacts what it
#: writes under those directories before writing (set by the Memory capability)
MEMORY_WRITE_GUARDS = "sandmem.memory_write_guards"


#: key in the run's extras: ``{memories_dir: {workspace path: bytes | None}}``; for those
#: directories (review mode, ``MemoryReadConfig(live_update="propose")``) ``apply_patch``
#: writes into this overlay instead of the workspace (``None``: deleted); the Memory
#: capability turns it into a proposal when the run ends
MEMORY_PROPOSALS = "sandmem.memory_proposals"


class _RedactingFiles:
    """The session, with writes under a guarded memory directory redacted first, and those
    under a proposing directory kept in its overlay."""

    def __init__(
        self,
        session: SandboxSession,
        guards: list[tuple[str, Redactor]],
        overlays: dict[str, dict[str, bytes | None]] | None = None,
    ) -> None:
        self._session = session
        self._guards = guards
        self._overlays = overlays or {}

    def _redactor(self, path: str) -> Redactor | None:
        directory = self.directory(path)
        return None if directory is None else dict(self._guards)[directory]

    def _rel(self, path: str) -> str:
        raw = path.strip()
        for prefix in (self._session.display_root, str(self._session.root)):
            if raw == prefix or raw.startswith(prefix.rstrip("/") + "/"):
                raw = raw[len(prefix) :]
                break
        return posixpath.normpath("/" + raw).lstrip("/")

    def directory(self, path: str) -> str | None:
        """The guarded memory directory ``path`` lies in, if any."""
        rel = self._rel(path)
        for directory, _redactor in self._guards:
            if rel == directory or rel.startswith(directory + "/"):
                return directory
        return None

    def _overlay(self, path: str) -> tuple[dict[str, bytes | None] | None, str]:
        directory = self.directory(path)
        overlay = None if directory is None else self._overlays.get(directory)
        return overlay, self._rel(path)

    async def write(self, path: str, data: bytes | str) -> None:
        redactor = self._redactor(path)
        if redactor is not None:
            try:
                text = data.decode("utf-8") if isinstance(data, bytes) else data
            except UnicodeDecodeError:
                pass
            else:
                data = redactor.redact(text)
        overlay, rel = self._overlay(path)
        if overlay is not None:
            overlay[rel] = data.encode("utf-8") if isinstance(data, str) else data
            return
        await self._session.write(path, data)

    async def read_bytes(self, path: str) -> bytes:
        overlay, rel = self._overlay(path)
        if overlay is not None and rel in overlay:
            data = overlay[rel]
            if data is None:
                raise SandboxError(f"{rel}: no such file", operation="read", path=rel)
            return data
        return await self._session.read_bytes(path)

    async def exists(self, path: str) -> bool:
        overlay, rel = self._overlay(path)
        if overlay is not None and rel in overlay:
            return overlay[rel] is not None
        return await self._session.exists(path)

    async def mkdir(self, path: str, parents: bool = True) -> None:
        if self._overlay(path)[0] is None:
            await self._session.mkdir(path, parents=parents)

    async def remove(self, path: str, recursive: bool = False) -> None:
        overlay, rel = self._overlay(path)
        if overlay is not None:
            overlay[rel] = None
            return
        await self._session.remove(path, recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        if self._overlay(src)[0] is None and self._overlay(dst)[0] is None:
            await self._session.rename(src, dst)
            return
        await self.write(dst, await self.read_bytes(src))
        await self.remove(src)


def _memory_locks(
    session: SandboxSession, patch: str, guards: list[tuple[str, Redactor]]
) -> list[str]:
    """The layout locks (``<memories_dir>/.lock``) of the memory directories a patch touches,
    sorted; none for a patch that does not parse (``apply_patch`` reports it)."""
    from sandmem.sandboxes._patch_format import PatchError, parse_patch

    if not guards:
        return []
    try:
        ops = parse_patch(patch)
    except PatchError:
        return []
    targets = [p for op in ops for p in (op.path, getattr(op, "move_to", None)) if p]
    files = _RedactingFiles(session, guards)
    found = {files.directory(target) for target in targets}
    return sorted(f"{directory}/.lock" for directory in found if directory is not None)


def image_mime_type(data: bytes) -> str | None:
    """The MIME type of a PNG, JPEG, GIF or WEBP image from its magic bytes, else ``None``."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


class Filesystem(Capability):
    """Gives the model ``apply_patch(patch)`` and ``view_image(path)`` on the workspace."""

    type = "filesystem"

    async def on_run_start(self, ctx: SandboxRunContext) -> None:
        # the Memory capability of the same run puts its redactors here (see MEMORY_WRITE_GUARDS)
        self._run_extras = ctx.extras

    def tools(self) -> list[FunctionTool]:
        async def apply_patch_tool(patch: str) -> str:
            extras: dict[Any, Any] = getattr(self, "_run_extras", {})
            guards: list[tuple[str, Redactor]] = extras.get(MEMORY_WRITE_GUARDS, [])
            overlays = extras.get(MEMORY_PROPOSALS)
            files = _RedactingFiles(self.session, guards, overlays) if guards else self.session
            async with contextlib.AsyncExitStack() as stack:
                # an edit to memory files waits for a running consolidation of that layout
                for lock in _memory_locks(self.session, patch, guards):
                    await stack.enter_async_context(self.session.lock(lock, timeout=60.0))
                result = await apply_patch(files, patch)
            return result.render()

        async def view_image(path: str) -> list[dict[str, Any]]:
            return await self._view_image(path)

        return [
            function_tool(name="apply_patch", description=_APPLY_PATCH_DESCRIPTION)(
                apply_patch_tool
            ),
            function_tool(description=_VIEW_IMAGE_DESCRIPTION)(view_image),
        ]

    async def _view_image(self, path: str) -> list[dict[str, Any]]:
        data = await self.session.read_bytes(path)
        if len(data) > MAX_IMAGE_BYTES:
            raise SandboxError(
                f"view_image: '{path}' is {len(data)} bytes; images over {MAX_IMAGE_BYTES} "
                "bytes are refused. Make a smaller copy (e.g. scale it down) and view that.",
                operation="view_image",
                path=path,
            )
        mime = image_mime_type(data)
        if mime is None:
            raise SandboxError(
                f"view_image: '{path}' is not a PNG, JPEG, GIF or WEBP image; read text files "
                "with a shell command instead.",
                operation="view_image",
                path=path,
            )
        encoded = base64.b64encode(data).decode("ascii")
        return [{"type": "input_image", "image_url": f"data:{mime};base64,{encoded}"}]

    async def instructions(self, ctx: SandboxRunContext) -> str | None:
        return (
            "Edit files with `apply_patch` (the `*** Begin Patch` format; paths relative to the "
            "workspace root; a patch that does not fit changes nothing). Look at image files "
            "with `view_image`."
        )
