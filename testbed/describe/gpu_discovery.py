"""NVIDIA GPUs of this machine without hwloc's CUDA plugin.

hwloc lists CUDA devices only when built with its CUDA/NVML plugins (Debian's and Ubuntu's
packages are not), so machine descriptions came out with ``gpus: []`` on GPU nodes. Here the
GPUs come from ``nvidia-smi`` (name, memory, PCI bus id) and their NUMA node from the PCI
device in sysfs (``/sys/bus/pci/devices/<domain:bus:dev.fn>/numa_node``, the attribute the
kernel exports for every PCI device; -1 when the firmware gives no affinity).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

QUERY = "index,name,memory.total,pci.bus_id"
SYSFS_PCI = Path("/sys/bus/pci/devices")


def sysfs_bus_id(nvidia_bus_id: str) -> str:
    """nvidia-smi's `00000000:00:06.0` (8-digit domain) -> sysfs `0000:00:06.0`."""
    domain, _, rest = nvidia_bus_id.strip().partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def parse_nvidia_smi(text: str, sysfs: Path = SYSFS_PCI) -> list[dict]:
    """GPUs from `nvidia-smi --query-gpu=index,name,memory.total,pci.bus_id
    --format=csv,noheader,nounits` output (memory in MiB)."""
    gpus = []
    for line in text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        index, name, mib, bus = fields
        bus_id = sysfs_bus_id(bus)
        numa_file = sysfs / bus_id / "numa_node"
        try:
            numa = int(numa_file.read_text().strip())
        except (OSError, ValueError):
            numa = -1
        gpus.append({
            "index": int(index),
            "model": name,
            "memory_bytes": int(float(mib) * 2**20),
            "pci_bus_id": bus_id,
            "numa_node": numa,  # -1: no affinity reported
            "source": f"nvidia-smi --query-gpu={QUERY}; {numa_file}",
        })
    return gpus


def discover_gpus() -> list[dict]:
    """This machine's NVIDIA GPUs ([] without nvidia-smi or GPUs)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    proc = subprocess.run([smi, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True)
    return parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else []
