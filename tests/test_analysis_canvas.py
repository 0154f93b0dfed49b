"""The figures' canvas (analysis/render/canvas.py): its PNG writer against matplotlib's own, and the garbage
collector it pauses while a figure is drawn."""

import gc
import io
import weakref

import numpy as np
import pytest
from PIL import Image

from analysis.render.canvas import DPI, figure, png, save, styled


def _drawn(path):
    fig, axes = figure(2, legend=["a line"])
    axes[0].plot([1, 2, 3], [0.2, 0.9, 0.4], marker="o", label="a line")
    axes[1].fill_between([0, 1], [0, 0.5], [0.3, 1.0], alpha=0.2)
    axes[1].set_title("difficulty 2\n(2+1 digits)")
    return fig


def test_png_holds_the_pixels_it_was_given():
    pixels = np.random.default_rng(0).integers(0, 256, (37, 53, 4), dtype=np.uint8)
    decoded = Image.open(io.BytesIO(png(pixels, 150)))
    assert decoded.mode == "RGBA" and decoded.size == (53, 37)
    np.testing.assert_array_equal(np.asarray(decoded), pixels)
    assert decoded.info["dpi"] == pytest.approx((150, 150), abs=0.02)  # stored in pixels per metre


def test_a_saved_figure_has_the_pixels_matplotlib_writes(tmp_path):
    ours = save(_drawn(tmp_path), tmp_path / "ours.png")
    _drawn(tmp_path).savefig(tmp_path / "matplotlib.png", dpi=DPI)
    with Image.open(ours) as a, Image.open(tmp_path / "matplotlib.png") as b:
        assert a.size == b.size and a.info["dpi"] == pytest.approx(b.info["dpi"], abs=0.01)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("enabled", [True, False])
def test_a_figure_leaves_the_collector_as_it_found_it_and_its_garbage_collectable(tmp_path, enabled):
    seen = {}

    @styled
    def draw(data, path):
        seen["paused"] = not gc.isenabled()
        fig = _drawn(path)
        seen["figure"] = weakref.ref(fig)
        return save(fig, path)

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        draw(None, tmp_path / "f.png")
        assert seen["paused"] and gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
    gc.collect()
    assert seen["figure"]() is None  # its cycles are freed by the next pass
