"""Tile -> node (MPI rank) distributions of the tiled LU, shared by apps/lu and numasim.

* `block_cyclic(nt, p, q)`: Chameleon's 2D block-cyclic map,
  owner(m, n) = (m mod P) * Q + (n mod Q); `near_square_grid(nodes)` picks P x Q
  (P the largest divisor of the node count not above its square root). The same
  rules are coded in apps/lu/lu_distribution.c.
* `heterogeneous(nt, speeds)`: balances tiles by node speed while keeping a
  2D-cyclic pattern. Method: choose a pattern of S = R x C slots (R x C the
  near-square grid of S, S between the node count and 8x it, aspect C/R <= 3,
  R, C <= NT); give each node a number of slots proportional to its speed
  (largest-remainder rounding, at least one slot each when S allows), and
  pick the smallest S whose slot shares are within `tolerance` of the speed
  shares (else the S with the smallest error). Slots are dealt in row-major
  order by smooth weighted round-robin (each step the node with the largest
  accumulated credit takes the slot), and row i of the pattern is rotated by i
  columns, which spreads every node over the rows and columns of the pattern;
  the pattern then repeats cyclically over the NT x NT tiles. With equal speeds this is exactly `block_cyclic` on the
  near-square grid.
* Node speed (`node_gemm_speed`): the sum over a node's workers of their gemm
  throughput, 2 b^3 / mean gemm time, the means read from the node's StarPU
  perf-model file for tiles of size b, and the worker counts from its bus
  `.config` file (StarPU dedicates one CPU core to drive each GPU).
  Without perf models (`described_node_speed`): (cores − GPUs)·core_flops +
  Σ GPU flops from the machine description.
* Files (docs/interfaces.md section 5): NT lines of NT owner ranks; `#` lines
  are comments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.common.atomic import atomic_file
from testbed.common.errors import InputError
from testbed.starpu.bus_files import read_bus_config
from testbed.starpu.lu_codelets import BY_KIND
from testbed.starpu.perfmodel_files import history_means

if TYPE_CHECKING:
    from testbed.describe.machines import Machine

Owners = list[list[int]]


def near_square_grid(nodes: int) -> tuple[int, int]:
    """P x Q = nodes with P <= Q as close as possible (P largest divisor <= sqrt)."""
    if nodes < 1:
        raise InputError(None, "nodes", f"a positive node count, got {nodes}")
    p = max(d for d in range(1, math.isqrt(nodes) + 1) if nodes % d == 0)
    return p, nodes // p


def block_cyclic(nt: int, p: int, q: int) -> Owners:
    """2D block-cyclic owner map over a P x Q grid of ranks (Chameleon's rule)."""
    return [[(m % p) * q + (n % q) for n in range(nt)] for m in range(nt)]


def _apportion(speeds: Sequence[float], slots: int) -> list[int]:
    """Largest-remainder rounding of the speed shares to `slots` integers."""
    total = sum(speeds)
    exact = [s / total * slots for s in speeds]
    counts = [int(math.floor(e)) for e in exact]
    order = sorted(range(len(speeds)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: slots - sum(counts)]:
        counts[i] += 1
    if slots >= len(speeds):  # every node keeps at least one slot: take from the richest
        for i in range(len(counts)):
            if counts[i] == 0:
                j = max(range(len(counts)), key=lambda k: (counts[k] - exact[k], counts[k]))
                counts[j] -= 1
                counts[i] = 1
    return counts


def _deal_slots(counts: Sequence[int]) -> list[int]:
    """Smooth weighted round-robin: the order in which nodes take their slots."""
    total = sum(counts)
    credit = [0] * len(counts)
    order: list[int] = []
    for _ in range(total):
        for i, c in enumerate(counts):
            credit[i] += c
        best = max(range(len(counts)), key=lambda i: (credit[i], -i))
        credit[best] -= total
        order.append(best)
    return order


def pattern_candidates(nt: int, speeds: Sequence[float]) -> list[dict]:
    """Every pattern `heterogeneous` may choose: slots S, its R x C grid, each node's slot count,
    `error` (the largest |slot share − speed share|, what the choice tests) and `overload` (the
    largest slot share / speed share: how much more than its speed the busiest node gets)."""
    total = sum(speeds)
    shares = [s / total for s in speeds]
    out = []
    for slots in range(len(speeds), 8 * len(speeds) + 1):
        r, c = near_square_grid(slots)
        if c > 3 * r or r > nt or c > nt:
            continue
        counts = _apportion(speeds, slots)
        out.append({"slots": slots, "r": r, "c": c, "counts": counts,
                    "error": max(abs(k / slots - share) for k, share in zip(counts, shares, strict=False)),
                    "overload": max(k / slots / share for k, share in zip(counts, shares, strict=False))})
    return out


def chosen_pattern(candidates: list[dict], tolerance: float = 0.01) -> dict | None:
    """The smallest pattern whose error is within `tolerance`, else the one of least error."""
    best: dict | None = None
    for p in candidates:
        if best is None or p["error"] < best["error"] - 1e-12:
            best = p
        if p["error"] <= tolerance:
            break
    return best


def heterogeneous(nt: int, speeds: Sequence[float], tolerance: float = 0.01, slots: int | None = None) -> Owners:
    """Owner map whose per-node tile shares follow `speeds` (see module doc); `slots` forces the
    pattern's size (one of pattern_candidates')."""
    return _heterogeneous_map(nt, speeds, tolerance, slots)[0]


def _heterogeneous_map(nt: int, speeds: Sequence[float], tolerance: float = 0.01,
                       slots: int | None = None) -> tuple[Owners, dict | None]:
    """(owners, the pattern taken: None for equal speeds, block-cyclic)."""
    nodes = len(speeds)
    if nodes < 1 or any(not (s > 0) or math.isinf(s) for s in speeds):
        raise InputError(None, "speeds", f"one positive finite speed per node, got {list(speeds)}")
    if len(set(speeds)) == 1 and slots is None:
        return block_cyclic(nt, *near_square_grid(nodes)), None
    candidates = pattern_candidates(nt, speeds)
    if slots is None:
        best = chosen_pattern(candidates, tolerance)
    else:
        best = next((p for p in candidates if p["slots"] == slots), None)
        if best is None:
            raise InputError(None, "slots", f"a pattern size among {[p['slots'] for p in candidates]}, got {slots}")
    if best is None:  # NT too small for any pattern: one slot per tile
        best = {"slots": nt * nt, "r": nt, "c": nt, "counts": _apportion(speeds, nt * nt)}
    r, c, counts = best["r"], best["c"], best["counts"]
    dealt = _deal_slots(counts)
    # row i of the pattern is the i-th run of C dealt slots rotated by i, so that
    # a node's slots do not stack in the same pattern columns (1D-like pattern)
    pattern = [[dealt[i * c + (j - i) % c] for j in range(c)] for i in range(r)]
    return [[pattern[m % r][n % c] for n in range(nt)] for m in range(nt)], best


def tile_shares(owners: Owners, nodes: int) -> list[float]:
    """Fraction of the tiles owned by each rank."""
    counts = [0] * nodes
    for row in owners:
        for o in row:
            counts[o] += 1
    total = sum(counts)
    return [c / total for c in counts]


def write_distribution(path: str | Path, owners: Owners, comment: str | None = None) -> Path:
    """Write the §5 format atomically."""
    path = Path(path)
    with atomic_file(path) as fh:
        if comment:
            for line in comment.splitlines():
                fh.write(f"# {line}\n")
        for row in owners:
            fh.write(" ".join(str(o) for o in row) + "\n")
    return path


def heterogeneous_with_comment(nt: int, speeds: Sequence[float], tolerance: float = 0.01) -> tuple[Owners, str]:
    """The speed-balanced owner map and the comment that says what it was given and what it chose:
    the speeds, the pattern, and each rank's tile share over its speed share at both ends (the
    busiest rank bounds the run when the speeds are right; docs/tile-mapping.md)."""
    owners, p = _heterogeneous_map(nt, speeds, tolerance)
    head = f"heterogeneous, NT={nt}, node speeds (flop/s): {' '.join(f'{s:.4g}' for s in speeds)}"
    if p is None:
        return owners, head
    total = sum(speeds)
    load = [share / (s / total) for share, s in zip(tile_shares(owners, len(speeds)), speeds, strict=False)]
    lo, hi = min(range(len(load)), key=load.__getitem__), max(range(len(load)), key=load.__getitem__)
    return owners, (f"{head}\npattern: {p['slots']} slots ({p['r']} x {p['c']}); tile share / speed share from "
                    f"{load[lo]:.3f} (rank {lo}) to {load[hi]:.3f} (rank {hi})")


def write_heterogeneous(path: str | Path, nt: int, speeds: Sequence[float]) -> Path:
    """The speed-balanced distribution of NT x NT tiles over len(speeds) ranks, written with its inputs."""
    owners, comment = heterogeneous_with_comment(nt, speeds)
    return write_distribution(path, owners, comment)


def read_distribution(path: str | Path, nt: int | None = None, nodes: int | None = None, key: str = "file") -> Owners:
    """Read and validate a distribution file (square, ranks in [0, nodes)); `key`: the option or
    key that gave it, named when the file cannot be read."""
    from testbed.common.inputs import check_input_file

    check_input_file(path, key, "a distribution file")
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(path, key, f"a readable distribution file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"byte {exc.start}", "a text file of owner ranks (UTF-8)") from None
    owners: Owners = []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            row = [int(tok) for tok in stripped.split()]
        except ValueError:
            raise InputError(path, f"line {lineno}", "whitespace-separated integer owner ranks") from None
        for col, rank in enumerate(row, 1):
            if rank < 0 or (nodes is not None and rank >= nodes):
                limit = f"[0, {nodes})" if nodes is not None else ">= 0"
                raise InputError(path, f"line {lineno} column {col}", f"a rank in {limit}, got {rank}")
        owners.append(row)
    size = nt if nt is not None else len(owners)
    if len(owners) != size:
        raise InputError(path, "rows", f"{size} rows (NT = N/b), got {len(owners)}")
    for i, row in enumerate(owners):
        if len(row) != size:
            raise InputError(path, f"row {i + 1}", f"{size} owner ranks (NT = N/b), got {len(row)}")
    return owners


def node_gemm_speed(sampling_dir: str | Path, host: str, b: int, gemm_symbol: str = "dgemm") -> float:
    """Sum of the node's workers' gemm throughputs (flop/s) for b x b tiles."""
    model = Path(sampling_dir) / "codelets" / "45" / f"{gemm_symbol}.{host}"
    if not model.is_file():
        raise InputError(model, "file", f"the {gemm_symbol} perf model of {host}")
    size = BY_KIND["gemm"].size_bytes(b)
    means = history_means(model)
    devices = read_bus_config(sampling_dir, host)
    flop = BY_KIND["gemm"].flop_count(b)
    cpu = [m[size] for a, m in means.items() if a.startswith("cpu") and size in m]
    if not cpu:
        raise InputError(model, f"cpu entry of size {size}", f"a calibrated CPU gemm time for b={b}")
    speed = (devices["cpus"] - devices["cuda"]) * flop / (cpu[0] * 1e-6)
    for j in range(devices["cuda"]):
        entry = means.get(f"cuda{j}_impl0", {})
        if size not in entry:
            raise InputError(model, f"cuda{j}_impl0 entry of size {size}", f"a calibrated GPU gemm time for b={b}")
        speed += flop / (entry[size] * 1e-6)
    return speed


def described_node_speed(machine: Machine) -> float:
    """Node speed from a machine description: CPU workers (one core per GPU driver) + GPUs."""
    return (machine.ncores - len(machine.gpus)) * machine.core_flops + sum(g.flops for g in machine.gpus)
