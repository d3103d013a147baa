"""One palette for the LU kernels (StarVZ's) and figures saved as PNG and PDF."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd

from testbed import ROOT
from testbed.common.figures import save_figure, vector_path
from testbed.common.palette import GREY, KERNEL_COLORS, kernel_color, paje_rgb


def test_palette_is_starvz_lu_colors():
    # StarVZ R/phase2_applications.R, lu_colors: getrf, trsm, gemm in ColorBrewer Set1's first colours
    assert KERNEL_COLORS["getrf"] == "#e41a1c" and KERNEL_COLORS["trsm"] == "#377eb8"
    assert KERNEL_COLORS["gemm"] == "#4daf4a"
    # matched as StarVZ does (the kernel's name occurs in the task's): every naming of the project
    for name, kernel in (("dgetrf_nopiv", "getrf"), ("getrf", "getrf"), ("dtrsm", "trsm"), ("trsm_row", "trsm"),
                         ("starpu_dlu_lu_model_trsm_ll", "trsm"), ("dgemm", "gemm"),
                         ("starpu_dlu_lu_model_gemm", "gemm"), ("dplrnt", "plrnt")):
        assert kernel_color(name) == KERNEL_COLORS[kernel], name
    assert kernel_color("Idle") == GREY
    assert paje_rgb("dgemm") == "0.302 0.686 0.29"


def test_no_plot_picks_its_own_kernel_colours():
    """Colour maps in the testbed's plots are for other things than kernels (NUMA nodes, link
    classes, heatmaps); a kernel colour comes from testbed/common/palette.py. Checked on the
    sources: a dict of kernel names to colours anywhere else fails."""
    kernels = {"getrf", "trsm", "gemm", "dgemm", "dtrsm", "dgetrf_nopiv", "plrnt"}
    offenders = []
    for path in (ROOT / "testbed").rglob("*.py"):
        if path.name == "palette.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                values = [v for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
                if keys & kernels and values and all(v.value.startswith("#") or v.value.count(" ") == 2
                                                     for v in values):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders


def test_paje_export_colours_kinds_with_the_palette(tmp_path: Path):
    from testbed.traces.paje import export_paje

    tasks = tmp_path / "t.csv"
    pd.DataFrame({"ResourceId": ["n0.cpu0", "n0.cpu1", "n0.gpu0"], "Start": [0.0, 0.1, 0.2], "End": [0.1, 0.3, 0.4],
                  "Value": ["getrf", "trsm", "gemm"], "Node": [0, 0, 0], "WorkerNuma": [0, 0, 0]}).to_csv(tasks,
                                                                                                       index=False)
    export_paje(tasks, None, tmp_path / "t.paje")
    values = {}
    for line in (tmp_path / "t.paje").read_text().splitlines():
        f = line.split()
        if len(f) >= 5 and not line.startswith("%") and f[2] == "ST" and f[1] in ("getrf", "trsm", "gemm"):
            values[f[1]] = " ".join(f[4:]).strip('"')
    assert values == {k: paje_rgb(k) for k in ("getrf", "trsm", "gemm")}


def test_save_figure_writes_png_and_a_reproducible_pdf(tmp_path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.bar(["dgetrf_nopiv", "dtrsm", "dgemm"], [1, 2, 3], color=[kernel_color(k) for k in ("getrf", "trsm", "gemm")])
    png = save_figure(fig, tmp_path / "a.png", dpi=50)
    save_figure(fig, tmp_path / "b.png", dpi=50)
    plt.close(fig)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pdf = vector_path(png)
    assert pdf == tmp_path / "a.pdf" and pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.read_bytes() == (tmp_path / "b.pdf").read_bytes()  # no creation date: same figure, same bytes
