"""The values of StarPU's environment variables, checked as StarPU 1.4.10 parses them, before the
real StarPU (the real and starpu-simgrid engines) reads them: StarPU aborts on a value it cannot
parse (include/starpu_helper.h starpu_get_env_number: "must contain an integer", then
STARPU_ABORT; a negative integer fails STARPU_ASSERT_MSG), reads NaN as a scheduler weight, and
falls back to its default scheduler when STARPU_SCHED names none of its policies. Every engine
checks a run's variables here before it starts (testbed/run/simulate.py check_spec), so a value
StarPU-SimGrid or the real StarPU would abort on is refused by the numasim engine too; numasim
checks its own run description the same way (simulator/src/config.cpp parse_starpu_env).
"""

from __future__ import annotations

import math
import re

from testbed.common.errors import InputError

#: Read with starpu_get_env_number / starpu_getenv_number_default: an integer (strtol to the end),
#: not negative. The ids of one thread (MAIN/MPI_THREAD_CPUID) are read the same way.
INTEGER = frozenset({
    "STARPU_NCPU", "STARPU_NCPUS", "STARPU_NCUDA", "STARPU_NOPENCL", "STARPU_RESERVE_NCPU", "STARPU_CUDA_PIPELINE",
    "STARPU_PREFETCH", "STARPU_USE_NUMA", "STARPU_MAIN_THREAD_BIND", "STARPU_MAIN_THREAD_CPUID",
    "STARPU_MAIN_THREAD_COREID", "STARPU_MPI_THREAD_CPUID", "STARPU_MPI_THREAD_COREID", "STARPU_LIMIT_CUDA_MEM",
    "STARPU_LIMIT_CPU_MEM", "STARPU_CALIBRATE", "STARPU_SILENT", "STARPU_FXT_TRACE", "STARPU_DISPLAY_BINDINGS",
    "STARPU_PERF_MODEL_HOMOGENEOUS_CPU", "STARPU_PERF_MODEL_HOMOGENEOUS_CUDA", "STARPU_WORKER_STATS",
    "STARPU_BUS_STATS", "STARPU_MEMORY_STATS", "STARPU_PROFILING", "STARPU_NTHREADS_PER_CORE",
    "STARPU_MPI_STATS", "STARPU_COMM_STATS", "STARPU_ENABLE_STATS", "STARPU_MALLOC_SIMULATION_FOLD",
    "STARPU_CUDA_ONLY_FAST_ALLOC_OTHER_MEMNODES",
})
#: Read with starpu_get_env_float_default (strtof to the end); a weight of the dmda cost.
FLOAT = frozenset({"STARPU_SCHED_ALPHA", "STARPU_SCHED_BETA", "STARPU_SCHED_GAMMA", "STARPU_IDLE_POWER"})
#: Id lists (src/core/topology.c _starpu_initialize_workers_bindid / _deviceid): ids and ranges
#: a-b or a- separated by spaces or commas, at least one.
ID_LIST = frozenset({"STARPU_WORKERS_CPUID", "STARPU_WORKERS_COREID", "STARPU_WORKERS_CUDAID"})
#: StarPU 1.4.10's scheduling policies (the policy_name of src/sched_policies/*.c).
SCHEDULERS = frozenset({
    "dm", "dmda", "dmdap", "dmdas", "dmdasd", "dmdar", "eager", "prio", "graph_test", "heteroprio", "peager", "pheft",
    "random", "ws", "lws", "modular-heft-hierarchical", "modular-eager", "modular-eager-prefetching",
    "modular-eager-prio", "modular-gemm", "modular-heft", "modular-dmda", "modular-dmdap", "modular-dmdar",
    "modular-dmdas", "modular-heft2", "modular-heft-prio", "modular-heteroprio", "modular-heteroprio-heft",
    "modular-pheft", "modular-prandom", "modular-prandom-prio", "modular-prio", "modular-prio-prefetching",
    "modular-random", "modular-random-prio", "modular-random-prefetching", "modular-random-prio-prefetching",
    "modular-ws",
})
MAX_INT = 2**31 - 1  # StarPU narrows the long to an int
MAX_ID = 65535  # as numasim (simulator/src/config.cpp kMaxCpuId): far above STARPU_NMAXWORKERS
_INTEGER = re.compile(r"\s*[+-]?[0-9]+")  # strtol: leading blanks, a sign, digits, nothing after
#: strtof's decimal form (include/starpu_helper.h starpu_get_env_float_default): leading blanks, nothing
#: after (StarPU aborts on "1 " or "1_0", which Python's float() reads; hexadecimal floats are refused too)
_FLOAT = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_ID_ITEM = re.compile(r"([0-9]+)(?:-([0-9]*))?")


def check_value(var: str, value: str, key: str) -> None:
    """Raises InputError(key) when StarPU would abort on `value` or read garbage from it."""
    if "\x00" in value:
        raise InputError(None, key, "a value without NUL bytes")
    if var in INTEGER:
        # strtol accepts leading blanks and an empty string (0); StarPU asserts the value >= 0
        if value and (not _INTEGER.fullmatch(value) or not 0 <= int(value) <= MAX_INT):
            raise InputError(None, key, f"an integer in 0..{MAX_INT} (StarPU aborts otherwise), got {value!r}")
    elif var in FLOAT:
        try:
            number = float(value) if _FLOAT.fullmatch(value) else math.nan
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < 0:
            raise InputError(None, key, f"a finite number >= 0, got {value!r}")
    elif var in ID_LIST:
        items = value.replace(",", " ").split()
        for item in items:
            m = _ID_ITEM.fullmatch(item)
            if not m or int(m.group(1)) > MAX_ID or (m.group(2) and not int(m.group(1)) <= int(m.group(2)) <= MAX_ID):
                raise InputError(None, key, f"ids and ranges a-b or a- in 0..{MAX_ID}, got {item!r}")
        if not items:
            raise InputError(None, key, "at least one id (StarPU asserts one)")
    elif var == "STARPU_SCHED" and value not in SCHEDULERS:
        raise InputError(None, key, f"a StarPU 1.4.10 scheduling policy (e.g. dmdas, dmda, lws, eager, prio), "
                                    f"got {value!r} (StarPU would silently use its default)")


def check_env(env: dict[str, str], where: str = "--env") -> None:
    """Every StarPU variable of `env` as StarPU parses it; `where` prefixes the key named in errors."""
    for var, value in env.items():
        check_value(var, value, f"{where} {var}")
