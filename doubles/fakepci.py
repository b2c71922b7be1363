"""A fake sysfs PCI tree: device directories, bus/driver/class symlinks and SR-IOV links as the kernel lays them out.

Like doubles/fakehost.py it fakes the kernel's files only, so the real readers run unchanged. Every symlink is
relative (as in real sysfs), so ``os.path.realpath`` on a ``bus/pci/devices`` entry stays inside the fake tree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

BRIDGE_CLASS = "0x060400"      # PCI-to-PCI bridge
BRIDGE_VENDOR, BRIDGE_DEVICE = "0x8086", "0x2030"   # an Intel Xeon root port; switch ports get the same
VF_DEVICE = "0x101c"           # ConnectX-6 VF


@dataclass(frozen=True)
class _Dev:
    path: str
    root: str
    bridges: tuple[str, ...]
    numa_node: int | None
    pci_class: str
    vendor: str


class FakePci:
    def __init__(self, sys_root: str) -> None:
        self.sys_root = sys_root
        self._devs: dict[str, _Dev] = {}

    def add(self, bdf: str, *, root: str = "pci0000:00", bridges: Sequence[str] = (), numa_node: int | None = -1,
            pci_class: str = "0x030200", vendor: str = "0x10de", device: str = "0x2330",
            driver: str | None = None) -> str:
        """A device under root complex ``root`` behind ``bridges`` (root port first); bridges not seen before are
        created too, with the same NUMA node (the kernel gives a whole root complex one node). Returns its dir."""
        parent = os.path.join(self.sys_root, "devices", root)
        for i, bridge in enumerate(bridges):
            parent = os.path.join(parent, bridge)
            if bridge not in self._devs:
                self._device(bridge, parent,
                             _Dev(parent, root, tuple(bridges[:i]), numa_node, BRIDGE_CLASS, BRIDGE_VENDOR),
                             BRIDGE_DEVICE)
        path = os.path.join(parent, bdf)
        self._device(bdf, path, _Dev(path, root, tuple(bridges), numa_node, pci_class, vendor), device)
        if driver is not None:
            drv = os.path.join(self.sys_root, "bus", "pci", "drivers", driver)
            os.makedirs(drv, exist_ok=True)
            for control in ("bind", "unbind", "new_id", "remove_id", "uevent"):
                _write(os.path.join(drv, control), "")
            _link(os.path.join(drv, bdf), path)
            _link(os.path.join(path, "driver"), drv)
        return path

    def add_ib(self, bdf: str, ibdev: str, port_states: Sequence[str] = ("4: ACTIVE",)) -> None:
        """An IB device of ``bdf`` with ports 1..n in the given states ("4: ACTIVE", "1: DOWN")."""
        ib = os.path.join(self._devs[bdf].path, "infiniband", ibdev)
        for n, state in enumerate(port_states, start=1):
            _write(os.path.join(ib, "ports", str(n), "state"), state + "\n")
        os.makedirs(os.path.join(ib, "ports"), exist_ok=True)
        _link(os.path.join(self.sys_root, "class", "infiniband", ibdev), ib)

    def add_vfs(self, pf_bdf: str, vf_bdfs: Sequence[str]) -> None:
        """SR-IOV VFs of ``pf_bdf`` (virtfn0.. in the given order), next to the PF as the kernel puts them."""
        pf = self._devs[pf_bdf]
        for n, vf_bdf in enumerate(vf_bdfs):
            vf = self.add(vf_bdf, root=pf.root, bridges=pf.bridges, numa_node=pf.numa_node, pci_class=pf.pci_class,
                          vendor=pf.vendor, device=VF_DEVICE)
            _link(os.path.join(vf, "physfn"), pf.path)
            _link(os.path.join(pf.path, f"virtfn{n}"), vf)
        _write(os.path.join(pf.path, "sriov_numvfs"), f"{len(vf_bdfs)}\n")
        _write(os.path.join(pf.path, "sriov_totalvfs"), f"{len(vf_bdfs)}\n")

    def add_verbs(self, bdf: str, uverbs: str, dev: str) -> None:
        """The verbs char device of an RDMA function: ``<bdf>/infiniband_verbs/uverbsN/dev`` ("231:192")."""
        _write(os.path.join(self._devs[bdf].path, "infiniband_verbs", uverbs, "dev"), dev + "\n")

    def _device(self, bdf: str, path: str, dev: _Dev, device: str) -> None:
        self._devs[bdf] = dev
        files = {"class": dev.pci_class, "vendor": dev.vendor, "device": device}
        if dev.numa_node is not None:
            files["numa_node"] = str(dev.numa_node)
        for name, value in files.items():
            _write(os.path.join(path, name), value + "\n")
        _link(os.path.join(self.sys_root, "bus", "pci", "devices", bdf), path)


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _link(link: str, target: str) -> None:
    """A relative symlink ``link`` -> ``target``, as sysfs has them."""
    os.makedirs(os.path.dirname(link), exist_ok=True)
    rel = os.path.relpath(target, os.path.dirname(link))
    if os.path.islink(link) and os.readlink(link) == rel:
        return                    # a bridge shared by two devices added one after the other
    os.symlink(rel, link)
