"""LOGO images: deterministic rendering of turtle segments and the official pixel similarity `vis_compare`.

The official code draws every segment with ``ax.plot(..., color='black', linewidth=3)`` on a 20x20-inch
matplotlib figure (100 dpi, default subplot margins, both axes limited to [-50, 50], no ticks or frame), reads
the canvas back and compares the grayscale images. We draw the same figure with matplotlib's Agg canvas
directly (no pyplot state, so renders do not depend on one another) and one `LineCollection` with the caps and
joins of a plotted line. The official reader converts to grayscale (OpenCV's ITU-R 601 luma); only black is
drawn on white, so every pixel is gray and its luma is its red channel, which is what we keep.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

FIGSIZE = 20.0   # inches (official: plt.subplots(1, 1, figsize=(20, 20)))
DPI = 100        # matplotlib's default figure dpi
LIMIT = 50.0     # ax.set_xlim(-50, 50), ax.set_ylim(-50, 50)
LINEWIDTH = 3.0  # points
MATCH = 0.98     # official threshold: vis_compare(...) > 0.98 is the same image


def render(segments: Sequence[Sequence[float]], figsize: float = FIGSIZE, dpi: int = DPI) -> np.ndarray:
    """A (H, W) uint8 grayscale image (255 = white) of the pen-down segments ``(x0, y0, x1, y1)``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    fig = Figure(figsize=(figsize, figsize), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xlim(-LIMIT, LIMIT)
    ax.set_ylim(-LIMIT, LIMIT)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if len(segments):
        lines = np.asarray(segments, dtype=np.float64).reshape(-1, 2, 2)
        ax.add_collection(LineCollection(lines, colors="black", linewidths=LINEWIDTH, capstyle="projecting",
                                         joinstyle="round", antialiaseds=True))
        ax.set_xlim(-LIMIT, LIMIT)  # add_collection may autoscale
        ax.set_ylim(-LIMIT, LIMIT)
    canvas.draw()
    return np.array(np.asarray(canvas.buffer_rgba())[..., 0])


def vis_compare(img1: np.ndarray | None, img2: np.ndarray | None) -> float:
    """Official `visual_sim.vis_compare`: the fraction of pixels that are equal, among the pixels that are
    non-white in either image; 0.0 when either image is missing (a program that failed).

    Deviation: two all-white images score 1.0 (officially 0/0 = nan, which fails every ``> 0.98`` test)."""
    if img1 is None or img2 is None:
        return 0.0
    a, b = np.asarray(img1), np.asarray(img2)
    if a.shape != b.shape:
        return 0.0
    inked = (a != 255) | (b != 255)
    n = int(inked.sum())
    if n == 0:
        return 1.0
    return float((a[inked] == b[inked]).sum()) / n


def same_image(img1: np.ndarray | None, img2: np.ndarray | None) -> bool:
    return vis_compare(img1, img2) > MATCH
