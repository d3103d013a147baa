"""Reading per-task and per-transfer trace CSVs into one tidy form, whichever engine wrote them.

The tidy task table is numasim's `--trace` CSV (docs/interfaces.md §4): one row per task,
times in seconds from the run's start. Every consumer (the Paje export, `testbed
compare-traces`) reads traces through `read_tasks` / `read_transfers`, so a trace with other
column names is mapped here and nowhere else.

Every engine writes this table: numasim directly, the `real` and `starpu-simgrid` engines from
StarPU's FxT trace (testbed/traces/fxt_trace.py: worker names `<node>.CPU3` / `<node>.CUDA0_0`, StarPU's
own, under the node's name). `TASK_COLUMN_ALIASES` is where another tool's column names would go.
"""

from __future__ import annotations

import re
from pathlib import Path

from testbed.common.errors import InputError

#: columns a task trace must have (numasim's names): worker, start, end (s), task kind,
#: node (MPI rank) and NUMA node of the worker.
TASK_COLUMNS = ["ResourceId", "Start", "End", "Value", "Node", "WorkerNuma"]
# Columns read when present: Duration, JobId, WorkerMemNode, OperandNuma, Priority, Step,
# OperandPages, RemoteBytes.
#: other tools' column names -> numasim's (none needed today: see the module docstring)
TASK_COLUMN_ALIASES: dict[str, str] = {}

TRANSFER_COLUMNS = ["Start", "End", "Bytes", "Src", "Dst"]

#: numasim's runtime events (run description `events`, simulator/src/runtime_events.hpp)
EVENT_COLUMNS = ["Type", "Start", "End", "Rank", "Thread", "MemNode", "Value"]


def worker_type(resource: str) -> str:
    """`cuda` or `cpu` from a worker name: numasim names CUDA workers after their GPU host
    (`chifflet-1.gpu0`), StarPU/StarVZ names them `<node>_CUDA0_0`."""
    local = resource.split(".", 1)[-1]
    return "cuda" if local.startswith("gpu") or "CUDA" in resource else "cpu"


def node_name(resource: str) -> str:
    """The node part of a numasim worker name (`chifflet-1.cpu3` -> `chifflet-1`)."""
    return resource.split(".", 1)[0]


def worker_sort_key(resource: str) -> tuple:
    """Natural order (cpu2 before cpu10), so plots list workers as the machine numbers them."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", resource))


def _read_csv(path: Path, what: str):
    import pandas as pd

    from testbed.common.inputs import check_input_file

    check_input_file(path, what, "a CSV file")  # regular, bounded (a link to /dev/zero is refused)
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(path, what, f"a CSV file ({first})") from None


def _check_columns(df, path: Path, what: str, required: list[str]) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(path, what, f"columns {', '.join(required)} (missing {', '.join(missing)}); "
                                     "a trace written by `testbed simulate --engine numasim --trace`")


def _check_numbers(df, path: Path, what: str, columns: list[str]) -> None:
    import pandas as pd

    for col in columns:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna()  # empty cells and text alike
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise InputError(path, f"{what} line {i + 2} column {col}",  # 1-based, after the header
                             f"a number, got {df[col].iloc[i]!r}")
        df[col] = values


def read_tasks(path: str | Path):
    """The tidy task table of a trace CSV (pandas DataFrame) with `Duration` recomputed from
    Start/End and the derived columns `WorkerType` (cpu|cuda) and `NodeName`.
    Bad input -> InputError naming the file and what was expected."""
    path = Path(path)
    df = _read_csv(path, "task trace").rename(columns=TASK_COLUMN_ALIASES)
    _check_columns(df, path, "task trace", TASK_COLUMNS)
    if df.empty:
        raise InputError(path, "task trace", "at least one task row")
    _check_numbers(df, path, "task trace", ["Start", "End", "WorkerNuma"])
    backwards = (df["End"] < df["Start"]).to_numpy()
    if backwards.any():
        raise InputError(path, f"task trace line {int(backwards.argmax()) + 2}", "End >= Start")
    df["ResourceId"] = df["ResourceId"].astype(str)
    df["Value"] = df["Value"].astype(str)
    df["WorkerNuma"] = df["WorkerNuma"].astype(int)
    df["Duration"] = df["End"] - df["Start"]
    df["WorkerType"] = df["ResourceId"].map(worker_type)
    df["NodeName"] = df["ResourceId"].map(node_name)
    return df


def read_transfers(path: str | Path):
    """The per-transfer table (numasim's `--transfers` CSV)."""
    path = Path(path)
    df = _read_csv(path, "transfer trace")
    _check_columns(df, path, "transfer trace", TRANSFER_COLUMNS)
    _check_numbers(df, path, "transfer trace", ["Start", "End", "Bytes"])
    df["Src"] = df["Src"].astype(str)
    df["Dst"] = df["Dst"].astype(str)
    return df


def read_events(path: str | Path):
    """numasim's runtime-event table (`testbed simulate --events`): `Worker` rows (every worker
    of the run), the tasks' submissions, the scheduler's pushes and pops, the threads' states, the memory managers'
    allocations and frees and the GPU memories' bytes used (docs/interfaces.md §10)."""
    path = Path(path)
    df = _read_csv(path, "event trace")
    _check_columns(df, path, "event trace", EVENT_COLUMNS)
    _check_numbers(df, path, "event trace", ["Start", "End", "Rank", "Value"])
    if not (df["Type"] == "Worker").any():
        raise InputError(path, "event trace", "`Worker` rows (numasim's run description key `events`)")
    df["Rank"] = df["Rank"].astype(int)
    for col in ("Type", "Thread", "MemNode"):
        df[col] = df[col].fillna("").astype(str)
    return df
