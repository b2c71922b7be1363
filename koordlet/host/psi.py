"""Pressure stall information (PSI): the kernel's ``*.pressure`` files of the node and of cgroups.

Facts: upstream ``pkg/koordlet/util/system/psi.go`` (``ParsePSIStats``, ``GetPSIByResource``). Each file has a ``some``
line and, on most kernels, a ``full`` line::

    some avg10=0.14 avg60=5.81 avg300=8.79 total=511464558
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

avgN is the percentage of wall time in the last N seconds in which some (resp. all non-idle) tasks were
stalled on the resource; total is the cumulative stall time in microseconds. Older kernels have no ``full``
line for cpu: that reads as ``full_supported=False`` with a zero ``full`` line, as upstream.

Where the files are: the node's in ``/proc/pressure/{cpu,memory,io}``; a cgroup's are ``cpu.pressure``,
``memory.pressure`` and ``io.pressure`` in its unified dir (v2) or, on cgroup v1, in its ``cpuacct`` dir — which
only Alibaba Cloud Linux/Anolis kernels with v1 PSI enabled provide (upstream's condition).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import dataclass

from koordlet.host.cgroup import Cgroups, CgroupVersion
from koordlet.host.fs import read_bytes
from koordlet.host.paths import HostPaths

#: upstream's psi_resource values → the cgroup file name; the node files are /proc/pressure/<name w/o suffix>
CGROUP_FILES: dict[str, str] = {"cpu": "cpu.pressure", "mem": "memory.pressure", "io": "io.pressure"}
NODE_FILES: dict[str, str] = {"cpu": "cpu", "mem": "memory", "io": "io"}
#: v1 subsystem that carries the pressure files (Anolis); ignored on v2
V1_SUBSYSTEM = "cpuacct"


@dataclass(frozen=True, slots=True)
class PSILine:
    avg10: float      # percent of the last 10 s
    avg60: float
    avg300: float
    total: int        # cumulative stall time, µs


ZERO_LINE = PSILine(0.0, 0.0, 0.0, 0)


@dataclass(frozen=True, slots=True)
class PSI:
    """One pressure file. ``full`` is ZERO_LINE when the kernel has no full line (``full_supported`` False)."""
    some: PSILine
    full: PSILine
    full_supported: bool


_PREFIXES = (b"avg10=", b"avg60=", b"avg300=", b"total=")


def _parse_line(line: bytes, fields: list[bytes]) -> PSILine:
    if len(fields) != 5 or not all(f.startswith(p) for f, p in zip(fields[1:], _PREFIXES, strict=True)):
        raise ValueError(f"PSI line {line.decode('utf-8', 'replace')!r}: expected "
                         f"'{fields[0].decode('utf-8', 'replace')} avg10=F avg60=F avg300=F total=N'")
    try:
        avg = (float(fields[1][6:]), float(fields[2][6:]), float(fields[3][7:]))
        total = int(fields[4][6:])
    except ValueError:
        raise ValueError(f"PSI line {line.decode('utf-8', 'replace')!r}: value is not a number") from None
    # a percentage: NaN, inf, negatives or > 100 mean this is not the kernel's format
    if not all(0.0 <= a <= 100.0 for a in avg) or total < 0:
        raise ValueError(f"PSI line {line.decode('utf-8', 'replace')!r}: value out of range")
    return PSILine(avg[0], avg[1], avg[2], total)


def parse_pressure(data: bytes | str) -> PSI:
    """Parse one pressure file. Blank lines are ignored; an unknown or malformed line, a repeated line or a
    missing ``some`` line raises ValueError naming the line (upstream refuses unknown prefixes too)."""
    if isinstance(data, str):
        data = data.encode()
    some = full = None
    for line in data.splitlines():
        fields = line.split()          # any run of spaces/tabs; no regex on the hot path
        if not fields:
            continue
        kind = fields[0]
        if kind == b"some":
            if some is not None:
                raise ValueError(f"PSI line {line.decode('utf-8', 'replace')!r}: second 'some' line")
            some = _parse_line(line, fields)
        elif kind == b"full":
            if full is not None:
                raise ValueError(f"PSI line {line.decode('utf-8', 'replace')!r}: second 'full' line")
            full = _parse_line(line, fields)
        else:
            raise ValueError(f"PSI line {line.decode('utf-8', 'replace')!r}: unknown prefix "
                             f"{kind.decode('utf-8', 'replace')!r} (want some or full)")
    if some is None:
        raise ValueError("PSI file has no 'some' line")
    return PSI(some, full if full is not None else ZERO_LINE, full is not None)


def read_pressure(path: str) -> PSI:
    """One file; OSError propagates (FileNotFoundError: the cgroup is gone or the kernel has no such file;
    EOPNOTSUPP: PSI disabled at boot), ValueError is prefixed with the path."""
    data = read_bytes(path)
    try:
        return parse_pressure(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def cgroup_files(cgroups: Cgroups, rel: str) -> dict[str, str]:
    """{psi_resource: absolute path} of the three pressure files of a cgroup (v1: under cpuacct)."""
    return {res: cgroups.path(V1_SUBSYSTEM, rel, name) for res, name in CGROUP_FILES.items()}


def node_files(paths: HostPaths) -> dict[str, str]:
    return {res: paths.proc("pressure", name) for res, name in NODE_FILES.items()}


def cgroup_psi(cgroups: Cgroups, rel: str) -> dict[str, PSI]:
    """{"cpu", "mem", "io": PSI} of one cgroup; all three or an exception (as upstream's ReadPSI)."""
    return {res: read_pressure(path) for res, path in cgroup_files(cgroups, rel).items()}


def node_psi(paths: HostPaths) -> dict[str, PSI]:
    """{"cpu", "mem", "io": PSI} of the whole node from /proc/pressure."""
    return {res: read_pressure(path) for res, path in node_files(paths).items()}


def unsupported_errno(e: OSError) -> bool:
    """Reading a pressure file of a kernel booted with psi=0 fails with EOPNOTSUPP: a missing feature."""
    return e.errno in (errno.EOPNOTSUPP, errno.ENOTSUP)


def _unreadable(read: Callable[[], object], absent: Callable[[str], str]) -> str | None:
    """None when ``read()`` works, else why not (``absent(path)`` for a missing file)."""
    try:
        read()
    except FileNotFoundError as e:
        return absent(e.filename)
    except OSError as e:
        if unsupported_errno(e):
            return f"{e.filename}: PSI disabled in the kernel (psi=0)"
        return f"{e.filename} unreadable: {e.strerror}"
    except ValueError as e:
        return str(e)
    return None


def node_supported(paths: HostPaths) -> tuple[bool, str]:
    """Whether /proc/pressure can be read (actually read: psi=0 kernels have the files but refuse them)."""
    why = _unreadable(lambda: node_psi(paths), lambda path: f"{path or node_files(paths)['cpu']} absent: kernel "
                      "without PSI (CONFIG_PSI) or booted with psi=0")
    return why is None, why or f"{paths.proc('pressure')}/{{cpu,memory,io}} readable"


def cgroup_supported(cgroups: Cgroups, rel: str) -> tuple[bool, str]:
    """Whether the three pressure files of cgroup ``rel`` (the kubepods dir) can be read."""
    def absent(path: str) -> str:
        if cgroups.version is CgroupVersion.V1:
            return (f"cgroup v1: {path} absent; v1 cgroups have pressure files only on Alibaba Cloud Linux/Anolis "
                    "kernels with cgroup v1 PSI enabled")
        return f"{path} absent: no kubepods cgroup yet (kubelet not running?) or kernel without PSI"
    why = _unreadable(lambda: cgroup_psi(cgroups, rel), absent)
    where = "cpuacct/" if cgroups.version is CgroupVersion.V1 else ""
    return why is None, why or f"cgroup v{int(cgroups.version)} {where}{rel}/*.pressure readable"
