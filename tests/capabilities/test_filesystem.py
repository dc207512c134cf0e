"""The Filesystem capability's tools, on the in-memory session."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from sandmem._errors import SandboxError, SandboxPathError, UserError
from sandmem.agent._tools import FunctionTool
from sandmem.capabilities import Filesystem
from sandmem.capabilities.filesystem import MAX_IMAGE_BYTES, image_mime_type
from sandmem.sandboxes import SandboxSession
from sandmem.sandboxes._apply_patch import PatchError


def tiny_png() -> bytes:
    """A valid 1x1 red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def tool(capability: Filesystem, name: str) -> FunctionTool:
    return next(t for t in capability.tools() if t.name == name)


async def call(capability: Filesystem, name: str, **arguments: Any) -> Any:
    return await tool(capability, name).on_invoke(json.dumps(arguments))


def test_tool_names_and_schemas() -> None:
    tools = {t.name: t for t in Filesystem().tools()}
    assert sorted(tools) == ["apply_patch", "view_image"]
    assert tools["apply_patch"].params_json_schema["required"] == ["patch"]
    assert "*** Begin Patch" in tools["apply_patch"].description
    assert tools["view_image"].params_json_schema["required"] == ["path"]


async def test_unbound_capability_says_how_to_bind() -> None:
    with pytest.raises(UserError, match="not bound to a sandbox session"):
        await call(Filesystem(), "view_image", path="x.png")


async def test_instructions_mention_both_tools() -> None:
    text = await Filesystem().instructions(None)  # type: ignore[arg-type]
    assert text is not None
    assert "apply_patch" in text
    assert "view_image" in text


async def test_apply_patch_tool_reports_changes(session: SandboxSession, workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"old\n")
    fs = Filesystem().bind(session)
    patch = (
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n"
        "*** Add File: b.txt\n+hi\n*** End Patch"
    )
    out = await call(fs, "apply_patch", patch=patch)
    assert out == "Patch applied. Changed files:\nA b.txt\nM a.txt"
    assert (workspace / "a.txt").read_bytes() == b"new\n"
    assert (workspace / "b.txt").read_bytes() == b"hi\n"


async def test_apply_patch_tool_raises_patch_error(
    session: SandboxSession, workspace: Path
) -> None:
    (workspace / "a.txt").write_bytes(b"old\n")
    fs = Filesystem().bind(session)
    patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-other\n+new\n*** End Patch"
    with pytest.raises(PatchError, match=r"hunk 1 of 'a\.txt'"):
        await call(fs, "apply_patch", patch=patch)
    assert (workspace / "a.txt").read_bytes() == b"old\n"


async def test_view_image_returns_a_data_url(session: SandboxSession, workspace: Path) -> None:
    png = tiny_png()
    (workspace / "img").mkdir()
    (workspace / "img/dot.png").write_bytes(png)
    out = await call(Filesystem().bind(session), "view_image", path="img/dot.png")
    assert out == [
        {
            "type": "input_image",
            "image_url": "data:image/png;base64," + base64.b64encode(png).decode(),
        }
    ]


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (tiny_png(), "image/png"),
        (b"\xff\xd8\xff\xe0rest", "image/jpeg"),
        (b"GIF89a...", "image/gif"),
        (b"GIF87a...", "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", None),
        (b"hello", None),
        (b"", None),
    ],
)
def test_image_mime_type(data: bytes, mime: str | None) -> None:
    assert image_mime_type(data) == mime


async def test_view_image_refuses_non_images_large_files_and_escapes(
    session: SandboxSession, workspace: Path
) -> None:
    (workspace / "notes.txt").write_bytes(b"just text")
    (workspace / "huge.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * MAX_IMAGE_BYTES)
    fs = Filesystem().bind(session)
    with pytest.raises(SandboxError, match="not a PNG, JPEG, GIF or WEBP image"):
        await call(fs, "view_image", path="notes.txt")
    with pytest.raises(SandboxError, match="images over 10485760 bytes are refused"):
        await call(fs, "view_image", path="huge.png")
    with pytest.raises(SandboxPathError):
        await call(fs, "view_image", path="../outside.png")
