"""The LU workload's size: N, the tile size b, NT = N / b tiles per dimension.

One check for every entry point (`testbed simulate`, the engines, experiment configs and
design tables): N a positive multiple of b, and within numasim's limits
(simulator/src/config.hpp kMaxTiles, kMaxTileSize).
"""

from __future__ import annotations

MAX_TILES, MAX_TILE_SIZE = 4096, 65536


def size_problem(n: int, b: int) -> str | None:
    """What an LU of order n in b x b tiles lacks (an InputError's `expected`), or None."""
    if n <= 0 or b <= 0 or n % b:
        return f"positive N that is a multiple of b, got N={n} b={b}"
    return None


def limits_problem(n: int, b: int) -> str | None:
    """Why numasim would refuse the size (b, NT above its limits), or None."""
    if b > MAX_TILE_SIZE or n // b > MAX_TILES:
        return f"b <= {MAX_TILE_SIZE} and N/b <= {MAX_TILES} tiles per dimension (numasim's limits), got N={n} b={b}"
    return None
