"""envs/setup.sh's StarVZ step (TESTBED_STARVZ): a wrong setting or wrong source tarballs stop it
before anything is installed, with one line naming the setting and the file, exit 2."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from testbed import ROOT

TARBALLS = ("data.tree-1.1.0-bee0d76.tar.gz", "starvz-0.8.4-7426178.tar.gz")


def setup(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TESTBED_STARVZ")}
    # apt off and nothing to build: a run that got past the checks would only check stamps
    base.update(TESTBED_APT="0", TESTBED_PYTHON="0", TESTBED_STARPU_BUILDS="none", **env)
    return subprocess.run(["bash", str(ROOT / "envs" / "setup.sh")], env=base, capture_output=True, text=True,
                          timeout=120)


def one_error(proc: subprocess.CompletedProcess) -> str:
    errors = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(errors) == 1, (proc.returncode, proc.stderr)
    return re.sub(r"\x1b\[[0-9;]*m", "", errors[0])


def test_an_unknown_setting_is_one_error():
    assert "TESTBED_STARVZ=maybe: expected auto, 1 or 0" in one_error(setup(TESTBED_STARVZ="maybe"))


def test_required_without_the_tarballs_is_one_error(tmp_path):
    absent = tmp_path / "absent"
    line = one_error(setup(TESTBED_STARVZ="1", TESTBED_STARVZ_VENDOR=str(absent)))
    assert f"TESTBED_STARVZ=1: expected StarVZ's source tarballs in {absent}" in line
    line = one_error(setup(TESTBED_STARVZ="1", TESTBED_STARVZ_VENDOR=str(tmp_path)))
    assert f"expected {tmp_path}/{TARBALLS[0]}" in line and "no such file" in line


def test_a_tarball_of_other_contents_is_refused(tmp_path):
    """The sha256 of each tarball is pinned: another archive under the same name is refused
    before apt or R CMD INSTALL run (auto takes the folder when it exists)."""
    for name in TARBALLS:
        (tmp_path / name).write_bytes(b"not the archive\n")
    line = one_error(setup(TESTBED_STARVZ_VENDOR=str(tmp_path)))
    assert f"{tmp_path}/{TARBALLS[0]}: expected sha256" in line


@pytest.mark.skipif(not (ROOT.parent / "shared" / "vendor" / "r").is_dir(), reason="no ../shared/vendor/r")
def test_the_pinned_sha256_are_the_vendor_folders(tmp_path):
    """The pinned sha256 are those the vendor folder's README lists for its tarballs; a copy of
    one with a byte added is refused."""
    vendor = ROOT.parent / "shared" / "vendor" / "r"
    for name in TARBALLS:
        shutil.copy(vendor / name, tmp_path / name)
    (tmp_path / TARBALLS[1]).write_bytes((vendor / TARBALLS[1]).read_bytes() + b"\0")
    assert f"{TARBALLS[1]}: expected sha256" in one_error(setup(TESTBED_STARVZ_VENDOR=str(tmp_path)))
    for name in TARBALLS:
        expected = re.search(rf"\| {re.escape(name)} \| ([0-9a-f]{{64}}) \|", (vendor / "README.md").read_text())
        assert expected and expected.group(1) in (ROOT / "envs" / "setup.sh").read_text(), name
