"""The tiled LU's codelets: the one table of kernel symbols, buffers, flop counts and CUDA
implementations that calibration, platform generation, the engines and bench/ read.

Chameleon's LU (compute/pzgetrf_nopiv.c) submits getrf_nopiv(A:RW), trsm(A:R, B:RW),
gemm(A:R, B:R, C:RW) and, to generate the matrix, plrnt(A:W); every buffer is a b x b tile
of doubles, the last one written. A task's perf-model footprint and the history `size`
(bytes of all its buffers) follow from the buffer count. apps/lu (apps/lu/lu_codelets.c) has
CUDA implementations of gemm and trsm, and of getrf_nopiv with --getrf-gpu (cuSOLVER).
StarPU's own LU example (examples/lu) names its models starpu_dlu_lu_model_* and has a
row and a column trsm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Codelet:
    kind: str  # task kind in apps/lu's and numasim's output (tasks_by_kind)
    symbol: str  # Chameleon's perf-model symbol (file codelets/45/<symbol>.<host>)
    buffers: int  # b x b tiles the task accesses; all but the last are read only
    flops: str  # flop count of one task as a formula of b (as kernels.yaml records it)
    flop_count: Callable[[int], float]  # the same formula
    cuda: bool  # apps/lu has a CUDA implementation
    cuda_opt_in: bool = False  # ... used only with --getrf-gpu (RunSpec.getrf_on_gpu)

    def size_bytes(self, b: int) -> int:
        """StarPU's history `size` of a task: all its buffers, b x b doubles each."""
        return self.buffers * b * b * 8


#: Chameleon's LU codelets, in this order everywhere (calibration tables, model files).
LU_CODELETS: tuple[Codelet, ...] = (
    Codelet("getrf", "dgetrf_nopiv", 1, "2*b^3/3", lambda b: 2.0 * b**3 / 3.0, cuda=True, cuda_opt_in=True),
    Codelet("trsm", "dtrsm", 2, "b^3", lambda b: float(b**3), cuda=True),
    Codelet("gemm", "dgemm", 3, "2*b^3", lambda b: 2.0 * b**3, cuda=True),
    Codelet("plrnt", "dplrnt", 1, "0", lambda b: 0.0, cuda=False),
)
#: Chameleon's own generation (CHAMELEON_dplgtr_Tile -> pzplgsy, compute/pzplgsy.c): one b x b
#: tile of random values, the work of apps/lu's plrnt.
CHAMELEON_GENERATION = Codelet("plgsy", "dplgsy", 1, "0", lambda b: 0.0, cuda=False)
#: The codelets a calibration run of each program fills models for (`testbed calibrate --app`).
#: Chameleon's getrf_nopiv has no CUDA implementation (runtime/starpu/codelets/codelet_zgetrf_nopiv.c
#: CODELETS_CPU), apps/lu's has one with --getrf-gpu.
APP_CODELETS: dict[str, tuple[Codelet, ...]] = {
    "lu": LU_CODELETS,
    "chameleon": (Codelet("getrf", "dgetrf_nopiv", 1, "2*b^3/3", lambda b: 2.0 * b**3 / 3.0, cuda=False),
                  *LU_CODELETS[1:3], CHAMELEON_GENERATION),
}
BY_SYMBOL: dict[str, Codelet] = {c.symbol: c for c in (*LU_CODELETS, CHAMELEON_GENERATION)}
BY_KIND: dict[str, Codelet] = {c.kind: c for c in LU_CODELETS}
#: symbol -> buffers (the footprint of a task depends on that count)
LU_KERNELS: dict[str, int] = {c.symbol: c.buffers for c in LU_CODELETS}
#: task kind -> Chameleon symbol
KIND_SYMBOL: dict[str, str] = {c.kind: c.symbol for c in LU_CODELETS}
#: symbols with a CUDA implementation in apps/lu (getrf_nopiv with --getrf-gpu)
CUDA_SYMBOLS: tuple[str, ...] = tuple(c.symbol for c in LU_CODELETS if c.cuda)

#: The perf-model symbol sets apps/lu can use (its --symbols; numasim's `symbols`):
#: set -> {task kind: (model symbol, buffers, has a CUDA implementation used by default)}.
#: getrf_nopiv runs on CUDA workers only with --getrf-gpu (RunSpec.getrf_on_gpu).
SYMBOL_SETS: dict[str, dict[str, tuple[str, int, bool]]] = {
    "chameleon": {c.kind: (c.symbol, c.buffers, c.cuda and not c.cuda_opt_in) for c in LU_CODELETS[:3]},
    "starpu-lu": {
        "getrf": ("starpu_dlu_lu_model_getrf", 1, False),
        "trsm_ll": ("starpu_dlu_lu_model_trsm_ll", 2, True),
        "trsm_ru": ("starpu_dlu_lu_model_trsm_ru", 2, True),
        "gemm": ("starpu_dlu_lu_model_gemm", 3, True),
    },
}


def numasim_symbols(symbols: str) -> dict[str, str]:
    """numasim's `symbols` object (docs/interfaces.md §4) for a symbol set: the row and column
    trsm have their own models in StarPU's LU example (trsm_ll, trsm_ru), one in Chameleon."""
    kinds = SYMBOL_SETS[symbols]
    out = {"getrf": kinds["getrf"][0], "gemm": kinds["gemm"][0]}
    if "trsm" in kinds:
        out["trsm"] = kinds["trsm"][0]
    else:
        out["trsm_row"], out["trsm_col"] = kinds["trsm_ll"][0], kinds["trsm_ru"][0]
    return out

