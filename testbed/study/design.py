"""`testbed design`: the design table of one experiment (which runs, in which order).

Full factorial 2^k by default, or a regular fractional 2^(k-p) defined by
generators ("G=ABCDEF"); each configuration is repeated; every run gets a seed
derived from the campaign seed; runs are shuffled with a seeded RNG and cut into
batches (one Snakemake job each, the unit of resume).
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed import ROOT
from testbed.common.atomic import atomic_file
from testbed.common.errors import InputError
from testbed.common.outputs import Out, check_distinct
from testbed.common.yaml_input import load_yaml
from testbed.run.workload import limits_problem, size_problem

log = logging.getLogger(__name__)

CONFIG_SCHEMA = ROOT / "config" / "config.schema.yaml"
#: numasim's size limits (simulator/src/config.hpp kMaxTiles, kMaxTileSize)

#: columns of a design table that are not factor levels
DESIGN_COLUMNS = [
    "experiment", "run", "order", "batch", "config", "repetition", "seed",
    "engine", "app", "cluster", "n", "b", "distribution", "env", "factor_env", "variability", "mpi_backend",
]


# ------------------------------------------------------------------ configuration
def _schema() -> dict:
    return load_yaml(CONFIG_SCHEMA)


def _deref(schema: dict, root: dict) -> dict:
    """The schema a local `$ref` ("#/$defs/x") points to, or `schema` itself."""
    if "$ref" not in schema:
        return schema
    node: Any = root
    for part in schema["$ref"].lstrip("#/").split("/"):
        node = node[part]
    return node


def _fill_defaults(instance: Any, schema: dict, root: dict) -> Any:
    """Fill `default` values of the schema into `instance` (jsonschema does not)."""
    schema = _deref(schema, root)
    if isinstance(instance, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in instance and "default" in sub:
                instance[key] = copy.deepcopy(sub["default"])
            if key in instance:
                instance[key] = _fill_defaults(instance[key], sub, root)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in instance:
                if key not in schema.get("properties", {}):
                    instance[key] = _fill_defaults(instance[key], extra, root)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [_fill_defaults(item, schema["items"], root) for item in instance]
    return instance


def _typed_cli_strings(instance: Any, schema: dict, root: dict) -> Any:
    """`instance` with the strings that the schema wants as numbers, integers or booleans read as
    YAML scalars. Snakemake parses a nested `--config 'analysis={p_max: 0.01}'` with YAML's
    BaseLoader, which leaves every value a string; top-level values it types itself."""
    schema = _deref(schema, root)
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        return {k: _typed_cli_strings(v, props.get(k, extra if isinstance(extra, dict) else {}), root)
                for k, v in instance.items()}
    if isinstance(instance, list):
        items = schema.get("items")
        return [_typed_cli_strings(v, items if isinstance(items, dict) else {}, root) for v in instance]
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if isinstance(instance, str) and "string" not in types and {"number", "integer", "boolean", "null"} & set(types):
        try:
            typed = load_yaml("--config", instance)
        except InputError:
            return instance
        if isinstance(typed, (int, float, bool)) or typed is None:
            return typed
    return instance


def _check_numbers(value: Any, file: str | Path, key: str) -> None:
    """NaN and infinities pass JSON Schema's minimum/maximum (every comparison with NaN is false);
    snakemake reads its config files with its own YAML loader, not testbed.common.yaml_input."""
    if isinstance(value, dict):
        for k, v in value.items():
            _check_numbers(v, file, f"{key}.{k}" if key else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_numbers(v, file, f"{key}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise InputError(file, key or "(top level)", f"a finite number, got {value}")
    elif isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        raise InputError(file, key or "(top level)", "an integer within 64 bits")


def _schema_error(errors: list, file: str | Path, prefix: str = "", note: str = "") -> InputError:
    """One line for the first violation (jsonschema's own report is 15 to 800 lines)."""
    err = sorted(errors, key=lambda e: list(e.absolute_path))[0]
    key = ".".join([prefix] * bool(prefix) + [str(p) for p in err.absolute_path]) or "(top level)"
    message = " ".join(err.message.split())
    if len(message) > 200:  # jsonschema quotes whole instances
        message = message[:200] + "..."
    return InputError(file, key, f"{err.schema.get('description', 'a valid value')}{note} ({message})")


def validate_config(config: dict, file: str | Path, cli_strings: bool = False) -> dict:
    """Validate against config/config.schema.yaml and fill defaults; InputError on violation.
    `cli_strings`: the config came through snakemake, whose nested `--config` values are strings."""
    import jsonschema

    schema = _schema()
    if cli_strings:
        config = _typed_cli_strings(config, schema, schema)
    _check_numbers(config, file, "")
    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(config))
    if errors:
        raise _schema_error(errors, file)
    config = _fill_defaults(copy.deepcopy(config), schema, schema)
    names = [e["name"] for e in config["experiments"]]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InputError(file, "experiments.name", f"unique names, {dupes[0]!r} appears twice")
    from testbed.run.factors import LETTERS

    factors = sorted({*LETTERS, *(f for e in config["experiments"] for f in e.get("factors", {}))})
    for i, subset in enumerate(config["analysis"]["boxplots"]):
        unknown = [f for f in subset if f not in factors]
        if unknown:  # the workflow would drop the plot silently (workflows/common.smk boxplot_args)
            raise InputError(file, f"analysis.boxplots.{i}",
                             f"factors of config/factors.yaml or of an experiment ({', '.join(factors)}), "
                             f"got {', '.join(unknown)}")
    for i, name in enumerate(config["sensitivity"]["experiments"]):
        if name not in names:
            raise InputError(file, f"sensitivity.experiments.{i}", f"the name of an experiment ({', '.join(names)}), got {name!r}")
    return config


def load_config(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, "an existing configuration file")
    config = load_yaml(path)
    if not isinstance(config, dict):
        raise InputError(path, "(top level)", "a mapping")
    return validate_config(config, path)


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and key not in ("factors", "design"):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def resolve_experiment(config: dict, name: str, scale: str | None = None, file: str = "config") -> dict:
    """One experiment of a validated config with the overrides of `scale` applied."""
    scale = scale or config.get("scale", "default")
    for exp in config["experiments"]:
        if exp["name"] == name:
            break
    else:
        names = ", ".join(e["name"] for e in config["experiments"])
        raise InputError(file, "experiments", f"an experiment named {name!r} (have: {names})")
    exp = {k: v for k, v in exp.items() if k != "scales"}
    scales = config["experiments"][[e["name"] for e in config["experiments"]].index(name)].get("scales", {})
    if scale != "default":
        if scale not in scales:
            raise InputError(file, f"experiments.{name}.scales", f"an entry named {scale!r} (selected by scale)")
        exp = _merge(exp, scales[scale])
    exp["scale"] = scale
    check_experiment(exp, file)
    return exp


def check_experiment(exp: dict, file: str | Path = "config") -> None:
    """What can be checked in one resolved experiment (scale overrides applied) without running
    it. The workflow calls this while the Snakefile is read, so a mistake is one line before the
    DAG instead of a failure in every batch job."""
    import jsonschema

    from testbed.describe.machines import load_cluster
    from testbed.run.engines.numasim import ENV_VARIABLES
    from testbed.run.factors import LETTERS
    from testbed.starpu.variables import check_value

    schema = _schema()
    name = exp.get("name", "?")
    where = f"experiments.{name}"
    scale = exp.get("scale", "default")
    note = f" (with the overrides of scale {scale})" if scale != "default" else ""
    body = {k: v for k, v in exp.items() if k not in ("scale", "scales")}
    validator = jsonschema.Draft202012Validator({**schema["$defs"]["experiment"], "$defs": schema["$defs"]})
    errors = list(validator.iter_errors(body))
    if errors:
        raise _schema_error(errors, file, where, note)
    n, b = exp["workload"]["n"], exp["workload"]["b"]
    problem = size_problem(n, b)
    if problem:
        raise InputError(file, f"{where}.workload.n", problem + note)
    problem = limits_problem(n, b)
    if problem:
        raise InputError(file, f"{where}.workload", problem + note)
    factor_env = exp.get("factor_env", {})
    for letter in exp["factors"]:
        if letter not in LETTERS and letter not in factor_env:
            raise InputError(file, f"{where}.factors.{letter}",
                             f"a factor of config/factors.yaml ({', '.join(LETTERS)}) or of factor_env{note}")
    for letter in factor_env:
        if letter not in exp["factors"]:
            raise InputError(file, f"{where}.factor_env.{letter}",
                             f"a factor of the experiment ({', '.join(sorted(exp['factors']))}){note}")
    runs = len(configurations(exp["factors"], exp.get("design", {}), file)) * exp.get("repetitions", 1)
    if exp.get("batches", 1) > runs:
        raise InputError(file, f"{where}.batches", f"at most the number of runs ({runs}){note}, got {exp['batches']}")
    named = [("env", exp.get("env", {}))] + [(f"factor_env.{f}.{lv}", e[lv]) for f, e in factor_env.items()
                                             for lv in ("low", "high")]
    for key, variables in named:  # as StarPU parses them, for every engine (testbed/starpu/variables.py)
        for var, value in variables.items():
            try:
                check_value(var, str(value), f"{where}.{key}.{var}")
            except InputError as exc:
                raise InputError(file, exc.key, exc.expected + note) from None
    if exp.get("app", "lu") == "chameleon" and exp["engine"] == "numasim":
        raise InputError(file, f"{where}.app", "lu with the numasim engine (it simulates apps/lu's graph, which "
                         "is Chameleon's); app chameleon runs with the real or starpu-simgrid engine")
    if exp["engine"] == "numasim":
        for key, variables in named:
            for var in variables:
                if var not in ENV_VARIABLES:
                    raise InputError(file, f"{where}.{key}.{var}", "a variable numasim interprets (STARPU_SCHED, "
                                     "STARPU_SCHED_BETA, ...: simulator/src/config.cpp)")
    dist = exp["workload"].get("distribution", {"kind": "block-cyclic"})
    if dist.get("kind") == "file":
        if not dist.get("path") or not Path(dist["path"]).is_file():
            raise InputError(file, f"{where}.workload.distribution.path",
                             f"an existing tile distribution file (docs/interfaces.md §5), got {dist.get('path')!r}")
    load_cluster(exp["cluster"])  # its own errors name the cluster file and key


# ------------------------------------------------------------------ design
def _parse_generator(word: str, varying: list[str], where: str) -> tuple[str, int, list[str]]:
    target, _, rhs = word.partition("=")
    sign = -1 if rhs.startswith("-") else 1
    letters = list(rhs.lstrip("-"))
    if target not in varying:
        raise InputError(where, f"design.generators {word}", f"a generated factor among the two-level factors {varying}")
    if len(set(letters)) != len(letters) or target in letters or not letters:
        raise InputError(where, f"design.generators {word}", "a product of distinct other factors")
    return target, sign, letters


def configurations(factors: dict[str, list[int]], design: dict, where: str = "config") -> pd.DataFrame:
    """The configurations (one row each, factor columns in letter order) in standard (Yates) order."""
    letters = sorted(factors)
    varying = [f for f in letters if len(factors[f]) == 2]
    generators = design.get("generators", []) if design.get("type", "full") == "fractional" else []
    if design.get("type") == "fractional" and not generators:
        raise InputError(where, "design.generators", "at least one generator for a fractional design")
    gens = [_parse_generator(g, varying, where) for g in generators]
    generated = [g[0] for g in gens]
    if len(set(generated)) != len(generated):
        raise InputError(where, "design.generators", "each factor generated at most once")
    base = [f for f in varying if f not in generated]
    for target, _, word in gens:
        bad = [x for x in word if x not in base]
        if bad:
            raise InputError(where, f"design.generators {target}", f"a word of base factors {base}, not {bad}")
    rows = []
    # Yates order: the first factor alternates fastest.
    for combo in itertools.product([-1, 1], repeat=len(base)):
        levels = dict(zip(base, reversed(combo), strict=False))
        for target, sign, word in gens:
            levels[target] = sign * int(np.prod([levels[x] for x in word]))
        for f in letters:
            if f not in levels:
                levels[f] = factors[f][0]
        rows.append({f: levels[f] for f in letters})
    table = pd.DataFrame(rows, columns=letters)
    table.insert(0, "config", [label(r, varying) for r in table.to_dict("records")])
    return table


def label(levels: dict[str, int], varying: list[str]) -> str:
    """Standard notation of a configuration: lowercase letters of factors at +1, "(1)" if none."""
    word = "".join(f.lower() for f in varying if levels.get(f) == 1)
    return word or "(1)"


def run_seed(campaign_seed: int, config_index: int, repetition: int) -> int:
    """A run's seed: deterministic in (campaign seed, configuration, repetition), in [1, 2^31 - 1]."""
    state = np.random.SeedSequence([campaign_seed, config_index, repetition]).generate_state(1)[0]
    return int(state) % (2**31 - 1) + 1


def design_table(exp: dict, where: str = "config") -> pd.DataFrame:
    """All runs of an experiment, in execution order, with their batch."""
    n, b = exp["workload"]["n"], exp["workload"]["b"]
    problem = size_problem(n, b)
    if problem:
        raise InputError(where, f"experiments.{exp['name']}.workload.n", problem)
    configs = configurations(exp["factors"], exp.get("design", {}), where)
    reps = int(exp.get("repetitions", 1))
    seed = int(exp.get("seed", 1))
    rows = []
    for ci, cfg in enumerate(configs.to_dict("records")):
        for rep in range(1, reps + 1):
            rows.append({"run": ci * reps + rep - 1, "config": cfg["config"], "repetition": rep, "seed": run_seed(seed, ci, rep),
                         **{f: cfg[f] for f in sorted(exp["factors"])}})
    table = pd.DataFrame(rows)
    total = len(table)
    batches = int(exp.get("batches", 1))
    if batches > total:
        raise InputError(where, f"experiments.{exp['name']}.batches", f"at most the number of runs ({total}), got {batches}")
    if exp.get("randomize", True):
        position = np.random.default_rng(seed).permutation(total)
    else:
        position = np.arange(total)
    table["order"] = position
    table = table.sort_values("order").reset_index(drop=True)
    table["batch"] = table["order"] * batches // total
    table["experiment"] = exp["name"]
    table["engine"] = exp["engine"]
    table["app"] = exp.get("app", "lu")
    table["cluster"] = exp["cluster"]
    table["n"] = n
    table["b"] = b
    table["distribution"] = json.dumps(exp["workload"].get("distribution", {"kind": "block-cyclic"}), sort_keys=True)
    table["env"] = json.dumps({k: str(v) for k, v in exp.get("env", {}).items()}, sort_keys=True)
    factor_env = exp.get("factor_env", {})
    for letter in factor_env:
        if letter not in exp["factors"]:
            raise InputError(where, f"experiments.{exp['name']}.factor_env.{letter}",
                             f"a factor of the experiment ({', '.join(sorted(exp['factors']))})")
    table["factor_env"] = json.dumps({f: {lv: {k: str(v) for k, v in e[lv].items()} for lv in ("low", "high")}
                                      for f, e in factor_env.items()}, sort_keys=True)
    table["variability"] = bool(exp.get("variability", True))
    table["mpi_backend"] = str(exp.get("mpi_backend", "nmad"))
    factor_cols = sorted(exp["factors"])
    return table[DESIGN_COLUMNS + factor_cols]


# ------------------------------------------------------------------ CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="config YAML (config/config.yaml); needs --experiment")
    src.add_argument("--spec", help="one resolved experiment as JSON (used by the Snakefile)")
    p.add_argument("--experiment", help="experiment name in --config")
    p.add_argument("--scale", default=None, help="scale preset (default: the config's `scale`)")
    p.add_argument("--out", required=True, help="design table CSV to write")


def spec_object(text: str, expected: str, keys: tuple[str, ...] = ()) -> dict:
    """The JSON object a command received as --spec (from the Snakefile), holding `keys`;
    InputError("--spec", ..., `expected`) otherwise."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("--spec", None, f"a JSON object ({exc})") from None
    if not isinstance(spec, dict) or any(k not in spec for k in keys):
        raise InputError("--spec", None, expected)
    return spec


def run(args: argparse.Namespace) -> int:
    check_distinct([("--config", args.config)], [Out("--out", args.out)])
    if args.spec:
        exp = spec_object(args.spec, "a JSON object (one resolved experiment)")
        where = "--spec"
        check_experiment(exp, where)
    else:
        if not args.experiment:
            raise InputError(args.config, "--experiment", "the name of an experiment")
        config = load_config(args.config)
        exp = resolve_experiment(config, args.experiment, args.scale, args.config)
        where = args.config
    table = design_table(exp, where)
    with atomic_file(args.out, option="--out") as fh:
        table.to_csv(fh, index=False)
    log.info(f"design: {len(table)} runs, {table['config'].nunique()} configurations, "
             f"{table['batch'].nunique()} batches -> {args.out}")
    return 0
