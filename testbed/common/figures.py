"""Saving a matplotlib figure: a PNG (the HTML report embeds it) and the same figure as PDF
beside it (`x.png` -> `x.pdf`), the vector form papers take.

The PDF has no creation date (matplotlib's `metadata={"CreationDate": None}`), so the same data
give the same bytes. Artists marked `rasterized=True` (the space-time chart's thousands of task
rectangles) are embedded as an image at `dpi` inside the PDF; axes and text stay vector.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

VECTOR_SUFFIX = ".pdf"


def vector_path(png: str | Path) -> Path:
    """The PDF written beside a figure's PNG."""
    return Path(png).with_suffix(VECTOR_SUFFIX)


def vector_names(png_names) -> list[str]:
    """The PDF file names of figures named `png_names`."""
    return [vector_path(n).name for n in png_names]


def save_figure(fig, path: str | Path, dpi: int, vector: str | Path | IO[bytes] | None = None) -> Path:
    """`fig` as PNG at `path` and as PDF at `vector` (default: beside it, `.pdf`)."""
    fig.savefig(path, dpi=dpi, format="png")
    fig.savefig(vector_path(path) if vector is None else vector, dpi=dpi, format="pdf",
                metadata={"CreationDate": None})
    return Path(path)
