"""The ``Filesystem`` capability: ``apply_patch`` to edit files and ``view_image`` to see images."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from sandmem._errors import SandboxError
from sandmem.agent._capability import Capability
from sandmem.agent._tools import FunctionTool, function_tool
from sandmem.memory.live_edit import LiveEditPolicy, run_policy

if TYPE_CHECKING:
    from sandmem.agent._context import SandboxRunContext

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
Relative paths start at your working directory. Give about three unchanged lines around each \
change and list hunks in file order. A standard unified diff (--- a/path, +++ b/path, @@ \
lines) is accepted too. If any part does not fit, nothing is changed."""

_VIEW_IMAGE_DESCRIPTION = (
    "Look at an image file in the workspace (PNG, JPEG, GIF or WEBP, at most "
    f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB). A relative path starts at your working "
    "directory."
)


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

    #: the run's rules for memory files (the Memory capability of the same run sets them)
    _live_edits: LiveEditPolicy | None = None

    async def on_run_start(self, ctx: SandboxRunContext) -> None:
        self._live_edits = run_policy(ctx.extras)

    def tools(self) -> list[FunctionTool]:
        async def apply_patch_tool(patch: str) -> str:
            policy = self._live_edits or LiveEditPolicy()
            # an edit to memory files is redacted (or kept in a proposal's overlay) and waits
            # for a running consolidation
            patch = self.workspace_scope.anchor_patch(patch)
            return (await policy.apply(self.session, patch)).render()

        async def view_image(path: str) -> list[dict[str, Any]]:
            return await self._view_image(path)

        return [
            function_tool(name="apply_patch", description=_APPLY_PATCH_DESCRIPTION)(
                apply_patch_tool
            ),
            function_tool(description=_VIEW_IMAGE_DESCRIPTION)(view_image),
        ]

    async def _view_image(self, path: str) -> list[dict[str, Any]]:
        data = await self.session.read_bytes(str(self.workspace_scope.anchor(path)))
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
            "Edit files with `apply_patch` (the `*** Begin Patch` format; relative paths start "
            "at your working directory; a patch that does not fit changes nothing). Look at "
            "image files with `view_image`."
        )
