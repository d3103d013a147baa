"""The LU kernels' colours, one palette for every figure and trace the testbed draws or writes.

StarVZ's own (R/phase2_applications.R, `lu_colors`, schnorr/starvz commit 7426178): getrf
#e41a1c, trsm #377eb8, gemm #4daf4a (ColorBrewer Set1's first three, red, blue, green), plrnt
and plgsy "yellow". StarVZ matches a task to a kernel when the kernel's name occurs in the
task's (`read_worker_csv`, `partial_join`: grep), so Chameleon's `dgetrf_nopiv`, StarPU's
`starpu_dlu_lu_model_trsm_ll` and numasim's `trsm` all take trsm's colour. Anything else gets
GREY.
"""

from __future__ import annotations

#: StarVZ's lu_colors, in its order: kernel name -> colour
KERNEL_COLORS: dict[str, str] = {"getrf": "#e41a1c", "trsm": "#377eb8", "gemm": "#4daf4a",
                                 "plgsy": "#ffff00", "plrnt": "#ffff00"}  # R's "yellow"
GREY = "#808080"


def kernel_color(name: str) -> str:
    """The colour of a task or codelet named `name` (a kind, a perf-model symbol, a codelet),
    the first of StarVZ's kernels whose name occurs in it."""
    for kernel, color in KERNEL_COLORS.items():
        if kernel in name:
            return color
    return GREY


def paje_rgb(name: str) -> str:
    """kernel_color as a Paje colour: "r g b", each in [0, 1]."""
    h = kernel_color(name).lstrip("#")
    return " ".join(f"{int(h[i:i + 2], 16) / 255:.3g}" for i in (0, 2, 4))
