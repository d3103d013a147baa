"""StarPU history-based performance-model files (format version 45) and task footprints.

Matched against StarPU 1.4.10:
* file layout: src/core/perfmodel/perfmodel_history.c (dump_model_file,
  dump_per_arch_model_file, dump_reg_model, dump_history_entry; parse_model_file for
  what the reader requires);
* footprints: src/datawizard/footprint.c (starpu_task_data_footprint,
  _starpu_compute_data_footprint), src/datawizard/interfaces/matrix_interface.c
  (footprint_matrix_interface_crc32), src/common/hash.c (CRC32C, big-endian bit order,
  bytes of a uint32 in memory order, i.e. little-endian on x86).
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

PERFMODEL_VERSION = 45
CRC32C_POLY_BE = 0x1EDC6F41
MATRIX_INTERFACE_ID = 0  # STARPU_MATRIX_INTERFACE_ID (include/starpu_data_interfaces.h)
#: device type codes of the model files (enum starpu_worker_archtype)
DEVICE_TYPES = {"cpu": 0, "cuda": 1, "opencl": 2}
DEVICE_NAMES = {v: k for k, v in DEVICE_TYPES.items()}


def _crc_byte(byte: int, crc: int) -> int:
    crc ^= byte << 24
    for _ in range(8):
        crc = ((crc << 1) ^ CRC32C_POLY_BE) if crc & 0x80000000 else (crc << 1)
        crc &= 0xFFFFFFFF
    return crc


def crc32c_be_n(data: bytes, crc: int = 0) -> int:
    """starpu_hash_crc32c_be_n: bytes in order."""
    for b in data:
        crc = _crc_byte(b, crc)
    return crc


def crc32c_be(value: int, crc: int = 0) -> int:
    """starpu_hash_crc32c_be: the 4 bytes of a uint32 as laid out in memory (little-endian)."""
    return crc32c_be_n(struct.pack("<I", value & 0xFFFFFFFF), crc)


def matrix_handle_footprint(nx: int, ny: int) -> int:
    """Footprint StarPU stores in a matrix handle at registration (interface id folded in)."""
    return crc32c_be(crc32c_be(nx, ny), MATRIX_INTERFACE_ID)


#: STARPU_MAX_INTERFACE_ID (include/starpu_data_interfaces.h): the first id StarPU gives an
#: interface registered at run time (src/datawizard/interfaces/data_interface.c
#: starpu_data_interface_get_next_id), as Chameleon's tile interface is.
MAX_INTERFACE_ID = 11


def data_footprint(interface_footprint: int, interface_id: int, fold_raw_id: bool = False) -> int:
    """A handle's footprint from its interface's footprint function (src/datawizard/footprint.c
    _starpu_compute_data_footprint, StarPU 1.4.10): the interface id is folded in, 0 for an id
    given at run time (>= STARPU_MAX_INTERFACE_ID). `fold_raw_id`: the id as it is, as the
    footprint.c of earlier StarPU sources (copyright 2008-2020) folds it."""
    return crc32c_be(interface_footprint, interface_id if fold_raw_id or interface_id < MAX_INTERFACE_ID else 0)


def chameleon_tile_footprint(m: int, n: int, interface_id: int = MAX_INTERFACE_ID, fold_raw_id: bool = False) -> int:
    """Footprint of a handle of Chameleon's tile interface for an m x n tile: Chameleon's
    runtime/starpu/interface/cham_tile_interface.c cti_footprint hashes (m, n) with
    starpu_hash_crc32c_be, and its interface id is assigned at run time
    (starpu_cham_tile_interface_init: starpu_data_interface_get_next_id); then StarPU folds the
    id in (data_footprint). Under StarPU 1.4.10 this equals the matrix interface's footprint of an
    m x n matrix (nx = m, ny = n): Chameleon's models and apps/lu's share their footprints."""
    return data_footprint(crc32c_be(m, n), interface_id, fold_raw_id)


def task_footprint(handle_footprints: list[int]) -> int:
    """Footprint of a task without custom footprint/size_base: fold of its handles' footprints."""
    fp = 0
    for h in handle_footprints:
        fp = crc32c_be(h, fp)
    return fp


def square_tiles_footprint(b: int, nbuffers: int) -> int:
    """Footprint of a task whose `nbuffers` buffers are all b x b matrices."""
    return task_footprint([matrix_handle_footprint(b, b)] * nbuffers)


@dataclass
class HistoryEntry:
    footprint: int
    size: int  # bytes of all buffers
    flops: float
    mean_us: float
    dev_us: float
    nsample: int

    @property
    def sum(self) -> float:
        return self.mean_us * self.nsample

    @property
    def sum2(self) -> float:
        return self.nsample * (self.dev_us**2 + self.mean_us**2)


@dataclass
class ArchModel:
    """One combination (a single device) and its implementation 0."""

    device: str  # "cpu" or "cuda"
    devid: int
    entries: list[HistoryEntry] = field(default_factory=list)
    ncores: int = 1


def _e(v: float) -> str:
    # printf("%-15e"): StarPU pads to 15 columns; glibc prints NaN as "nan".
    s = "nan" if math.isnan(v) else f"{v:e}"
    return f"{s:<15}"


def _lu(v: int) -> str:
    return f"{v:<15d}"


def model_text(combs: list[ArchModel]) -> str:
    """Text of a history-based model file, as dump_model_file writes it."""
    out = ["##################\n# Performance Model Version\n", f"{PERFMODEL_VERSION}\n\n"]
    out.append("####################\n# COMBs\n# number of combinations\n")
    out.append(f"{len(combs)}\n")
    for i, comb in enumerate(combs):
        out.append(f"####################\n# COMB_{i}\n# number of types devices\n1\n")
        out.append("####################\n# DEV_0\n")
        out.append("# device type (CPU - 0, CUDA - 1, OPENCL - 2, MPI_MS - 5, TCPIP_MS - 6)\n")
        out.append(f"{DEVICE_TYPES[comb.device]}\n")
        out.append(f"####################\n# DEV_0\n# device id \n{comb.devid}\n")
        out.append(f"####################\n# DEV_0\n# number of cores \n{comb.ncores}\n")
        out.append("##########\n# number of implementations\n1\n")
        out.append(f"#####\n# Model for {comb.device}{comb.devid}_impl0 (Comb{i})\n")
        out.append(f"# number of entries\n{len(comb.entries)}\n")
        # Regression part: no regression (history-based model), as StarPU writes it then.
        out.append("# sumlnx\tsumlnx2\t\tsumlny\t\tsumlnxlny\talpha\t\tbeta\t\tn\tminx\t\tmaxx\n")
        out.append(f"{_e(0)}\t{_e(0)}\t{_e(0)}\t{_e(0)}\t{_e(math.nan)}\t{_e(math.nan)}\t0\t{_lu(0)}\t{_lu(0)}\n")
        out.append("# a\t\tb\t\tc\n")
        out.append(f"{_e(math.nan)}\t{_e(math.nan)}\t{_e(math.nan)}\n")
        out.append("# not multiple-regression-base\n0\n")
        out.append("# hash\t\tsize\t\tflops\t\tmean (us or J)\tdev (us or J)\tsum\t\tsum2\t\tn\n")
        for e in comb.entries:
            out.append(f"{e.footprint:08x}\t{_lu(e.size)}\t{_e(e.flops)}\t{_e(e.mean_us)}\t{_e(e.dev_us)}\t"
                       f"{_e(e.sum)}\t{_e(e.sum2)}\t{e.nsample}\n")
        out.append("\n")
    return "".join(out)


def write_model(path: str | Path, combs: list[ArchModel]) -> None:
    Path(path).write_text(model_text(combs))


def _data_lines(text: str) -> list[str]:
    """Lines that are not comments or blank (StarPU's _starpu_drop_comments)."""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def _history_entry(f: list[str], path: str | Path, where: str) -> HistoryEntry:
    """One `hash size flops mean dev sum sum2 n` line, checked as numasim checks it
    (simulator/src/perfmodel.cpp): finite numbers, mean > 0, dev >= 0, n a count."""
    from testbed.common.errors import InputError

    if len(f) != 8 or not re.fullmatch(r"[0-9a-f]{8}", f[0]):
        raise InputError(path, where, "'hash size flops mean dev sum sum2 n' with an 8-digit hexadecimal hash")
    try:
        size, flops, mean, dev, n = int(f[1]), float(f[2]), float(f[3]), float(f[4]), int(f[7])
        sums = float(f[5]), float(f[6])  # StarPU reads them too (scan_history_entry) and aborts on garbage
    except ValueError:
        raise InputError(path, where, f"numbers, got {' '.join(f)!r}") from None
    # StarPU writes an entry without samples (n = 0, mean 0) while it calibrates, when every
    # sample so far was left out as an outlier (perfmodel_history.c): valid, but no timing.
    no_samples = n == 0 and mean == 0 and dev == 0
    if size <= 0 or n < 0 or not (math.isfinite(dev) and dev >= 0) or not (
            no_samples or (math.isfinite(mean) and mean > 0)) or not all(math.isfinite(x) and x >= 0 for x in sums):
        raise InputError(path, where, f"size > 0, finite mean > 0 (0 with n = 0), finite dev, sum, sum2 >= 0, "
                                      f"n >= 0, got {' '.join(f)!r}")
    return HistoryEntry(int(f[0], 16), size, flops, mean, dev, n)


def read_model(path: str | Path) -> list[ArchModel]:
    """Parse a history-based model file (one device per combination, as LU models are);
    a damaged or foreign file is an InputError naming it."""
    from testbed.common.errors import InputError
    from testbed.common.inputs import MODEL_BYTES, read_input_bytes

    data = read_input_bytes(path, "model", "a StarPU history-based performance model", MODEL_BYTES)
    try:
        return _parse_model(_data_lines(data.decode()), path)
    except (StopIteration, IndexError, UnicodeDecodeError):
        raise InputError(path, "model", "a StarPU history-based performance model (format 45), complete") from None
    except ValueError as exc:
        raise InputError(path, "model", f"a StarPU performance model (format 45): {exc}") from None


def _numbers(line: str, count: int, what: str) -> None:
    """A line of `count` numbers (nan allowed: StarPU writes it for an unset regression)."""
    fields = line.split()
    if len(fields) != count:
        raise ValueError(f"{what}: {count} numbers, got {line.strip()!r}")
    for x in fields:
        float(x)  # ValueError names the field


def _parse_model(lines: list[str], path: str | Path) -> list[ArchModel]:
    it = iter(lines)

    def nxt() -> str:
        return next(it)

    version = int(nxt())
    if version != PERFMODEL_VERSION:
        raise ValueError(f"model version {version}, expected {PERFMODEL_VERSION}")
    combs = []
    for _ in range(int(nxt())):
        ndev = int(nxt())
        devs = [(int(nxt()), int(nxt()), int(nxt())) for _ in range(ndev)]
        nimpl = int(nxt())
        comb = ArchModel(DEVICE_NAMES.get(devs[0][0], str(devs[0][0])), devs[0][1], ncores=devs[0][2])
        for impl in range(nimpl):
            nentries = int(nxt())
            _numbers(nxt(), 9, "linear regression line")  # sumlnx .. maxx (scan_reg_model)
            _numbers(nxt(), 3, "non-linear regression line a b c")
            nmult = int(nxt().split()[0])
            if nmult:
                nxt()
            for e in range(nentries):
                entry = _history_entry(nxt().split(), path, f"history entry {e + 1} of combination {len(combs) + 1}")
                if impl == 0 and entry.nsample > 0:  # an entry without samples carries no timing
                    comb.entries.append(entry)
        combs.append(comb)
    return combs


def history_means(path: str | Path) -> dict[str, dict[int, float]]:
    """Mean durations (us) of a history model file: {arch: {data size in bytes: mean_us}},
    arch named as in the file's `# Model for cpu0_impl0` comments ("cpu0_impl0", "cuda1_impl0");
    entries without samples are left out (read_model)."""
    return {f"{c.device}{c.devid}_impl0": {e.size: e.mean_us for e in c.entries} for c in read_model(path)}
