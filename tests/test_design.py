"""Design tables: full and fractional factorials, repetitions, seeds, order, batches, config."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.study.design import configurations, design_table, load_config, resolve_experiment, run_seed


def experiment(**over) -> dict:
    exp = {"name": "t", "cluster": "g5k-lille-21", "engine": "numasim",
           "workload": {"n": 1920, "b": 960, "distribution": {"kind": "block-cyclic"}},
           "factors": {f: [-1, 1] for f in "ABC"}, "design": {"type": "full", "generators": []},
           "repetitions": 2, "seed": 11, "randomize": True, "batches": 3, "env": {}, "factor_env": {}}
    exp.update(over)
    return exp


def test_full_factorial_is_complete_balanced_and_in_yates_order():
    configs = configurations({f: [-1, 1] for f in "ABC"}, {"type": "full"})
    assert len(configs) == 8
    assert set(map(tuple, configs[list("ABC")].to_numpy())) == set(itertools.product([-1, 1], repeat=3))
    assert list(configs["config"][:4]) == ["(1)", "a", "b", "ab"]
    for f in "ABC":
        assert configs[f].sum() == 0


def test_fractional_design_follows_its_generator():
    factors = {f: [-1, 1] for f in "ABCD"}
    configs = configurations(factors, {"type": "fractional", "generators": ["D=ABC"]})
    assert len(configs) == 8
    assert (configs["D"] == configs["A"] * configs["B"] * configs["C"]).all()
    neg = configurations(factors, {"type": "fractional", "generators": ["D=-ABC"]})
    assert (neg["D"] == -neg["A"] * neg["B"] * neg["C"]).all()


@pytest.mark.parametrize("generators", [["E=ABC"], ["D=AD"], ["D=AB", "D=BC"], []])
def test_bad_generators_are_rejected(generators):
    with pytest.raises(InputError, match="generator"):
        configurations({f: [-1, 1] for f in "ABCD"}, {"type": "fractional", "generators": generators})


def test_single_level_factor_is_held_fixed():
    configs = configurations({"A": [-1, 1], "B": [1]}, {"type": "full"})
    assert len(configs) == 2 and (configs["B"] == 1).all()


def test_design_table_repetitions_seeds_order_batches():
    table = design_table(experiment())
    assert len(table) == 16
    assert table.groupby("config").size().eq(2).all()
    assert table["seed"].is_unique
    assert sorted(table["order"]) == list(range(16))
    assert list(table["order"]) == sorted(table["order"])  # rows are in execution order
    sizes = table.groupby("batch").size()
    assert list(sizes.index) == [0, 1, 2] and sizes.max() - sizes.min() <= 1
    # deterministic in the campaign seed: regenerating gives the same runs in the same batches
    assert design_table(experiment()).equals(table)
    other = design_table(experiment(seed=12))
    assert list(other["run"]) != list(table["run"])
    assert set(other["seed"]).isdisjoint(set(table["seed"]))


def test_seed_does_not_depend_on_order_or_batches():
    a = design_table(experiment(batches=1, randomize=False)).set_index("run")["seed"]
    b = design_table(experiment(batches=4)).set_index("run")["seed"]
    assert a.sort_index().equals(b.sort_index())
    assert run_seed(11, 0, 1) == a.loc[0]


def test_unrandomized_order_is_the_standard_order():
    table = design_table(experiment(randomize=False, batches=1))
    assert list(table["run"]) == list(range(16))


def test_too_many_batches_and_bad_sizes_are_input_errors():
    with pytest.raises(InputError, match="batches"):
        design_table(experiment(batches=17))
    with pytest.raises(InputError, match="multiple of b"):
        design_table(experiment(workload={"n": 1000, "b": 960}))
    with pytest.raises(InputError, match="factor_env.Z"):
        design_table(experiment(factor_env={"Z": {"low": {}, "high": {}}}))


def test_embedded_config_default_and_study_scale():
    config = load_config(ROOT / "config" / "config.yaml")
    exp = resolve_experiment(config, config["experiments"][0]["name"])
    default = design_table(exp)
    assert set(exp["factors"]) == set("ABCDEFG")
    assert default["config"].nunique() == 128
    study = design_table(resolve_experiment(config, exp["name"], "study"))
    assert len(study) == 3840 and study["n"].iloc[0] == 96000 and study["b"].iloc[0] == 960
    assert study.groupby("config").size().eq(30).all()


def test_schema_has_a_description_for_every_key():
    schema = yaml.safe_load((ROOT / "config" / "config.schema.yaml").read_text())

    def walk(node, path):
        if isinstance(node, dict):
            for key, sub in node.get("properties", {}).items():
                assert "description" in sub or "$ref" in sub, f"{path}.{key} has no description"
            for key, sub in node.items():
                walk(sub, f"{path}.{key}")
        elif isinstance(node, list):
            for item in node:
                walk(item, path)

    walk(schema, "schema")


def test_every_key_of_config_yaml_is_commented():
    import re

    lines = (ROOT / "config" / "config.yaml").read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if re.match(r"^\s*(- )?[A-Za-z_][A-Za-z0-9_]*:", line):
            above = lines[number - 2].strip() if number > 1 else ""
            assert "#" in line or above.startswith("#"), f"config.yaml line {number} has no comment: {line!r}"


@pytest.mark.parametrize("mutate, key", [
    (lambda c: c["experiments"][0].update(engine="gem5"), "experiments.0.engine"),
    (lambda c: c["experiments"][0]["factors"].update(A=[0, 1]), "experiments.0.factors.A.0"),
    (lambda c: c["experiments"][0].update(repetitions=0), "experiments.0.repetitions"),
    (lambda c: c.update(colour="blue"), "(top level)"),
])
def test_bad_config_names_file_and_key(tmp_path: Path, mutate, key):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    mutate(config)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    with pytest.raises(InputError) as err:
        load_config(bad)
    assert str(bad) in err.value.message() and key in err.value.message()


def test_cli_writes_design(tmp_path: Path):
    from testbed.cli import main

    out = tmp_path / "design.csv"
    assert main(["design", "--config", str(ROOT / "config" / "config.yaml"), "--experiment", "lille21",
                 "--out", str(out)]) == 0
    assert out.read_text().startswith("experiment,run,order,batch,config")
    assert main(["design", "--config", str(ROOT / "config" / "config.yaml"), "--experiment", "nope",
                 "--out", str(tmp_path / "x.csv")]) == 2
    assert not (tmp_path / "x.csv").exists()
