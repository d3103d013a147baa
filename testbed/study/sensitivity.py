"""`testbed sensitivity`: how much a prediction depends on the machine parameters nobody measured.

The uncertain numbers of the machine, cluster and kernel-bundle descriptions carry an
uncertainty range (`range: [lo, hi]` or `spread`, with `range_reason`). A *parameter* of
the analysis moves one or more of those quantities together, at the same relative position
u in [0, 1] of their own ranges (value = lo + u (hi - lo)); e.g. every CUDA kernel time of
chifflet's bundle. A *sample* is one value of u per parameter: a perturbed copy of the
descriptions (written to a scratch directory), its platform, and a small fractional design
of the experiment's factors run once per configuration (fixed seeds, variability on). Its
*outputs* are the mean makespan of the design and the coefficient of every main effect and
two-factor alias group (the same coded-unit coefficients as `testbed analyze`'s estimates).

Stages (each batch of samples is one Snakemake job, written atomically, skipped when present):

1. Morris screening (SALib) of all parameters plus, as a noise reference, the run seeds
   (a pseudo-parameter that changes only the seeds: a parameter whose mean absolute
   elementary effect mu* is not above the seeds' is indistinguishable from run-to-run noise);
2. Sobol indices (SALib's Saltelli/Jansen estimators) of the few parameters with the highest
   signal-to-noise; the other parameters are drawn too (they are not fixed), so the Sobol
   base rows are a sample of the whole uncertainty, from which the bands are taken;
3. a summary (summary.json, summary.md) that `testbed report` turns into its section.

Files (results/sensitivity/<experiment>/): plan.json; {morris,sobol}/samples.csv,
batches/batch-NNN.csv, outputs.csv, indices.csv; morris/selected.json; summary.{json,md}.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from testbed import ROOT
from testbed.common.atomic import atomic_file, atomic_members, check_output_dir
from testbed.common.errors import InputError
from testbed.common.figures import save_figure
from testbed.common.outputs import Out, check_distinct
from testbed.common.yaml_input import load_yaml

log = logging.getLogger(__name__)

#: The pseudo-parameter of the Morris screening that changes only the run seeds.
SEEDS = "(run seeds)"
#: Name of the mean makespan of the design among the outputs.
MAKESPAN = "makespan"
STAGES = ("morris", "sobol")
SAMPLE_COLUMNS = ["sample", "batch", "kind", "block", "seed_set"]
RUN_COLUMNS = ["stage", "sample", "batch", "config", "seed", "makespan_s", "wall_s", "tasks"]
MARKER_COMMAND = "sensitivity"


# ------------------------------------------------------------------ parameters
@dataclass(frozen=True)
class Target:
    """One quantity moved by a parameter."""

    where: str  # "cluster", "<machine>" or "<machine>/kernels"
    file: str  # the YAML holding it (repository-relative when inside the repository)
    key: str  # e.g. "gpus[1].pcie_bandwidth_Bps"
    value: float
    lo: float
    hi: float
    reason: str

    def at(self, u: float) -> float:
        # clamped: lo + 1 * (hi - lo) can round one ulp above hi, which the range check refuses
        return min(self.hi, max(self.lo, self.lo + u * (self.hi - self.lo)))


@dataclass(frozen=True)
class Parameter:
    name: str
    label: str
    keys: tuple[str, ...]
    targets: tuple[Target, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "label": self.label, "keys": list(self.keys),
                "targets": [t.__dict__ for t in self.targets]}

    @staticmethod
    def from_json(d: dict) -> Parameter:
        return Parameter(d["name"], d["label"], tuple(d["keys"]), tuple(Target(**t) for t in d["targets"]))


_TOKEN = re.compile(r"([^.\[\]]+)|\[(\*|\d+)\]")


def key_tokens(pattern: str) -> list[str | int]:
    """`gpus[*].pcie_bandwidth_Bps` -> ['gpus', '[*]', 'pcie_bandwidth_Bps']; `[2]` -> 2."""
    tokens: list[str | int] = []
    pos = 0
    for m in _TOKEN.finditer(pattern):
        if m.start() != pos and pattern[pos:m.start()] != ".":
            raise ValueError(pattern)
        pos = m.end()
        if m.group(1) is not None:
            tokens.append(m.group(1))
        else:
            tokens.append("[*]" if m.group(2) == "*" else int(m.group(2)))
    if not tokens or pos != len(pattern):
        raise ValueError(pattern)
    return tokens


def _key_text(path: list[str | int]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def match_quantities(data: Any, tokens: list[str | int], path: list[str | int] | None = None
                     ) -> list[tuple[list[str | int], dict]]:
    """The quantities (`{value: ...}` mappings) the key pattern names; `*` matches every key
    of a mapping, `[*]` every item of a list. Branches that lead to no quantity are skipped."""
    path = path or []
    if not tokens:
        return [(path, data)] if isinstance(data, dict) and "value" in data else []
    head, rest = tokens[0], tokens[1:]
    out: list[tuple[list[str | int], dict]] = []
    if head == "*" and isinstance(data, dict):
        for k, v in data.items():
            out += match_quantities(v, rest, path + [k])
    elif head == "[*]" and isinstance(data, list):
        for i, v in enumerate(data):
            out += match_quantities(v, rest, path + [i])
    elif isinstance(head, int) and isinstance(data, list) and 0 <= head < len(data):
        out += match_quantities(data[head], rest, path + [head])
    elif isinstance(head, str) and head not in ("*", "[*]") and isinstance(data, dict) and head in data:
        out += match_quantities(data[head], rest, path + [head])
    return out


def _rel(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def place_data(cluster_ref: str, place: str, file: Path) -> Any:
    """A place's YAML as the cluster uses it: the cluster's own data (its base merged), a
    machine's with the cluster's variant applied (testbed/describe/machines.py machine_data)."""
    from testbed.describe.machines import load_cluster, machine_data

    cluster = load_cluster(cluster_ref)
    if place == "cluster":
        return {k: copy.deepcopy(v) for k, v in cluster.raw.items() if k not in ("base_file", "variant")}
    if place.endswith("/kernels"):
        return load_yaml(file)
    return machine_data(file, cluster.raw.get("variant", "first-principles"))


def description_files(cluster_ref: str) -> dict[str, Path]:
    """Place name -> YAML file: `cluster`, each machine type, and `<machine>/kernels`."""
    from testbed.describe.machines import load_cluster

    cluster = load_cluster(cluster_ref)
    files = {"cluster": cluster.path}
    for name, machine in cluster.machines.items():
        files[name] = machine.path
        if machine.kernels is not None:
            files[f"{name}/kernels"] = machine.kernels / "kernels.yaml"
    return files


def resolve_parameters(cluster_ref: str, specs: list[dict], where: str = "config") -> list[Parameter]:
    """The parameters of the configuration, each with the quantities it moves and their ranges.

    A key is `PLACE:PATTERN`, PLACE one of `cluster`, a machine type of the cluster, or
    `<machine>/kernels` (its calibration bundle's kernels.yaml)."""
    from testbed.describe.machines import check_range, quantity_range

    files = description_files(cluster_ref)
    data: dict[str, Any] = {}
    params: list[Parameter] = []
    names: set[str] = set()
    for i, spec in enumerate(specs):
        name = spec["name"]
        if name in names or name == SEEDS:
            raise InputError(where, f"sensitivity.parameters[{i}].name", f"a unique parameter name, {name!r} is taken")
        names.add(name)
        targets: list[Target] = []
        for j, key in enumerate(spec["keys"]):
            at = f"sensitivity.parameters[{i}].keys[{j}]"
            place, sep, pattern = key.partition(":")
            if not sep or place not in files:
                raise InputError(where, at, f"PLACE:KEY with PLACE among {', '.join(files)}, got {key!r}")
            try:
                tokens = key_tokens(pattern)
            except ValueError:
                raise InputError(where, at, f"a key path like gpus[*].pcie_bandwidth_Bps, got {pattern!r}") from None
            file = files[place]
            if place not in data:
                data[place] = place_data(cluster_ref, place, file)
            found = match_quantities(data[place], tokens)
            if not found:
                raise InputError(where, at, f"a key naming quantities of {_rel(file)}, {pattern!r} names none")
            for path, q in found:
                text = _key_text(path)
                check_range(file, text, q)
                bounds = quantity_range(q)
                if bounds is None:
                    raise InputError(file, text, f"an uncertainty range (`range: [lo, hi]` or `spread`, with "
                                                 f"`range_reason`) for sensitivity parameter {name!r}")
                if any(t.file == _rel(file) and t.key == text for t in [*targets, *(x for p in params for x in p.targets)]):
                    raise InputError(where, at, f"each quantity in one parameter only; {text} of {_rel(file)} is taken")
                targets.append(Target(place, _rel(file), text, float(q["value"]), bounds[0], bounds[1],
                                      str(q["range_reason"])))
        params.append(Parameter(name, spec.get("label") or name, tuple(spec["keys"]), tuple(targets)))
    return params


# ------------------------------------------------------------------ plan
def sample_experiment(exp: dict, generators: list[str]) -> dict:
    """The experiment as run for each sample: one repetition of a fractional (or the
    experiment's own design when `generators` is empty), in standard order."""
    design = {"type": "fractional", "generators": list(generators)} if generators else exp.get("design", {})
    return {**exp, "design": design, "repetitions": 1, "batches": 1, "randomize": False}


def design_outputs(exp: dict, where: str = "config") -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(factors, outputs, aliases) of the per-sample design: outputs are the mean makespan, the
    main effects and the two-factor terms that carry an alias group (named by its first term)."""
    from testbed.analyze.analyze import estimable_terms
    from testbed.study.design import design_table

    table = design_table(exp, where)
    factors = [f for f in sorted(exp["factors"]) if table[f].nunique() == 2]
    terms, aliases = estimable_terms(table, factors)
    groups: dict[str, list[str]] = {t: [] for t in terms}
    for term, carrier in aliases.items():
        if carrier in groups:
            groups[carrier].append(term)
    outputs = [MAKESPAN] + [t for t in terms if t.count(":") <= 1]
    return factors, outputs, {t: groups[t] for t in outputs[1:] if groups[t]}


def make_plan(exp: dict, sens: dict, where: str = "config") -> dict:
    """Everything the later steps need, resolved once (parameters with their ranges)."""
    name = exp["name"]
    if exp["engine"] == "real":
        raise InputError(where, f"experiments.{name}.engine", "a simulation engine (the parameters perturb descriptions)")
    params = resolve_parameters(exp["cluster"], sens["parameters"], where)
    if not params:
        raise InputError(where, "sensitivity.parameters", "at least one parameter")
    sexp = sample_experiment(exp, sens["design"]["generators"])
    factors, outputs, aliases = design_outputs(sexp, where)
    if not factors:
        raise InputError(where, f"experiments.{name}.factors", "at least one factor taking two levels")
    morris, sobol = sens["morris"], sens["sobol"]
    if sobol["base_samples"] & (sobol["base_samples"] - 1):
        raise InputError(where, "sensitivity.sobol.base_samples", f"a power of 2, got {sobol['base_samples']}")
    lo, hi = sens["band"]
    if not 0 <= lo < hi <= 1:
        raise InputError(where, "sensitivity.band", f"two quantiles 0 <= lo < hi <= 1, got {sens['band']}")
    from testbed.study.design import configurations

    runs = len(configurations(sexp["factors"], sexp.get("design", {}), where))
    return {
        "experiment": exp,
        "sample_experiment": sexp,
        "parameters": [p.to_json() for p in params],
        "factors": factors,
        "outputs": outputs,
        "aliases": aliases,
        "runs_per_sample": runs,
        "morris": dict(morris),
        "sobol": dict(sobol),
        "band": [float(lo), float(hi)],
        "seed": int(sens["seed"]),
        "mapping": str(sens.get("mapping", "nominal")),
    }


def plan_parameters(plan: dict) -> list[Parameter]:
    return [Parameter.from_json(p) for p in plan["parameters"]]


def read_plan(path: str | Path) -> dict:
    path = Path(path)
    try:
        plan = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(path, None, "a plan written by `testbed sensitivity plan`") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, None, f"JSON ({exc})") from None
    for key in ("experiment", "parameters", "outputs", "morris", "sobol"):
        if key not in plan:
            raise InputError(path, key, "a plan written by `testbed sensitivity plan`")
    return plan


# ------------------------------------------------------------------ samples
def _batches(count: int, batches: int) -> list[int]:
    return [i * batches // count for i in range(count)] if count else []


def morris_samples(plan: dict) -> pd.DataFrame:
    """The nominal sample (the descriptions as written), then SALib's Morris trajectories in
    u-space; with `noise_reference`, the run seeds are one more (pseudo-)parameter."""
    from SALib.sample import morris as morris_sample

    names = [p["name"] for p in plan["parameters"]]
    cfg = plan["morris"]
    columns = names + ([SEEDS] if cfg["noise_reference"] else [])
    problem = {"num_vars": len(columns), "names": columns, "bounds": [[0.0, 1.0]] * len(columns)}
    x = morris_sample.sample(problem, cfg["trajectories"], num_levels=cfg["levels"], seed=plan["seed"])
    rows = [{"kind": "nominal", "block": -1, "seed_set": 0, **{n: math.nan for n in names}}]
    for i, u in enumerate(x):
        values = dict(zip(columns, (float(v) for v in u), strict=False))
        seed_set = int(round(values.pop(SEEDS) * (cfg["levels"] - 1))) if cfg["noise_reference"] else 0
        rows.append({"kind": "morris", "block": i // (len(columns) + 1), "seed_set": seed_set, **values})
    table = pd.DataFrame(rows)
    table.insert(0, "sample", range(len(table)))
    table.insert(1, "batch", _batches(len(table), cfg["batches"]))
    return table[SAMPLE_COLUMNS + names]


def sobol_samples(plan: dict, selected: list[str]) -> pd.DataFrame:
    """SALib's Saltelli rows over all parameters, keeping per base row j: A_j, the A_j with
    the selected parameters taken from B_j one at a time (AB_j), and B_j."""
    from SALib.sample import sobol as sobol_sample

    names = [p["name"] for p in plan["parameters"]]
    unknown = [s for s in selected if s not in names]
    if unknown:
        raise InputError("selected", "selected", f"parameters of the plan, not {unknown}")
    k, n = len(names), plan["sobol"]["base_samples"]
    problem = {"num_vars": k, "names": names, "bounds": [[0.0, 1.0]] * k}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = sobol_sample.sample(problem, n, calc_second_order=False, scramble=True, seed=plan["seed"])
    rows = []
    for j in range(n):
        block = x[j * (k + 2):(j + 1) * (k + 2)]
        rows.append({"kind": "A", "block": j, **dict(zip(names, block[0], strict=False))})
        for s in selected:
            rows.append({"kind": f"AB:{s}", "block": j, **dict(zip(names, block[1 + names.index(s)], strict=False))})
        rows.append({"kind": "B", "block": j, **dict(zip(names, block[k + 1], strict=False))})
    table = pd.DataFrame(rows)
    table.insert(0, "sample", range(len(table)))
    table.insert(1, "batch", _batches(len(table), plan["sobol"]["batches"]))
    table.insert(4, "seed_set", 0)
    return table[SAMPLE_COLUMNS + names]


def read_samples(path: str | Path, plan: dict) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "a sample table written by `testbed sensitivity sample`")
    table = pd.read_csv(path)
    missing = [c for c in SAMPLE_COLUMNS + [p["name"] for p in plan["parameters"]] if c not in table.columns]
    if missing:
        raise InputError(path, "header", f"columns {', '.join(missing)}")
    return table


# ------------------------------------------------------------------ perturbed descriptions
def _set(data: Any, path: list[str | int], value: float) -> None:
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]]["value"] = value


def write_descriptions(plan: dict, u: dict[str, float], out: Path) -> Path:
    """The experiment's cluster, machine and kernel-bundle YAMLs with each parameter at its
    position `u` (a missing or NaN position keeps the written value), under `out`; returns
    the cluster file (its machines are `machines/<name>.yaml`, bundles `kernels/<name>/`)."""
    files = description_files(plan["experiment"]["cluster"])
    # the variant's values written in place: the descriptions below are first-principles ones
    data = {place: place_data(plan["experiment"]["cluster"], place, f) for place, f in files.items()}
    for p in plan_parameters(plan):
        pos = u.get(p.name, math.nan)
        if pos is None or math.isnan(pos):
            continue
        for t in p.targets:
            _set(data[t.where], key_tokens(t.key), t.at(float(pos)))
    out.mkdir(parents=True, exist_ok=True)
    (out / "machines").mkdir(exist_ok=True)
    machines = [place for place in files if place not in ("cluster",) and not place.endswith("/kernels")]
    for m in machines:
        if f"{m}/kernels" in data:
            bundle = out / "kernels" / m
            bundle.mkdir(parents=True, exist_ok=True)
            (bundle / "kernels.yaml").write_text(yaml.safe_dump(data[f"{m}/kernels"], sort_keys=False))
            data[m]["kernels"] = str(bundle.resolve())
        (out / "machines" / f"{m}.yaml").write_text(yaml.safe_dump(data[m], sort_keys=False))
    cluster = copy.deepcopy(data["cluster"])
    for group in cluster["nodes"]:
        ref = _machine_file(files["cluster"], group["machine"]).resolve()
        group["machine"] = "machines/" + next(f"{m}.yaml" for m in machines if Path(files[m]).resolve() == ref)
    path = out / f"{cluster['name']}.yaml"
    path.write_text(yaml.safe_dump(cluster, sort_keys=False))
    return path


def _machine_file(cluster_file: Path, ref: str) -> Path:
    from testbed.describe.machines import MACHINES, _resolve

    return _resolve(ref, MACHINES, cluster_file.parent)


# ------------------------------------------------------------------ running samples
def sample_design(plan: dict) -> pd.DataFrame:
    """The runs of one sample (standard order); `run` is the configuration index."""
    from testbed.study.design import design_table

    return design_table(plan["sample_experiment"], "plan").sort_values("run").reset_index(drop=True)


def _run_spec(plan: dict, row: dict, cluster_file: Path, platform: Path, work: Path, seed_set: int,
              distribution: dict, envs: dict[str, tuple[dict, dict]]):
    """The RunSpec of one configuration of the design on the descriptions of `cluster_file`."""
    from testbed.run.engines import RunSpec
    from testbed.study.design import run_seed

    exp = plan["sample_experiment"]
    env, per_machine = envs[row["config"]]
    return RunSpec(engine=exp["engine"], cluster=str(cluster_file), n=int(row["n"]), b=int(row["b"]), env=env,
                   env_per_machine=per_machine, factors={f: int(row[f]) for f in sorted(exp["factors"])},
                   seed=run_seed(int(exp.get("seed", 1)), int(row["run"]), 1 + seed_set),
                   distribution=distribution, variability=bool(exp.get("variability", True)),
                   mpi_backend=str(exp.get("mpi_backend", "nmad")), platform_dir=platform, workdir=work)


def _descriptions_and_platform(plan: dict, u: dict[str, float], work: Path) -> tuple[Path, Path]:
    from testbed.describe.machines import load_cluster
    from testbed.platform.platform_cmd import generate
    from testbed.starpu.sampling import DEFAULT_TILE_SIZES

    cluster_file = write_descriptions(plan, u, work / "descriptions")
    platform = work / "platform"
    b = int(plan["sample_experiment"]["workload"]["b"])
    generate(load_cluster(cluster_file), platform, tuple(sorted({*DEFAULT_TILE_SIZES, b})))
    return cluster_file, platform


def speed_balanced(exp: dict) -> bool:
    """Whether the experiment runs numasim's speed-balanced mapping, computed from the descriptions."""
    return exp["engine"] == "numasim" and dict(exp["workload"].get("distribution", {})).get("kind") == "heterogeneous"


def fixed_mapping(plan: dict, design: pd.DataFrame, scratch: Path, envs: dict[str, tuple[dict, dict]]) -> dict | None:
    """The tile mapping every sample runs with when `sensitivity.mapping` is `nominal` and the
    experiment's mapping is numasim's speed-balanced one: that mapping computed once from the
    nominal descriptions and written under `scratch`. None: each sample uses its own.

    Why: the heterogeneous mapping is a discrete function of the node speeds (its pattern of
    slots changes at thresholds), so recomputing it per sample adds a change of the experiment's
    design to the parameters' effects; the study ran one mapping, whatever the machines' true
    parameters were."""
    exp = plan["sample_experiment"]
    if plan.get("mapping", "nominal") != "nominal" or not speed_balanced(exp):
        return None
    distribution = dict(exp["workload"]["distribution"])
    from testbed.run.engines.numasim import heterogeneous_distribution

    work = scratch / "nominal-mapping"
    cluster_file, platform = _descriptions_and_platform(plan, {}, work)
    spec = _run_spec(plan, design.iloc[0].to_dict(), cluster_file, platform, work, 0, distribution, envs)
    return heterogeneous_distribution(spec, platform, work)


def run_sample(plan: dict, sample: dict, design: pd.DataFrame, scratch: Path,
               envs: dict[str, tuple[dict, dict]], mapping: dict | None = None) -> list[dict]:
    """Every run of the design on the sample's perturbed descriptions; `mapping`: a fixed tile
    mapping (fixed_mapping), else the experiment's, computed on the sample's descriptions."""
    from testbed.run.simulate import simulate

    names = [p["name"] for p in plan["parameters"]]
    exp = plan["sample_experiment"]
    work = Path(tempfile.mkdtemp(prefix=f"sample-{int(sample['sample'])}-", dir=scratch))
    cluster_file, platform = _descriptions_and_platform(plan, {n: float(sample[n]) for n in names}, work)
    factors = plan["factors"]
    distribution = dict(mapping or exp["workload"].get("distribution", {"kind": "block-cyclic"}))
    rows = []
    for row in design.to_dict("records"):
        spec = _run_spec(plan, row, cluster_file, platform, work, int(sample["seed_set"]), distribution, envs)
        if spec.engine == "numasim" and distribution.get("kind") == "heterogeneous":
            # the sample's speed-balanced distribution, written once (it depends on the platform, n, b)
            from testbed.run.engines.numasim import heterogeneous_distribution

            distribution = spec.distribution = heterogeneous_distribution(spec, platform, work)
        result = simulate(spec)
        rows.append({"sample": int(sample["sample"]), "config": row["config"], "seed": spec.seed,
                     **{f: int(row[f]) for f in factors}, "makespan_s": float(result["makespan_s"]),
                     "wall_s": float(result["wall_s"]), "tasks": int(result.get("tasks", 0))})
    ms = np.mean([r["makespan_s"] for r in rows])
    log.info(f"  sample {int(sample['sample'])} ({sample['kind']}): {len(rows)} runs, mean makespan {ms:.3f} s")

    shutil.rmtree(work, ignore_errors=True)
    return rows


def config_envs(plan: dict, design: pd.DataFrame) -> dict[str, tuple[dict, dict]]:
    """StarPU variables of each configuration (the topology is not perturbed: computed once)."""
    from testbed.describe.machines import load_cluster
    from testbed.run.campaign import spec_for

    exp = plan["sample_experiment"]
    cluster = load_cluster(exp["cluster"])  # once: reading and validating the YAMLs is slow
    out = {}
    for row in design.to_dict("records"):
        spec = spec_for(row, sorted(exp["factors"]), None, Path("."), cluster)
        out[row["config"]] = (spec.env, spec.env_per_machine)
    return out


def run_batch(plan: dict, stage: str, samples: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The runs of every sample of one batch (a batch without samples gives an empty table)."""
    chosen = samples[samples["batch"] == batch].to_dict("records")
    design = sample_design(plan)
    envs = config_envs(plan, design) if chosen else {}
    rows: list[dict] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="testbed-sensitivity-") as scratch:
        mapping = fixed_mapping(plan, design, Path(scratch), envs) if chosen else None
        for i, sample in enumerate(chosen, 1):
            for r in run_sample(plan, sample, design, Path(scratch), envs, mapping):
                rows.append({"stage": stage, "batch": batch, **r})
            elapsed = time.perf_counter() - t0
            log.info(f"[{plan['experiment']['name']} {stage} batch {batch}] {i}/{len(chosen)} samples, "
                     f"{elapsed:.0f} s, eta {elapsed / i * (len(chosen) - i):.0f} s")
    return pd.DataFrame(rows, columns=RUN_COLUMNS + plan["factors"])[RUN_COLUMNS + plan["factors"]]


def read_runs(paths: list[str | Path], plan: dict, samples: pd.DataFrame) -> pd.DataFrame:
    """The batch tables of a stage; every sample must have all its runs."""
    tables = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise InputError(p, None, "a batch table written by `testbed sensitivity batch`")
        t = pd.read_csv(p)
        missing = [c for c in RUN_COLUMNS + plan["factors"] if c not in t.columns]
        if missing:
            raise InputError(p, "header", f"columns {', '.join(missing)}")
        tables.append(t)
    runs = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=RUN_COLUMNS + plan["factors"])
    counts = runs.groupby("sample").size()
    short = [int(s) for s in samples["sample"] if counts.get(s, 0) != plan["runs_per_sample"]]
    if short:
        raise InputError(paths[0] if paths else "batches", "sample",
                         f"{plan['runs_per_sample']} runs for every sample; samples {short[:5]} have not "
                         f"(a batch of another plan or missing?)")
    return runs


# ------------------------------------------------------------------ outputs of a sample
def design_outputs_of(runs: pd.DataFrame, factors: list[str], outputs: list[str]) -> dict[str, float]:
    """Mean makespan and the OLS coefficients of the output terms on one sample's runs."""
    from testbed.analyze.analyze import estimable_terms, term_column

    terms, _ = estimable_terms(runs, factors)
    x = np.column_stack([np.ones(len(runs))] + [term_column(runs, t) for t in terms])
    coef, *_ = np.linalg.lstsq(x, runs["makespan_s"].to_numpy(dtype=float), rcond=None)
    by_term = dict(zip(terms, coef[1:], strict=False))
    out = {MAKESPAN: float(runs["makespan_s"].mean())}
    for o in outputs[1:]:
        out[o] = float(by_term.get(o, math.nan))
    return out


def outputs_table(plan: dict, samples: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for sample, group in runs.groupby("sample", sort=True):
        rows.append({"sample": int(sample), **design_outputs_of(group, plan["factors"], plan["outputs"])})
    out = pd.DataFrame(rows, columns=["sample"] + plan["outputs"])
    return samples.merge(out, on="sample", how="left")


# ------------------------------------------------------------------ analyses
def morris_indices(plan: dict, table: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Morris mu, mu*, sigma per output and parameter (mu* in output units per full range), and
    the run-to-run noise sd of each output measured on the seed steps of the trajectories."""
    from SALib.analyze import morris as morris_analyze

    names = [p["name"] for p in plan["parameters"]]
    cfg = plan["morris"]
    morris = table[table["kind"] == "morris"].sort_values("sample")
    columns = names + ([SEEDS] if cfg["noise_reference"] else [])
    x = morris[names].to_numpy(dtype=float)
    if cfg["noise_reference"]:
        x = np.column_stack([x, morris["seed_set"].to_numpy(dtype=float) / (cfg["levels"] - 1)])
    problem = {"num_vars": len(columns), "names": columns, "bounds": [[0.0, 1.0]] * len(columns)}
    rows, noise = [], {}
    for o in plan["outputs"]:
        y = morris[o].to_numpy(dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = morris_analyze.analyze(problem, x, y, num_levels=cfg["levels"], seed=plan["seed"])
        seed_mu = float(res["mu_star"][-1]) if cfg["noise_reference"] else math.nan
        for i, name in enumerate(columns):
            mu_star = float(res["mu_star"][i])
            rows.append({"output": o, "parameter": name, "mu": float(res["mu"][i]), "mu_star": mu_star,
                         "sigma": float(res["sigma"][i]), "mu_star_conf": float(res["mu_star_conf"][i]),
                         "snr": mu_star / seed_mu if seed_mu > 0 else math.nan})
        noise[o] = seed_noise_sd(x, y, cfg["noise_reference"])
    return pd.DataFrame(rows), noise


def seed_noise_sd(x: np.ndarray, y: np.ndarray, has_seeds: bool) -> float:
    """sd of one output between seed sets at equal parameters: the steps of the trajectories
    that change only the seeds (last column) give differences of two noise draws."""
    if not has_seeds:
        return math.nan
    diffs = []
    for i in range(1, len(x)):
        step = np.abs(x[i] - x[i - 1]) > 1e-12
        if step[-1] and not step[:-1].any():
            diffs.append(y[i] - y[i - 1])
    return float(math.sqrt(np.mean(np.square(diffs)) / 2)) if diffs else math.nan


def select_parameters(plan: dict, indices: pd.DataFrame) -> dict:
    """The parameters for the Sobol stage: ranked by their best signal-to-noise over the outputs
    (mu* over the seeds' mu*; without the seed reference, mu* over the output's largest mu*),
    those at least `min_signal_to_noise`, at most `max_parameters`."""
    cfg = plan["sobol"]
    real = indices[indices["parameter"] != SEEDS].copy()
    if plan["morris"]["noise_reference"]:
        real["score"] = real["snr"].fillna(0.0)
        threshold = float(cfg["min_signal_to_noise"])
        rule = (f"best mu*/mu*(run seeds) over the outputs >= {threshold:g}, "
                f"highest first, at most {cfg['max_parameters']}")
    else:
        top = real.groupby("output")["mu_star"].transform("max")
        real["score"] = np.where(top > 0, real["mu_star"] / top, 0.0)
        threshold = 0.0
        rule = f"best mu*/max mu* over the outputs, highest first, at most {cfg['max_parameters']} (no noise reference)"
    best = real.loc[real.groupby("parameter")["score"].idxmax()]
    best = best.sort_values(["score", "mu_star"], ascending=False)
    scores = {r.parameter: {"score": float(r.score), "output": r.output} for r in best.itertuples()}
    chosen = [p for p, s in scores.items() if s["score"] >= threshold and s["score"] > 0]
    return {"selected": chosen[: int(cfg["max_parameters"])], "scores": scores, "rule": rule}


def sobol_indices(plan: dict, table: pd.DataFrame, selected: list[str]) -> pd.DataFrame:
    """First-order and total Sobol indices of the selected parameters, per output."""
    from SALib.analyze import sobol as sobol_analyze

    rows = []
    if not selected:
        return pd.DataFrame(rows, columns=["output", "parameter", "S1", "S1_conf", "ST", "ST_conf"])
    kinds = ["A"] + [f"AB:{s}" for s in selected] + ["B"]
    order = {k: i for i, k in enumerate(kinds)}
    t = table[table["kind"].isin(kinds)].copy()
    t["pos"] = t["kind"].map(order)
    t = t.sort_values(["block", "pos"])
    problem = {"num_vars": len(selected), "names": list(selected), "bounds": [[0.0, 1.0]] * len(selected)}
    for o in plan["outputs"]:
        y = t[o].to_numpy(dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if np.ptp(y) <= np.finfo(float).eps * max(1.0, abs(float(np.mean(y)))):
                res = {k: np.zeros(len(selected)) for k in ("S1", "S1_conf", "ST", "ST_conf")}
            else:
                res = sobol_analyze.analyze(problem, y, calc_second_order=False, num_resamples=200,
                                            conf_level=0.95, seed=plan["seed"])
        for i, s in enumerate(selected):
            rows.append({"output": o, "parameter": s, **{k: float(res[k][i]) for k in ("S1", "S1_conf", "ST", "ST_conf")}})
    return pd.DataFrame(rows)


def bands(plan: dict, sobol: pd.DataFrame, noise: dict[str, float]) -> dict[str, dict]:
    """Per output, over the Sobol base rows (A and B: every parameter drawn over its range):
    quantile band, mean, sd, share of positive values, and the share of the variance that the
    run-to-run noise alone would give."""
    lo_q, hi_q = plan["band"]
    base = sobol[sobol["kind"].isin(["A", "B"])]
    out = {}
    for o in plan["outputs"]:
        y = base[o].to_numpy(dtype=float)
        sd = float(np.std(y, ddof=1)) if len(y) > 1 else math.nan
        nsd = noise.get(o, math.nan)
        out[o] = {"band": [float(np.quantile(y, lo_q)), float(np.quantile(y, hi_q))], "mean": float(np.mean(y)),
                  "sd": sd, "min": float(np.min(y)), "max": float(np.max(y)),
                  "positive_share": float(np.mean(y > 0)), "samples": int(len(y)), "noise_sd": nsd,
                  "noise_share": min(1.0, nsd**2 / sd**2) if sd and sd > 0 and not math.isnan(nsd) else math.nan}
    return out


# ------------------------------------------------------------------ summary
def parameter_machine(p: dict) -> str:
    places = sorted({t["where"].split("/")[0] for t in p["targets"]})
    return " and ".join("the cluster network" if w == "cluster" else w for w in places)


def summarize(plan: dict, morris_out: pd.DataFrame, morris_idx: pd.DataFrame, noise: dict[str, float],
              selected: dict, sobol_out: pd.DataFrame, sobol_idx: pd.DataFrame) -> dict:
    """What the report needs: the parameters and ranges, and per output its nominal value, band
    and the parameters ranked by influence (Sobol total index, then Morris mu*)."""
    nominal = morris_out[morris_out["kind"] == "nominal"].iloc[0]
    band = bands(plan, sobol_out, noise)
    outputs = {}
    for o in plan["outputs"]:
        ranking = []
        m = morris_idx[morris_idx["output"] == o].set_index("parameter")
        s = sobol_idx[sobol_idx["output"] == o].set_index("parameter") if len(sobol_idx) else None
        for p in plan["parameters"]:
            name = p["name"]
            entry = {"parameter": name, "mu_star": float(m.loc[name, "mu_star"]),
                     "mu_star_conf": float(m.loc[name, "mu_star_conf"]), "snr": float(m.loc[name, "snr"])}
            if s is not None and name in s.index:
                entry.update({k: float(s.loc[name, k]) for k in ("S1", "S1_conf", "ST", "ST_conf")})
            ranking.append(entry)
        ranking.sort(key=lambda e: (-(e.get("ST", -1.0)), -e["mu_star"]))
        outputs[o] = {"nominal": float(nominal[o]),
                      "aliases": [x for x in plan["aliases"].get(o, []) if x.count(":") == 1], **band[o],
                      "seed_mu_star": float(m.loc[SEEDS, "mu_star"]) if SEEDS in m.index else math.nan,
                      "ranking": ranking}
    exp = plan["experiment"]
    return {
        "experiment": exp["name"], "cluster": exp["cluster"], "engine": exp["engine"],
        "workload": exp["workload"], "factors": plan["factors"],
        "design": {"generators": plan["sample_experiment"]["design"].get("generators", []),
                   "runs_per_sample": plan["runs_per_sample"], "seed": exp.get("seed", 1),
                   "variability": exp.get("variability", True),
                   # which speed-balanced mapping the samples ran (None: the experiment's map is fixed anyway)
                   "mapping": plan.get("mapping", "nominal") if speed_balanced(exp) else None},
        "parameters": [{"name": p["name"], "label": p["label"], "machine": parameter_machine(p), "keys": p["keys"],
                        "targets": p["targets"]} for p in plan["parameters"]],
        "morris": {**plan["morris"], "samples": int((morris_out["kind"] == "morris").sum())},
        "sobol": {**plan["sobol"], "selected": selected["selected"], "rule": selected["rule"],
                  "samples": int(len(sobol_out))},
        "band": plan["band"],
        "runs": int(plan["runs_per_sample"] * (len(morris_out) + len(sobol_out))),
        "outputs": outputs,
    }


def fmt(x: float, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}g}"


def influential(r: dict, min_snr: float = 2.0) -> bool:
    """A parameter matters for an output when its Morris mu* is above the run seeds' (by
    `min_snr`; without a seed reference, mu* > 0) and, where Sobol indices were computed, its
    total index is at least 0.1."""
    above = r["mu_star"] > 0 if math.isnan(r["snr"]) else r["snr"] >= min_snr
    return above and ("ST" not in r or r["ST"] >= 0.1)


def top_parameters(entry: dict, count: int = 2, min_snr: float = 2.0) -> list[dict]:
    """The parameters that matter for one output, most influential first."""
    return [r for r in entry["ranking"] if influential(r, min_snr)][:count]


def influence_text(r: dict) -> str:
    if "ST" in r:
        return f"S_T = {fmt(r['ST'], 2)} ± {fmt(r['ST_conf'], 1)}"
    return f"Morris mu* = {fmt(r['mu_star'])} s, {fmt(r['snr'], 2)}× the seeds'"


def term_rows(summary: dict, anova: pd.DataFrame | None, interactions: int = 3) -> list[dict]:
    """The makespan, the main effects and the key interactions: the two-factor alias groups of
    the prominent, then largest, full-factorial interactions (without an ANOVA: of the largest
    nominal estimates). Each row has the full-factorial estimate and CI when given."""
    outs = summary["outputs"]
    group_of = {}
    for o, e in outs.items():
        for term in [o] + e["aliases"]:
            group_of[term] = o
    mains = [f for f in summary["factors"] if f in outs]
    twos = [o for o in outs if o.count(":") == 1]
    if anova is not None and len(anova):
        a = anova[anova["order"] == 2].assign(size=lambda d: d["estimate"].abs())
        ranked = list(a[a["prominent"]]["term"]) + list(a.sort_values("size", ascending=False)["term"])
    else:
        ranked = sorted(twos, key=lambda o: -abs(outs[o]["nominal"]))
    keys: list[str] = []
    for term in ranked:
        g = group_of.get(term)
        if g and g not in keys and len(keys) < interactions:
            keys.append(g)
    full = anova.set_index("term") if anova is not None and len(anova) else None
    rows = []
    for o in [MAKESPAN] + mains + keys:
        row = {"output": o, "entry": outs[o], "estimate": math.nan, "ci": (math.nan, math.nan)}
        if full is not None and o in full.index:
            row["estimate"] = float(full.loc[o, "estimate"])
            row["ci"] = (float(full.loc[o, "ci_low"]), float(full.loc[o, "ci_high"]))
        rows.append(row)
    return rows


def term_label(o: str, e: dict) -> str:
    return o + (f" (= {' = '.join(e['aliases'])})" if e["aliases"] else "")


def advice(summary: dict, rows: list[dict]) -> list[str]:
    """Sentences: which predictions hold over the parameter ranges, and what to calibrate first."""
    labels = {p["name"]: p for p in summary["parameters"]}
    min_snr = float(summary["sobol"].get("min_signal_to_noise", 2.0))

    def who(tops: list[dict]) -> str:
        return " and ".join(f"`{r['parameter']}` of {labels[r['parameter']]['machine']} ({influence_text(r)})"
                            for r in tops)

    lines = []
    for row in rows:
        o, e = row["output"], row["entry"]
        lo, hi = e["band"]
        tops = top_parameters(e, 2, min_snr)
        noise = e["noise_share"]
        noisy = not math.isnan(noise) and noise >= 0.5
        if o == MAKESPAN:
            lines.append(f"Mean makespan of the design: {fmt(lo, 4)} to {fmt(hi, 4)} s over the parameter ranges "
                         f"(nominal {fmt(e['nominal'], 4)} s); "
                         + (f"it depends most on {who(tops)}." if tops else "no parameter stands out."))
            continue
        ci_lo, ci_hi = row["ci"]
        ci_zero = not math.isnan(ci_lo) and ci_lo <= 0 <= ci_hi
        name = term_label(o, e)
        share = fmt(100 * e["positive_share"], 3)
        if lo > 0 or hi < 0:
            sign = "positive (slower at +1)" if lo > 0 else "negative (faster at +1)"
            text = f"{name}: {sign} over all the parameter ranges ({fmt(lo)} to {fmt(hi)} s)"
            text += f"; its size depends most on {who(tops)}." if tops else "; no parameter stands out."
            if ci_zero:
                text += " Its run-to-run CI (full factorial) still includes 0."
        elif tops and not noisy:
            first = tops[0]
            text = (f"{name}: its sign changes over the ranges ({share} % of the samples positive): calibrate "
                    f"`{first['parameter']}` of {labels[first['parameter']]['machine']} ({influence_text(first)}) "
                    f"before trusting the sign of {o}.")
        elif noisy or not tops:
            text = (f"{name}: its sign changes over the samples ({share} % positive) at the level of run-to-run "
                    f"noise (noise share {fmt(noise, 2)}); no parameter moves it beyond that: more repetitions, "
                    f"not calibration, would settle it" + (", and its run-to-run CI includes 0." if ci_zero else "."))
        lines.append(text)
    # What to calibrate first: the parameters that decide a sign, then the others by influence.
    votes: dict[str, float] = {}
    deciding: set[str] = set()
    for row in rows:
        e = row["entry"]
        unsettled = row["output"] != MAKESPAN and e["band"][0] <= 0 <= e["band"][1] and not (
            not math.isnan(e["noise_share"]) and e["noise_share"] >= 0.5)
        for rank, r in enumerate(top_parameters(e, 3, min_snr)):
            votes[r["parameter"]] = votes.get(r["parameter"], 0.0) + max(r.get("ST", 0.1), 0.1) / (rank + 1)
            if unsettled and rank == 0:
                deciding.add(r["parameter"])
    if votes:
        order = sorted(votes, key=lambda p: (p not in deciding, -votes[p]))
        lines.append("Calibrate first: " + "; then ".join(
            f"`{p}` ({labels[p]['label']})" for p in order[:3]) + ".")
    else:
        lines.append("No parameter moves these predictions beyond run-to-run noise over its range.")
    return lines


MAPPING_TEXT = {
    "nominal": "; the speed-balanced tile mapping computed once from the unperturbed descriptions",
    "per-sample": "; the speed-balanced tile mapping recomputed from each sample's kernel rates "
                  "(docs/tile-mapping.md: it changes pattern at thresholds of the node speeds)",
}


def summary_blocks(summary: dict, anova: pd.DataFrame | None = None) -> list[str | list[str] | pd.DataFrame]:
    """The sensitivity part of the report: paragraphs (str), bullet lists and tables."""
    w, d = summary["workload"], summary["design"]
    rows = term_rows(summary, anova)
    min_snr = float(summary["sobol"].get("min_signal_to_noise", 2.0))
    nbase = next(iter(summary["outputs"].values()))["samples"]
    head = (f"How much the predictions of {summary['experiment']} ({summary['engine']} on `{summary['cluster']}`, "
            f"N = {w['n']}, b = {w['b']}) depend on the machine parameters nobody measured. Each parameter sample "
            f"perturbs the descriptions within their `range` and runs a {d['runs_per_sample']}-run design "
            f"({'fractional ' + ', '.join(d['generators']) if d['generators'] else 'the experiment design'}; one run "
            f"per configuration, fixed seeds, variability {'on' if d['variability'] else 'off'}"
            f"{MAPPING_TEXT.get(d.get('mapping'), '')}). Morris screening of "
            f"{len(summary['parameters'])} parameters with the run seeds as a noise reference "
            f"({summary['morris']['samples']} samples), then Sobol indices of "
            f"{', '.join(f'`{s}`' for s in summary['sobol']['selected']) or 'none (nothing above the noise)'} "
            f"({summary['sobol']['samples']} samples, every parameter drawn over its range); {summary['runs']} runs. "
            f"Parameter band: {100 * summary['band'][0]:g}–{100 * summary['band'][1]:g} % quantiles of the "
            f"fractional's estimate over the {nbase} Sobol base samples; noise share: the run-to-run variance of "
            f"that estimate (from the seed steps) over its variance across the samples.")
    terms = pd.DataFrame([{
        "Term": term_label(r["output"], r["entry"]),
        "Estimate (s)": fmt(r["estimate"], 4),
        "Run-to-run 95% CI": f"[{fmt(r['ci'][0])}, {fmt(r['ci'][1])}]" if not math.isnan(r["ci"][0]) else "–",
        "Fractional, nominal (s)": fmt(r["entry"]["nominal"], 4),
        "Parameter band (s)": f"[{fmt(r['entry']['band'][0], 4)}, {fmt(r['entry']['band'][1], 4)}]",
        "% samples > 0": fmt(100 * r["entry"]["positive_share"], 3),
        "Noise share": fmt(r["entry"]["noise_share"], 2),
        "Most influential": "; ".join(f"{t['parameter']} ({influence_text(t)})"
                                      for t in top_parameters(r["entry"], 2, min_snr)) or "none above noise",
    } for r in rows])
    shown = [r["output"] for r in rows]

    def cell(p: str, o: str) -> dict:
        return next(x for x in summary["outputs"][o]["ranking"] if x["parameter"] == p)

    def weight(p: dict) -> tuple[float, float]:
        xs = [cell(p["name"], o) for o in shown]
        return (max((x.get("ST", 0.0) if influential(x, min_snr) else 0.0) for x in xs),
                max((x["snr"] if not math.isnan(x["snr"]) else 0.0) for x in xs))

    ranked = []
    for p in sorted(summary["parameters"], key=weight, reverse=True):
        cells = {"Parameter": p["name"], "Machine": p["machine"]}
        for o in shown:
            x = cell(p["name"], o)
            text = f"{fmt(x['snr'], 2)}×" if not math.isnan(x["snr"]) else f"mu* {fmt(x['mu_star'])}"
            if "ST" in x:
                text = f"S_T {fmt(x['ST'], 2)}; " + text
            cells[o] = text + (" *" if influential(x, min_snr) else "")
        ranked.append(cells)
    ranges = pd.DataFrame([{
        "Parameter": p["name"], "What": p["label"], "Quantities": len(p["targets"]),
        "Range (first quantity)": f"{fmt(p['targets'][0]['lo'], 4)} to {fmt(p['targets'][0]['hi'], 4)} "
                                  f"(value {fmt(p['targets'][0]['value'], 4)}, {p['targets'][0]['key']})",
        "Reason": p["targets"][0]["reason"],
    } for p in summary["parameters"]])
    return [head,
            "Predicted mean makespan, main effects and key interactions (coefficients in s per coded unit, as "
            "`testbed analyze`'s estimates; the run-to-run CI is the full factorial's):", terms,
            f"Parameters ranked by influence on each of them: Morris mu* over the run seeds' mu* (×; below 1 is "
            f"noise), and the Sobol total index S_T where computed; * marks a parameter that matters there "
            f"(mu* ≥ {min_snr:g}× the seeds' and S_T ≥ 0.1):", pd.DataFrame(ranked),
            "Advice:", advice(summary, rows),
            "Parameters and their ranges (a parameter moves all its quantities together, at the same relative "
            "position in their ranges; every range and its reason are in the machine, cluster and kernel YAMLs):",
            ranges]


def summary_markdown(summary: dict, anova: pd.DataFrame | None = None) -> str:
    """The blocks as Markdown (summary.md, and the report's Markdown twin)."""
    from testbed.analyze.analyze import markdown_table

    out = []
    for b in summary_blocks(summary, anova):
        if isinstance(b, pd.DataFrame):
            out.append(markdown_table(b))
        elif isinstance(b, list):
            out.append("\n".join(f"* {line}" for line in b) + "\n")
        else:
            out.append(b + "\n")
    return "\n".join(out)


def plot_bands(summary: dict, anova: pd.DataFrame | None, path: Path) -> Path:
    """Each shown effect: the full-factorial estimate with its run-to-run 95 % CI, and the
    fractional's parameter band (and its value at the nominal parameters)."""
    from testbed.analyze.analyze import _pyplot

    plt = _pyplot()
    rows = [r for r in term_rows(summary, anova) if r["output"] != MAKESPAN]
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(rows) + 1.2))
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        lo, hi = r["entry"]["band"]
        ax.plot([lo, hi], [y - 0.15, y - 0.15], color="tab:orange", lw=6, alpha=0.6,
                label="parameter band (fractional)" if i == 0 else None, solid_capstyle="butt")
        ax.plot([r["entry"]["nominal"]], [y - 0.15], "|", color="tab:red", ms=10,
                label="fractional, nominal parameters" if i == 0 else None)
        if not math.isnan(r["estimate"]):
            ax.errorbar([r["estimate"]], [y + 0.15], xerr=[[r["estimate"] - r["ci"][0]], [r["ci"][1] - r["estimate"]]],
                        fmt="o", color="tab:blue", capsize=3, label="estimate, run-to-run 95% CI" if i == 0 else None)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([term_label(r["output"], r["entry"]) for r in reversed(rows)], fontsize="small")
    ax.set_xlabel("effect coefficient (s per coded unit)")
    ax.set_title(f"{summary['experiment']}: effects, run-to-run CI and parameter bands")
    ax.legend(fontsize="x-small", loc="best")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # and PDF beside it
    plt.close(fig)
    return path


# ------------------------------------------------------------------ steps (files)
def write_table(table: pd.DataFrame, path: Path, option: str = "--out") -> None:
    with atomic_file(path, option=option) as fh:
        table.to_csv(fh, index=False)


def analyze_stage(plan: dict, stage: str, samples_path: Path, batch_paths: list[Path], out: Path,
                  morris_dir: Path | None = None) -> None:
    samples = read_samples(samples_path, plan)
    runs = read_runs(batch_paths, plan, samples)
    table = outputs_table(plan, samples, runs)
    if stage == "morris":
        indices, noise = morris_indices(plan, table)
        selected = select_parameters(plan, indices)
        selected["noise_sd"] = noise
        with atomic_members(out, ["outputs.csv", "indices.csv", "selected.json"]) as tmp:
            table.to_csv(tmp / "outputs.csv", index=False)
            indices.to_csv(tmp / "indices.csv", index=False)
            (tmp / "selected.json").write_text(json.dumps(selected, indent=1, allow_nan=True) + "\n")
    else:
        selected = read_selected(Path(morris_dir) / "selected.json")["selected"]
        indices = sobol_indices(plan, table, selected)
        with atomic_members(out, ["outputs.csv", "indices.csv"]) as tmp:
            table.to_csv(tmp / "outputs.csv", index=False)
            indices.to_csv(tmp / "indices.csv", index=False)


def read_selected(path: Path) -> dict:
    if not path.exists():
        raise InputError(path, None, "selected.json of the Morris stage (`testbed sensitivity analyze --stage morris`)")
    return json.loads(path.read_text())


def write_summary(plan: dict, morris_dir: Path, sobol_dir: Path, out: Path) -> dict:
    for d, names in ((morris_dir, ["outputs.csv", "indices.csv", "selected.json"]), (sobol_dir, ["outputs.csv", "indices.csv"])):
        for n in names:
            if not (d / n).exists():
                raise InputError(d / n, None, "an output of `testbed sensitivity analyze`")
    selected = read_selected(morris_dir / "selected.json")
    summary = summarize(plan, pd.read_csv(morris_dir / "outputs.csv"), pd.read_csv(morris_dir / "indices.csv"),
                        {k: float(v) for k, v in selected["noise_sd"].items()}, selected,
                        pd.read_csv(sobol_dir / "outputs.csv"), pd.read_csv(sobol_dir / "indices.csv"))
    with atomic_members(out, ["summary.json", "summary.md"]) as tmp:
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=True) + "\n")
        (tmp / "summary.md").write_text(summary_markdown(summary))
    return summary


def read_summary(directory: str | Path) -> dict:
    path = Path(directory) / "summary.json"
    if not path.exists():
        raise InputError(path, None, "a summary written by `testbed sensitivity summary`")
    return json.loads(path.read_text())


def batch_name(i: int, batches: int) -> str:
    return f"batch-{i:0{max(3, len(str(batches - 1)))}d}.csv"


def _run_batch_file(args: tuple[dict, str, Path, int, Path]) -> str:
    plan, stage, samples_path, batch, out = args
    samples = read_samples(samples_path, plan)
    write_table(run_batch(plan, stage, samples, batch), out)
    return str(out)


def run_all(plan: dict, out: Path, jobs: int = 1) -> dict:
    """Every stage into `out`, skipping each file already there (an interrupted run resumes at
    the first missing batch)."""
    plan_file = out / "plan.json"
    text = json.dumps(plan, indent=1, sort_keys=True) + "\n"
    if plan_file.exists() and plan_file.read_text() != text:
        raise InputError(plan_file, None, "the plan of this configuration; the directory holds another one "
                                          "(remove it or choose another --out)")
    # Its own output, or one that `snakemake sensitivity` wrote (no marker there).
    check_output_dir(out, MARKER_COMMAND, legacy=("plan.json", "morris", "sobol", "summary.json", "summary.md", "logs"))
    out.mkdir(parents=True, exist_ok=True)
    from testbed.common.atomic import MARKER

    if not (out / MARKER).exists():
        (out / MARKER).write_text(f"testbed {MARKER_COMMAND}\n# written by this command: a rerun resumes it\n")
    if not plan_file.exists():
        with atomic_file(plan_file) as fh:
            fh.write(text)
    for stage in STAGES:
        d = out / stage
        samples_path = d / "samples.csv"
        if not samples_path.exists():
            if stage == "morris":
                table = morris_samples(plan)
            else:
                table = sobol_samples(plan, read_selected(out / "morris" / "selected.json")["selected"])
            write_table(table, samples_path)
        batches = plan[stage]["batches"]
        paths = [d / "batches" / batch_name(i, batches) for i in range(batches)]
        todo = [(plan, stage, samples_path, i, p) for i, p in enumerate(paths) if not p.exists()]
        log.info(f"sensitivity {stage}: {len(paths) - len(todo)} of {batches} batches done, running {len(todo)}")
        if jobs > 1 and len(todo) > 1:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(_run_batch_file, todo))
        else:
            for item in todo:
                _run_batch_file(item)
        if not all((d / n).exists() for n in (["outputs.csv", "indices.csv"] + (["selected.json"] if stage == "morris" else []))):
            analyze_stage(plan, stage, samples_path, paths, d, out / "morris")
    if not (out / "summary.json").exists():
        return write_summary(plan, out / "morris", out / "sobol", out)
    return read_summary(out)


# ------------------------------------------------------------------ CLI
def plan_from_args(args: argparse.Namespace) -> dict:
    from testbed.study.design import load_config, resolve_experiment, spec_object

    if args.spec:
        spec = spec_object(args.spec, "a JSON object {experiment: ..., sensitivity: ...}", ("experiment", "sensitivity"))
        return make_plan(spec["experiment"], spec["sensitivity"], "--spec")
    if not args.config or not args.experiment:
        raise InputError(None, "--config/--experiment", "a configuration and an experiment name (or --spec)")
    config = load_config(args.config)
    exp = resolve_experiment(config, args.experiment, args.scale, args.config)
    return make_plan(exp, config["sensitivity"], args.config)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="step", required=True, metavar="STEP")

    def source(q: argparse.ArgumentParser) -> None:
        q.add_argument("--config", default=None, help="config YAML (config/config.yaml) with a `sensitivity` section")
        q.add_argument("--experiment", default=None, help="experiment name in --config")
        q.add_argument("--scale", default=None, help="scale preset (default: the config's `scale`)")
        q.add_argument("--spec", default=None, help="{experiment, sensitivity} as JSON (used by the Snakefile)")

    q = sub.add_parser("run", help="every stage into one directory (resumable)")
    source(q)
    q.add_argument("--out", required=True, help="directory (results/sensitivity/<experiment>)")
    q.add_argument("--jobs", type=int, default=1, help="batches run in parallel")
    q = sub.add_parser("plan", help="resolve the parameters and their ranges into plan.json")
    source(q)
    q.add_argument("--out", required=True, help="plan.json to write")
    q = sub.add_parser("sample", help="the parameter samples of a stage")
    q.add_argument("--plan", required=True)
    q.add_argument("--stage", choices=STAGES, required=True)
    q.add_argument("--selected", default=None, help="(sobol) selected.json of the Morris stage")
    q.add_argument("--out", required=True, help="samples.csv to write")
    q = sub.add_parser("batch", help="run one batch of samples")
    q.add_argument("--plan", required=True)
    q.add_argument("--stage", choices=STAGES, required=True)
    q.add_argument("--samples", required=True)
    q.add_argument("--batch", type=int, required=True)
    q.add_argument("--out", required=True, help="batch table to write")
    q = sub.add_parser("analyze", help="outputs per sample, Morris or Sobol indices")
    q.add_argument("--plan", required=True)
    q.add_argument("--stage", choices=STAGES, required=True)
    q.add_argument("--samples", required=True)
    q.add_argument("--batches", nargs="+", required=True)
    q.add_argument("--morris", default=None, help="(sobol) the Morris stage directory (selected.json)")
    q.add_argument("--out", required=True, help="stage directory (outputs.csv, indices.csv[, selected.json])")
    q = sub.add_parser("summary", help="summary.json and summary.md for the report")
    q.add_argument("--plan", required=True)
    q.add_argument("--morris", required=True)
    q.add_argument("--sobol", required=True)
    q.add_argument("--out", required=True, help="directory of summary.json and summary.md")


#: the files each step writes inside its --out directory (the others write --out itself)
STEP_MEMBERS = {"run": ("plan.json", "summary.json", "summary.md"),
                "analyze": ("outputs.csv", "indices.csv", "selected.json"), "summary": ("summary.json", "summary.md")}


def check_step_paths(args: argparse.Namespace) -> None:
    """No output of a step is one of its inputs (testbed/common/outputs.py)."""
    names = ("config", "plan", "selected", "samples", "morris", "sobol")
    inputs = [(f"--{n}", getattr(args, n, None)) for n in names]
    inputs += [("--batches", b) for b in getattr(args, "batches", None) or []]
    if args.step == "analyze" and args.morris:
        inputs.append(("--morris", Path(args.morris) / "selected.json"))
    members = STEP_MEMBERS.get(args.step)
    check_distinct(inputs, [Out("--out", args.out, "members" if members else "file", members or ())])


def run(args: argparse.Namespace) -> int:
    check_step_paths(args)
    if args.step == "run":
        if args.jobs < 1:
            raise InputError(None, "--jobs", f"a positive number, got {args.jobs}")
        t0 = time.perf_counter()
        summary = run_all(plan_from_args(args), Path(args.out), args.jobs)
        log.info(f"sensitivity: {summary['runs']} runs, Sobol on {summary['sobol']['selected']} -> {args.out} "
                 f"({time.perf_counter() - t0:.0f} s)")
        return 0
    if args.step == "plan":
        plan = plan_from_args(args)
        with atomic_file(args.out, option="--out") as fh:
            fh.write(json.dumps(plan, indent=1, sort_keys=True) + "\n")
        log.info(f"sensitivity plan: {len(plan['parameters'])} parameters, {plan['runs_per_sample']} runs per sample, "
                 f"{len(plan['outputs'])} outputs -> {args.out}")
        return 0
    plan = read_plan(args.plan)
    if args.step == "sample":
        if args.stage == "morris":
            table = morris_samples(plan)
        else:
            if not args.selected:
                raise InputError(None, "--selected", "the Morris stage's selected.json (for --stage sobol)")
            table = sobol_samples(plan, read_selected(Path(args.selected))["selected"])
        write_table(table, Path(args.out))
        log.info(f"sensitivity {args.stage}: {len(table)} samples -> {args.out}")
    elif args.step == "batch":
        samples = read_samples(args.samples, plan)
        write_table(run_batch(plan, args.stage, samples, args.batch), Path(args.out))
    elif args.step == "analyze":
        if args.stage == "sobol" and not args.morris:
            raise InputError(None, "--morris", "the Morris stage directory (for --stage sobol)")
        analyze_stage(plan, args.stage, Path(args.samples), [Path(b) for b in args.batches], Path(args.out),
                      Path(args.morris) if args.morris else None)
        log.info(f"sensitivity {args.stage}: analysed -> {args.out}")
    elif args.step == "summary":
        write_summary(plan, Path(args.morris), Path(args.sobol), Path(args.out))
        log.info(f"sensitivity: summary -> {args.out}")
    return 0


def evaluate_synthetic(plan: dict, table: pd.DataFrame, response: Callable[[dict[str, float], int], dict[str, float]]
                       ) -> pd.DataFrame:
    """Outputs of each sample from a Python response (u per parameter, seed set) instead of runs:
    the tests check the sampling and analysis on a response whose influential parameters are known."""
    names = [p["name"] for p in plan["parameters"]]
    rows = []
    for s in table.to_dict("records"):
        u = {n: (float(s[n]) if not math.isnan(float(s[n])) else None) for n in names}
        rows.append({"sample": s["sample"], **response(u, int(s["seed_set"]))})
    return table.merge(pd.DataFrame(rows), on="sample")
