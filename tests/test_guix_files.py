"""envs/guix/ cannot be run here (no Guix): these checks keep its files pinned and consistent."""

from __future__ import annotations

import re
from pathlib import Path

GUIX = Path(__file__).resolve().parents[1] / "envs" / "guix"


def channels() -> list[str]:
    text = re.sub(r";.*", "", (GUIX / "channels.scm").read_text())
    return [c for c in re.split(r"\(channel\b", text)[1:]]


def test_every_channel_is_pinned_to_a_full_commit() -> None:
    names = []
    for ch in channels():
        name = re.search(r"\(name '([\w-]+)\)", ch)
        assert name, ch
        names.append(name.group(1))
        assert re.search(r'\(commit\s+"[0-9a-f]{40}"\)', ch), f"channel {name.group(1)} has no full commit"
    assert names == ["guix", "guix-hpc"]
    guix = channels()[0]
    assert "make-channel-introduction" in guix and '"9edb3f66fd807b096b48283debdcddccfea34bad"' in guix


def test_one_starpu_flavour_per_profile_and_run_sh_builds_them_all() -> None:
    flavours = {}
    for name in ("tools", "native", "simgrid"):
        text = re.sub(r";.*", "", (GUIX / f"{name}.scm").read_text())
        flavours[name] = set(re.findall(r'"(starpu[\w+-]*)"', text))
    assert flavours == {"tools": set(), "native": {"starpu-fxt"}, "simgrid": {"starpu-simgrid"}}
    run = (GUIX / "run.sh").read_text()
    assert "for p in tools native simgrid" in run
    assert 'STARPU_NATIVE_PREFIX="$ROOT/.guix/native"' in run and 'STARPU_SIMGRID_PREFIX="$ROOT/.guix/simgrid"' in run
    assert '-C "$ROOT/envs/guix/channels.scm"' in run
