"""One YAML reader for what people write: machine and cluster
descriptions, kernels.yaml of a bundle, config.yaml, factors.yaml. Non-finite numbers,
integers beyond 64 bits, duplicate keys, alias bombs, cycles and deep nesting are refused with
the file and the key (exit 2 from the CLI, one line), before anything uses the values."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import ROOT
from testbed.common.errors import InputError
from testbed.describe.machines import load_cluster, load_machine
from testbed.study.design import load_config

CHIFFLET = ROOT / "platforms" / "machines" / "chifflet.yaml"
# 9^9 = 387 million strings once expanded, from 400 bytes (a "billion laughs"); under `notes:`
# of a real machine file the schema validation walked them for minutes.
BOMB = "notes:\n" + "".join(
    f"  {line}\n" for line in ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)])


def machine_with(tmp_path: Path, old: str, new: str) -> Path:
    text = CHIFFLET.read_text()
    assert old in text
    f = tmp_path / "m.yaml"
    f.write_text(text.replace(old, new, 1))
    return f


@pytest.mark.parametrize("old,new,key,expected", [
    ("memory_bandwidth_Bps: {value: 4.0907e+10", "memory_bandwidth_Bps: {value: .nan", "numa_nodes[0].memory_bandwidth_Bps.value",
     "a finite number"),
    ("memory_bandwidth_Bps: {value: 4.0907e+10", "memory_bandwidth_Bps: {value: .inf", "numa_nodes[0].memory_bandwidth_Bps.value",
     "a finite number"),
    ("memory_bandwidth_Bps: {value: 4.0907e+10", "memory_bandwidth_Bps: {value: -.Inf",
     "numa_nodes[0].memory_bandwidth_Bps.value", "a finite number"),
    ("memory_bandwidth_Bps: {value: 4.0907e+10", "memory_bandwidth_Bps: {value: 1.0e+400",
     "numa_nodes[0].memory_bandwidth_Bps.value", "a finite number"),
    ("memory_bandwidth_Bps: {value: 4.0907e+10", "memory_bandwidth_Bps: {value: 123456789012345678901234",
     "numa_nodes[0].memory_bandwidth_Bps.value", "an integer within 64 bits"),
    ("name: chifflet\n", "name: chifflet\nname: chetemi\n", "name", "each key once"),
    ("memory_bandwidth_Bps: {value: 4.0907e+10", "memory_bandwidth_Bps: {value: 4.0907e+10, value: 1",
     "numa_nodes[0].memory_bandwidth_Bps.value", "each key once"),
])
def test_machine_yaml_refused_with_key(tmp_path, old, new, key, expected):
    f = machine_with(tmp_path, old, new)
    with pytest.raises(InputError) as e:
        load_machine(f)
    assert e.value.key == key and expected in e.value.expected and e.value.file == str(f)


def test_alias_bomb_refused_quickly(tmp_path):
    f = tmp_path / "bomb.yaml"
    f.write_text(CHIFFLET.read_text() + BOMB)
    t0 = time.monotonic()
    with pytest.raises(InputError) as e:
        load_machine(f)
    assert time.monotonic() - t0 < 5
    assert e.value.key.startswith("notes.") and "alias bomb" in e.value.expected


@pytest.mark.parametrize("text,key", [
    ("a: &x [1, *x]\n", "a[1]"),                       # a cycle
    ("[" * 100000 + "]" * 100000, None),                # libyaml's composer recursed into a segfault
])
def test_cycles_and_deep_nesting(tmp_path, text, key):
    f = tmp_path / "m.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as e:
        load_machine(f)
    if key:
        assert e.value.key == key


def test_non_utf8_refused(tmp_path):
    f = machine_with(tmp_path, "name: chifflet", "name: chif\xe9let")
    f.write_bytes(f.read_text().encode("latin-1"))
    with pytest.raises(InputError, match="UTF-8"):
        load_machine(f)


def test_cluster_and_config_use_the_same_reader(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text((ROOT / "platforms" / "clusters" / "chifflet-1.yaml").read_text()
                 .replace("link_latency_s: {value: 1.0e-5", "link_latency_s: {value: .nan"))
    with pytest.raises(InputError, match="network.link_latency_s.value: expected a finite number"):
        load_cluster(c)
    cfg = tmp_path / "config.yaml"
    cfg.write_text((ROOT / "config" / "config.yaml").read_text() + "\nseed: 1\nseed: 2\n")
    with pytest.raises(InputError, match="seed: expected each key once"):
        load_config(cfg)


def test_merge_keys_and_plain_aliases_still_read(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\nlist: [*b, *b]\n")
    from testbed.common.yaml_input import load_yaml
    assert load_yaml(f) == {"base": {"x": 1}, "other": {"x": 1, "y": 2}, "list": [{"x": 1}, {"x": 1}]}


def test_cli_one_line_exit_2(tmp_path):
    m = machine_with(tmp_path, "memory_bandwidth_Bps: {value: 4.0907e+10", "memory_bandwidth_Bps: {value: .nan")
    c = tmp_path / "c.yaml"
    c.write_text("name: c\nnodes:\n  - {machine: m.yaml, count: 1}\n" + (ROOT / "platforms" / "clusters" / "chifflet-1.yaml")
                 .read_text().split("nodes:")[1].split("\n", 2)[2])
    proc = subprocess.run([sys.executable, "-m", "testbed", "platform", "--cluster", str(c), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: {m}: numa_nodes[0].memory_bandwidth_Bps.value: expected a finite number, got '.nan'"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("old,new,key,expected", [
    # a core index of 2^31 built a 2^31-bit hwloc bitmap (a hang); 1e300 passed as a JSON Schema
    # "integer" and broke `1 << index` (a traceback)
    ("cores: {value: [14, 15,", "cores: {value: [2147483648, 15,", "numa_nodes[1].cores.value[0]", "core OS index"),
    ("cores: {value: [14, 15,", "cores: {value: [1.0e+300, 15,", "numa_nodes[1].cores.value[0]", "integer"),
])
def test_implausible_magnitudes_and_float_indices(tmp_path, old, new, key, expected):
    f = machine_with(tmp_path, old, new)
    with pytest.raises(InputError) as e:
        load_machine(f)
    assert e.value.key == key and expected in e.value.expected, e.value.message()


@pytest.mark.parametrize("old,new,key,expected", [
    # found by tests/test_fuzz.py: a denormal latency reached SimGrid's XML parser (exit 1)
    ("link_latency_s: {value: 1.0e-5", "link_latency_s: {value: 1.0e-320", "network.link_latency_s.value",
     "plausible quantity of seconds"),
    ("switch_bandwidth_Bps: {value: 1.25e+9", "switch_bandwidth_Bps: {value: 1.0e-300",
     "network.switch_bandwidth_Bps.value", "plausible quantity of bytes/s"),
])
def test_implausible_cluster_quantities(tmp_path, old, new, key, expected):
    c = tmp_path / "c.yaml"
    text = (ROOT / "platforms" / "clusters" / "chifflet-1.yaml").read_text()
    assert old in text
    c.write_text(text.replace(old, new))
    with pytest.raises(InputError) as e:
        load_cluster(c)
    assert e.value.key == key and expected in e.value.expected, e.value.message()


def test_cluster_node_count_bounded(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text((ROOT / "platforms" / "clusters" / "chifflet-1.yaml").read_text()
                 .replace("{machine: chifflet, count: 1}", "{machine: chifflet, count: 1000000}"))
    with pytest.raises(InputError, match="nodes: expected at most 1024 nodes"):
        load_cluster(c)
