"""The viewer as one HTML file: the page, its styles, its script and its data inline, nothing fetched.

The data goes in a `<script type="application/json">` block with every `<`, `>` and `&` written as a JSON escape, so
no model text can close the block or open a tag; the page builds its elements from that data with text nodes only.
The page's Content-Security-Policy allows its own script alone (by hash), no connection and no other source: an
attribute or a link smuggled in would neither run nor load.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
from pathlib import Path

HERE = Path(__file__).parent
GENERATOR = '<meta name="generator" content="grpo-lab viewer">'
_SLOT = re.compile(r"\{\{([A-Z_]+)\}\}")


class ViewNotWritable(ValueError):
    """The output path is not the viewer's to write; the message is one line."""


def embed(payload: dict) -> str:
    """`payload` as JSON that is inert inside a script block: no `<`, `>`, `&` or line separators left raw."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)  # only ever inside JSON strings: JSON has no other place for them
    return text


def render(payload: dict) -> str:
    """The page for `payload` (analysis/view/data.py's `collect`)."""
    script = (HERE / "viewer.js").read_text()
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    slots = {"TITLE": html.escape(f"{payload['title']}: groups"), "STYLE": (HERE / "viewer.css").read_text(),
             "SCRIPT_HASH": f"sha256-{digest}", "DATA": embed(payload), "SCRIPT": script}
    # one pass: what a slot brings in is never searched for slots again
    return _SLOT.sub(lambda m: slots[m.group(1)], (HERE / "viewer.html").read_text())


def is_viewer_page(path: Path) -> bool:
    """Whether `path` is a plain file this viewer wrote (its generator line near the top)."""
    if path.is_symlink() or not path.is_file():
        return False
    with path.open("rb") as f:
        return GENERATOR.encode() in f.read(512)


def writable(out: Path) -> None:
    """Refuse, in one line, a path that is not a new file or a viewer page this tool wrote."""
    if out.is_symlink():
        raise ViewNotWritable(f"--out {out}: a symbolic link; give a plain file path")
    if out.exists():
        if not out.is_file():
            raise ViewNotWritable(f"--out {out}: exists and is not a file")
        if not is_viewer_page(out):
            raise ViewNotWritable(f"--out {out}: exists and is not a page this viewer wrote; give a new path")
    if not out.parent.is_dir():
        raise ViewNotWritable(f"--out {out}: no folder {out.parent}")


def write(out: Path, page: str) -> Path:
    """Write `page` to `out` whole (beside it first, then renamed over it)."""
    writable(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, out)
    return out
