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


class _RedactingFiles:
    """The session, with writes under a guarded memory directory redacted first."""

    def __init__(self, session: SandboxSession, guards: list[tuple[str, Redactor]]) -> None:
        self._session = session
        self._guards = guards

    def _redactor(self, path: str) -> Redactor | None:
        directory = self.directory(path)
        return None if directory is None else dict(self._guards)[directory]

    def directory(self, path: str) -> str | None:
        """The guarded memory directory ``path`` lies in, if any."""
        raw = path.strip()
        for prefix in (self._session.display_root, str(self._session.root)):
            if raw == prefix or raw.startswith(prefix.rstrip("/") + "/"):
                raw = raw[len(prefix) :]
                break
        rel = posixpath.normpath("/" + raw).lstrip("/")
        for directory, _redactor in self._guards:
            if rel == directory or rel.startswith(directory + "/"):
                return directory
        return None

    async def write(self, path: str, data: bytes | str) -> None:
        redactor = self._redactor(path)
        if redactor is not None:
            try:
                text = data.decode("utf-8") if isinstance(data, bytes) else data
            except UnicodeDecodeError:
                pass
            else:
                data = redactor.redact(text)
        await self._session.write(path, data)

    async def read_bytes(self, path: str) -> bytes:
        return await self._session.read_bytes(path)

    async def exists(self, path: str) -> bool:
        return await self._session.exists(path)

    async def mkdir(self, path: str, parents: bool = True) -> None:
        await self._session.mkdir(path, parents=parents)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._session.remove(path, recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        await self._session.rename(src, dst)


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
            files = _RedactingFiles(self.session, guards) if guards else self.session
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
