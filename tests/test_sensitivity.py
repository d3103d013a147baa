"""Uncertainty ranges of the descriptions and `testbed sensitivity` (Morris, then Sobol)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from support.hygiene import machine_paths
from support.workflow import jobs, snakemake, workflow_copy

from testbed import ROOT
from testbed.cli import main
from testbed.common.errors import InputError
from testbed.common.paths import NUMASIM
from testbed.describe.machines import load_cluster, load_machine, quantity_range
from testbed.starpu.sampling import load_bundle
from testbed.study import sensitivity as sa
from testbed.study.design import load_config

MACHINES = ROOT / "platforms" / "machines"
DESCRIPTIONS = [MACHINES / "chifflet.yaml", MACHINES / "chetemi.yaml", ROOT / "platforms/clusters/g5k-lille-21.yaml",
                ROOT / "calibration/chifflet-public/kernels.yaml", ROOT / "calibration/chetemi-public/kernels.yaml"]


# ------------------------------------------------------------------ ranges in the descriptions
def quantities(node, path=""):
    if isinstance(node, dict):
        if "value" in node:
            yield path, node
            return
        for k, v in node.items():
            yield from quantities(v, f"{path}.{k}" if path else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from quantities(v, f"{path}[{i}]")


@pytest.mark.parametrize("file", DESCRIPTIONS, ids=lambda p: p.name if p.parent.name == "machines" else str(p.parent.name))
def test_uncertain_numbers_have_a_range_with_a_reason(file: Path):
    data = yaml.safe_load(file.read_text())
    ranged = 0
    for key, q in quantities(data):
        if q.get("needs_calibration"):
            assert "range" in q or "spread" in q, f"{file.name}: {key} needs calibration but has no range"
        bounds = quantity_range(q)
        if bounds is not None:
            ranged += 1
            # a positive quantity stays positive; a share (within [0, 1]) may reach 0 (none held)
            assert (0 < bounds[0] or (bounds[0] == 0 and bounds[1] <= 1)) and bounds[0] <= q["value"] <= bounds[1], key
            assert len(q["range_reason"]) > 20, key
    assert ranged >= 4
    assert machine_paths(file.read_text()) == []  # sources cited by a repository-relative or public reference


def test_the_repository_descriptions_load_with_their_ranges():
    cluster = load_cluster("g5k-lille-21")
    for machine in cluster.machines.values():
        assert set(load_bundle(machine)) >= {"dgemm", "dtrsm", "dgetrf_nopiv", "dplrnt"}


@pytest.fixture
def chifflet(tmp_path: Path) -> tuple[Path, dict]:
    data = yaml.safe_load((MACHINES / "chifflet.yaml").read_text())
    data["kernels"] = str(ROOT / "calibration" / "chifflet-public")
    return tmp_path / "chifflet.yaml", data


@pytest.mark.parametrize("change, key, expected", [
    (lambda q: q.update(range=[5e9, 1e10]), "gpus[0].pcie_bandwidth_Bps.range", "lo <= value <= hi"),
    # refused by the YAML reader (testbed/common/yaml_input.py) already, at the bound itself
    (lambda q: q.update(range=[1e10, float("inf")]), "gpus[0].pcie_bandwidth_Bps.range[1]", "a finite number"),
    (lambda q: q.update(range=[0, 2e10]), "gpus[0].pcie_bandwidth_Bps.range[0]", "a bound > 0"),
    (lambda q: q.pop("range_reason"), "gpus[0].pcie_bandwidth_Bps.range_reason", "the reason of the range"),
    (lambda q: q.update(spread=0.1), "gpus[0].pcie_bandwidth_Bps.spread", "either `range` or `spread`"),
    (lambda q: (q.pop("range"), q.update(spread=1.5)), "gpus[0].pcie_bandwidth_Bps.spread", "a spread below 1"),
    (lambda q: q.update(range=[1e10]), "gpus[0].pcie_bandwidth_Bps.range", "[lo, hi], two numbers"),
    (lambda q: q.update(range=["1e10", 2e10]), "gpus[0].pcie_bandwidth_Bps.range", "[lo, hi], two numbers"),
])
def test_a_bad_range_is_refused_with_its_key(chifflet, change, key, expected):
    path, data = chifflet
    change(data["gpus"][0]["pcie_bandwidth_Bps"])
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        load_machine(path)
    assert err.value.key == key and expected in err.value.expected


def test_a_spread_gives_a_relative_range(chifflet):
    path, data = chifflet
    q = data["gpus"][0]["pcie_bandwidth_Bps"]
    q.pop("range")
    q["spread"] = 0.2
    path.write_text(yaml.safe_dump(data))
    load_machine(path)
    assert quantity_range(q) == pytest.approx((0.84e10, 1.26e10))


def test_a_bad_range_in_a_cluster_is_an_input_error_at_the_cli(tmp_path: Path, capsys):
    data = yaml.safe_load((ROOT / "platforms/clusters/g5k-lille-21.yaml").read_text())
    data["network"]["link_latency_s"]["range"] = [2e-5, 3e-5]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["platform", "--cluster", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {path}: network.link_latency_s.range: expected lo <= value <= hi")


def test_a_bad_range_in_a_kernel_bundle_is_refused(tmp_path: Path, chifflet):
    path, data = chifflet
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    kernels = yaml.safe_load((ROOT / "calibration/chifflet-public/kernels.yaml").read_text())
    kernels["kernels"]["dgemm"]["cuda"]["time_s"]["range"] = [0.006, 0.008]
    (bundle / "kernels.yaml").write_text(yaml.safe_dump(kernels))
    data["kernels"] = str(bundle)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"kernels.dgemm.cuda.time_s.range: expected lo <= value <= hi"):
        load_bundle(load_machine(path))


# ------------------------------------------------------------------ parameters and samples
SENS = load_config(ROOT / "config" / "config.yaml")["sensitivity"]


def test_parameter_keys_resolve_to_every_matching_quantity():
    params = {p.name: p for p in sa.resolve_parameters("g5k-lille-21", SENS["parameters"])}
    assert [t.key for t in params["chifflet.gpu_kernels"].targets] == ["kernels.dgemm.cuda.time_s",
                                                                         "kernels.dtrsm.cuda.time_s"]
    assert len(params["kernel_variability"].targets) == 10  # 6 chifflet + 4 chetemi timings
    assert {t.where for t in params["inter_socket"].targets} == {"chifflet", "chetemi"}
    gpu = params["chifflet.gpu_kernels"].targets[0]
    assert gpu.lo < gpu.value < gpu.hi and gpu.file == "calibration/chifflet-public/kernels.yaml"
    assert gpu.at(0.0) == gpu.lo and gpu.at(1.0) == gpu.hi


def test_the_remote_blas3_stall_is_sampled_over_its_range():
    """The latency-stalled share of the LU's CPU kernels on remote pages (docs/blas3-remote-penalty.md)
    is a sensitivity parameter: every kernel's stall fraction of both machines, each with its range."""
    params = {p.name: p for p in sa.resolve_parameters("g5k-lille-21", SENS["parameters"])}
    stall = params["numa.blas3_stall"]
    assert sorted((t.where, t.key) for t in stall.targets) == sorted(
        (m, f"numa.stall_fraction_{k}") for m in ("chifflet", "chetemi") for k in ("dgemm", "dtrsm", "dgetrf_nopiv"))
    for t in stall.targets:
        assert 0 <= t.lo < t.value < t.hi <= 1, (t.where, t.key)
        assert t.at(0.0) == t.lo and t.at(1.0) == t.hi


@pytest.mark.parametrize("keys, key, expected", [
    (["nowhere:cpu.core_flops"], "sensitivity.parameters[0].keys[0]", "PLACE:KEY with PLACE among cluster"),
    (["chifflet:cpu.nothing"], "sensitivity.parameters[0].keys[0]", "names none"),
    (["chifflet:numa.page_bytes"], "numa.page_bytes", "an uncertainty range"),
    (["chifflet:gpus[*].flops", "chifflet:gpus[0].flops"], "sensitivity.parameters[0].keys[1]", "one parameter only"),
])
def test_bad_parameter_keys_are_input_errors(keys, key, expected):
    with pytest.raises(InputError) as err:
        sa.resolve_parameters("g5k-lille-21", [{"name": "p", "keys": keys}], "config/config.yaml")
    assert err.value.key == key and expected in err.value.expected


def test_a_sample_is_a_perturbed_copy_that_loads(tmp_path: Path):
    exp = load_config(ROOT / "config" / "config.yaml")["experiments"][0]
    plan = {"experiment": exp, "parameters": [p.to_json() for p in sa.resolve_parameters(exp["cluster"], SENS["parameters"])]}
    before = {f: f.read_bytes() for f in DESCRIPTIONS}
    u = {p["name"]: 1.0 for p in plan["parameters"]} | {"chifflet.pcie": 0.0, "network.latency": math.nan}
    cluster = load_cluster(sa.write_descriptions(plan, u, tmp_path / "d"))
    chifflet, chetemi = cluster.machines["chifflet"], cluster.machines["chetemi"]
    assert chifflet.gpus[1].pcie_bandwidth_Bps == 1.05e10  # u = 0: lo
    assert chetemi.numa_nodes[1].memory_bandwidth_Bps == 4.68e10 and chifflet.numa_nodes[0].core_bandwidth_Bps == 1.875e10
    assert cluster.network.link_latency_s == 1e-5  # NaN: as written
    assert [n.name for n in cluster.nodes] == [n.name for n in load_cluster("g5k-lille-21").nodes]
    gemm = load_bundle(chifflet)["dgemm"]
    assert chifflet.kernels.is_relative_to(tmp_path) and gemm["cuda"].time_s == 0.007865 and gemm["cpu"].rel_std == 0.065
    assert {f: f.read_bytes() for f in DESCRIPTIONS} == before


def synthetic_plan(k: int = 8, trajectories: int = 20, base: int = 1024) -> dict:
    target = {"where": "chifflet", "file": "f.yaml", "key": "k", "value": 1.0, "lo": 0.5, "hi": 2.0,
              "reason": "spread of the sources"}
    return {"parameters": [{"name": f"p{i}", "label": f"p{i}", "keys": [f"chifflet:k{i}"], "targets": [target]}
                           for i in range(k)],
            "outputs": ["makespan", "A"], "aliases": {},
            "morris": {"trajectories": trajectories, "levels": 4, "noise_reference": True, "batches": 3},
            "sobol": {"base_samples": base, "max_parameters": 3, "min_signal_to_noise": 2.0, "batches": 4},
            "band": [0.05, 0.95], "seed": 11}


COEF = [4.0, 2.0, 1.0, 0.03, 0.0, 0.0, 0.0, 0.0]  # known influence of p0..p7
NOISE = 0.05


def response(u: dict[str, float | None], seed_set: int) -> dict[str, float]:
    """Linear in the parameters (nominal: u = 0.5) plus a run-to-run noise that changes with any
    parameter or seed (a simulation with fixed seeds reacts chaotically to any change); the
    effect A changes sign with p1."""
    x = [0.5 if u[f"p{i}"] is None else u[f"p{i}"] for i in range(len(COEF))]
    rng = np.random.default_rng(abs(hash((tuple(round(v, 9) for v in x), seed_set))) % 2**32)
    return {"makespan": 10 + sum(c * v for c, v in zip(COEF, x, strict=False)) + NOISE * rng.standard_normal(),
            "A": 0.4 * (x[1] - 0.3) + NOISE * rng.standard_normal()}


def test_morris_then_sobol_recover_the_known_influential_parameters():
    plan = synthetic_plan()
    morris = sa.evaluate_synthetic(plan, sa.morris_samples(plan), response)
    assert (morris["kind"] == "morris").sum() == 20 * (8 + 2) and morris["kind"].iloc[0] == "nominal"
    assert set(morris["seed_set"]) == {0, 1, 2, 3}
    indices, noise = sa.morris_indices(plan, morris)
    ms = indices[indices["output"] == "makespan"].set_index("parameter")
    ranked = list(ms.drop(sa.SEEDS).sort_values("mu_star", ascending=False).index)
    assert ranked[:3] == ["p0", "p1", "p2"]
    assert ms.loc["p0", "mu_star"] == pytest.approx(4.0, rel=0.1) and ms.loc["p1", "mu_star"] == pytest.approx(2.0, rel=0.15)
    assert all(ms.loc[f"p{i}", "snr"] < 2 for i in range(3, 8))  # at the level of the seeds
    assert noise["makespan"] == pytest.approx(NOISE, rel=0.5)
    chosen = sa.select_parameters(plan, indices)
    assert chosen["selected"] == ["p0", "p1", "p2"]

    sobol = sa.evaluate_synthetic(plan, sa.sobol_samples(plan, chosen["selected"]), response)
    assert len(sobol) == 1024 * (3 + 2)
    si = sa.sobol_indices(plan, sobol, chosen["selected"]).query("output == 'makespan'").set_index("parameter")
    total = sum(c * c for c in COEF) + 12 * NOISE**2
    for i in range(3):  # linear model, uniform u: S1 = ST = c_i^2 / sum c^2
        assert si.loc[f"p{i}", "S1"] == pytest.approx(COEF[i] ** 2 / total, abs=0.05)
        assert si.loc[f"p{i}", "ST"] == pytest.approx(COEF[i] ** 2 / total, abs=0.05)

    summary = sa.summarize(plan | {"experiment": {"name": "syn", "cluster": "c", "engine": "numasim", "workload": {"n": 1, "b": 1}},
                                   "factors": ["A"], "runs_per_sample": 1,
                                   "sample_experiment": {"design": {"generators": []}}},
                           morris, indices, noise, chosen, sobol, sa.sobol_indices(plan, sobol, chosen["selected"]))
    a = summary["outputs"]["A"]
    assert a["band"][0] < 0 < a["band"][1] and [r["parameter"] for r in sa.top_parameters(a)] == ["p1"]
    assert summary["outputs"]["makespan"]["ranking"][0]["parameter"] == "p0"
    text = sa.summary_markdown(summary)
    assert "calibrate `p1` of chifflet" in text and "before trusting the sign of A" in text
    assert "Calibrate first: `p1` (p1); then `p0` (p0)" in text  # the sign of A first, then the makespan


# ------------------------------------------------------------------ the whole analysis on numasim
needs_numasim = pytest.mark.skipif(not NUMASIM.exists(), reason="numasim not built (make build)")


def tiny_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    exp = config["experiments"][0]
    exp.update(cluster="hetero-3", batches=1, factors={f: [-1, 1] if f in "AE" else [-1] for f in "ABCDEFG"})
    exp["workload"]["n"] = 1920
    sens = config["sensitivity"]
    sens["design"]["generators"] = []
    sens["parameters"] = [p for p in sens["parameters"] if p["name"] in ("chifflet.gpu_kernels", "network.latency")]
    sens["morris"].update(trajectories=2, batches=2)
    sens["sobol"].update(base_samples=2, batches=2, max_parameters=1, min_signal_to_noise=0.0)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_samples_keep_the_nominal_tile_mapping_unless_asked_otherwise(tmp_path: Path, monkeypatch):
    """The speed-balanced mapping switches pattern at thresholds of the node speeds (g5k-lille-21:
    chifflet 3 slots of 35 at the nominal kernel rates, 2 of 28 with its kernels at their slow
    end); by default every sample runs the nominal one, `mapping: per-sample` recomputes it."""
    import testbed.run.simulate as simulate_module
    from testbed.run.distribution import read_distribution, tile_shares

    exp = load_config(ROOT / "config" / "config.yaml")["experiments"][0]
    exp["workload"]["n"] = 96000
    plan = sa.make_plan(exp, SENS)
    assert plan["mapping"] == "nominal" and exp["workload"]["distribution"]["kind"] == "heterogeneous"
    design = sa.sample_design(plan).head(1)
    envs = sa.config_envs(plan, design)
    used = []  # (mapping, chifflet's tile share) of each run, read while the sample's files exist

    def chifflet_share(distribution: dict) -> float:
        return max(tile_shares(read_distribution(distribution["path"], 100), 21))

    monkeypatch.setattr(simulate_module, "simulate", lambda spec: used.append(
        (dict(spec.distribution), chifflet_share(spec.distribution))) or {"makespan_s": 1.0, "wall_s": 0.0})
    slow = {p["name"]: math.nan for p in plan["parameters"]} | {"chifflet.cpu_kernels": 1.0, "chifflet.gpu_kernels": 1.0}
    sample = {"sample": 1, "kind": "morris", "seed_set": 0, **slow}

    fixed = sa.fixed_mapping(plan, design, tmp_path, envs)
    sa.run_sample(plan, sample, design, tmp_path, envs, fixed)
    assert used[-1] == (fixed, pytest.approx(3 / 35, abs=4e-3))
    assert sa.fixed_mapping(plan | {"mapping": "per-sample"}, design, tmp_path, envs) is None
    sa.run_sample(plan, sample, design, tmp_path, envs, None)
    assert used[-1][0] != fixed and used[-1][1] == pytest.approx(2 / 28, abs=4e-3)


@needs_numasim
def test_the_analysis_runs_resumes_and_reports(tmp_path: Path, capsys):
    config = tiny_config(tmp_path)
    out = tmp_path / "sens"
    args = ["sensitivity", "run", "--config", str(config), "--experiment", "lille21", "--out", str(out)]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == 4 * (1 + 2 * 4 + 2 * 3)  # 4 runs per sample; nominal + Morris; Sobol (d = 1)
    assert set(summary["outputs"]) == {"makespan", "A", "E", "A:E"}
    assert summary["design"]["mapping"] == "nominal"
    assert "tile mapping computed once from the unperturbed descriptions" in (out / "summary.md").read_text()
    assert len(summary["sobol"]["selected"]) == 1
    batches = sorted((out / "morris" / "batches").glob("batch-*.csv"))
    assert [b.name for b in batches] == ["batch-000.csv", "batch-001.csv"]
    runs = pd.concat(pd.read_csv(b) for b in batches)
    assert len(runs) == 4 * 9 and (runs["makespan_s"] > 0).all()
    # the nominal sample is the experiment as described: same seeds give the same makespans as plain runs
    nominal = runs[runs["sample"] == 0]
    assert nominal["seed"].nunique() == 4

    # resume: only the missing batch and what depends on it are redone, with the same result
    kept = batches[0].stat().st_mtime_ns
    first = (out / "summary.json").read_text()
    for f in [batches[1], out / "morris" / "indices.csv", out / "summary.json"]:
        f.unlink()
    capsys.readouterr()
    assert main(args) == 0
    assert "1 of 2 batches done, running 1" in capsys.readouterr().err
    assert batches[0].stat().st_mtime_ns == kept and (out / "summary.json").read_text() == first

    # another configuration into the same directory is refused
    changed = yaml.safe_load(config.read_text())
    changed["sensitivity"]["seed"] = 99
    config.write_text(yaml.safe_dump(changed))
    assert main(args) == 2
    assert "plan.json: expected the plan of this configuration" in capsys.readouterr().err


def test_config_errors_follow_the_error_contract(tmp_path: Path, capsys):
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config["sensitivity"]["experiments"] = ["nope"]
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["sensitivity", "plan", "--config", str(path), "--experiment", "lille21", "--out", str(tmp_path / "p.json")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path}: sensitivity.experiments.0: expected the name of an experiment")
    config["sensitivity"]["experiments"] = ["lille21"]
    config["sensitivity"]["sobol"]["base_samples"] = 12
    path.write_text(yaml.safe_dump(config))
    assert main(["sensitivity", "plan", "--config", str(path), "--experiment", "lille21", "--out", str(tmp_path / "p.json")]) == 2
    assert "sensitivity.sobol.base_samples: expected a power of 2, got 12" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


# ------------------------------------------------------------------ workflow and report
def test_snakemake_sensitivity_is_planned_and_all_does_not_wait_for_it(tmp_path: Path):
    wf = workflow_copy(tmp_path)
    sens = snakemake(wf, "-n", "--cores", "2", "sensitivity")
    assert sens.returncode == 0, sens.stderr
    counts = jobs(sens.stdout)
    assert counts["sensitivity_batch"] == SENS["morris"]["batches"] + SENS["sobol"]["batches"]
    for rule in ("sensitivity_plan", "sensitivity_screening", "sensitivity_indices", "sensitivity_summary", "report"):
        assert counts[rule] == 1, rule
    assert counts["sensitivity_samples"] == 2
    everything = snakemake(wf, "-n", "--cores", "2", "all")
    assert everything.returncode == 0 and not any(r.startswith("sensitivity") for r in jobs(everything.stdout))


@pytest.fixture(scope="module")
def sensitivity_dir(tmp_path_factory) -> Path:
    """A summary of the synthetic analysis, as `testbed sensitivity summary` writes it."""
    plan = synthetic_plan(k=4, trajectories=6, base=16)
    plan.update(outputs=["makespan", "A", "B", "A:B"], aliases={"A:B": ["C:D"]}, factors=["A", "B", "C", "D"],
                runs_per_sample=16, sample_experiment={"design": {"generators": ["D=ABC"]}},
                experiment={"name": "syn", "cluster": "g5k-lille-21", "engine": "real", "workload": {"n": 960, "b": 192}})

    def resp(u, seed_set):
        r = response({f"p{i}": u.get(f"p{i}") for i in range(8)} | {f"p{i}": None for i in range(4, 8)}, seed_set)
        return {"makespan": r["makespan"], "A": r["A"], "B": 0.5 + 0.01 * r["A"], "A:B": -0.2 + 0.01 * r["makespan"]}

    morris = sa.evaluate_synthetic(plan, sa.morris_samples(plan), resp)
    indices, noise = sa.morris_indices(plan, morris)
    chosen = sa.select_parameters(plan, indices)
    sobol = sa.evaluate_synthetic(plan, sa.sobol_samples(plan, chosen["selected"]), resp)
    summary = sa.summarize(plan, morris, indices, noise, chosen, sobol, sa.sobol_indices(plan, sobol, chosen["selected"]))
    out = tmp_path_factory.mktemp("sensitivity")
    (out / "summary.json").write_text(json.dumps(summary, allow_nan=True))
    return out


def test_report_section_with_bands_ranks_and_advice(experiment_dir: Path, sensitivity_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "report"
    base = ["report", "--experiment", f"syn={experiment_dir}", "--out", str(out), "--platforms-dir", str(tmp_path)]
    assert main(base) == 0
    assert "sensitivity" not in (out / "report.md").read_text()
    images = (out / "report.html").read_text().count("data:image/png;base64,")  # the experiment's figures
    assert main(base + ["--sensitivity", f"syn={sensitivity_dir}"]) == 0
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "## syn: sensitivity to the machine parameters" in md and "sensitivity to the machine parameters</h3>" in page
    assert "| A:B (= C:D) |" in md and "Parameter band (s)" in md and "Run-to-run 95% CI" in md
    assert "Calibrate first: `p1`" in md and "before trusting the sign of A" in md
    assert (out / "sensitivity_syn.png").stat().st_size > 1000 and "![syn effects and parameter bands](sensitivity_syn.png)" in md
    assert (out / "sensitivity_syn.pdf").read_bytes()[:5] == b"%PDF-"  # its vector twin
    assert page.count("data:image/png;base64,") == images + 1  # and the sensitivity figure, embedded
    assert main(base + ["--sensitivity", f"other={sensitivity_dir}"]) == 2
    assert "--sensitivity: expected the name of a reported experiment" in capsys.readouterr().err
