"""A fake of the kernel's resctrl filesystem in a temporary directory: of the kernel, not of our code.

The agent reads and writes the files of this tree with its real code (the executor writes ``schemata`` with
O_TRUNC and appends to ``tasks``); :class:`FakeResctrl` also implements the three calls of
:class:`koordlet.host.resctrl.ResctrlKernel` (mount, mkdir and rmdir of groups) with the kernel's side effects.
A plain file cannot react to a write, so the kernel's processing of writes happens in :meth:`FakeResctrl.apply`,
which tests call after each agent cycle (a cycle writes a group's schemata at most once, so nothing is lost):

- ``schemata``: a write must end with ``\\n``; each line is ``NAME:id=value;id=value``. Every line is validated
  first (known resource, known domain ids, cache masks within ``cbm_mask``, contiguous unless ``sparse_masks``,
  at least ``min_cbm_bits`` bits; MB within ``[min_bandwidth, max]``), then all are applied, each changing only
  its resource and the domains it names; an invalid write changes nothing and is recorded in ``violations``
  (the kernel answers EINVAL). MB values are rounded up to ``bandwidth_gran`` as the kernel does, and the
  rounding is recorded too (the agent must never depend on it). After processing, the file shows the kernel's
  format again: all resources, names right-aligned, masks zero-padded hex, MB space-padded, to the widest width.
- ``tasks``: appended ids (one per line) move those threads into the group, out of any other group; anything but
  an append is a violation.
- ``mkdir``: a new group gets ``schemata`` (every way, unthrottled MB), an empty ``tasks``, ``cpus``,
  ``cpus_list``, ``mode`` and ``mon_groups``/``mon_data``; ENOSPC once ``num_closids - 1`` groups exist (the root
  group holds CLOSID 0; the limit is the smallest ``num_closids`` of the resources).
- ``rmdir``: the group's threads go back to the root group.
- Monitoring (a CPU with ``cqm_llc`` plus ``cqm_occup_llc`` / ``cqm_mbm_total`` / ``cqm_mbm_local``):
  ``info/L3_MON/{mon_features,num_rmids,max_threshold_occupancy}``, and in the root group and every group made
  by ``mkdir`` a ``mon_data/mon_L3_<id, two digits>/`` per L3 domain with one file per event the CPU has, each
  printing ``%llu\n`` or ``Unavailable\n`` (an RMID the hardware has no value for yet). A new group's counters
  start at 0. Tests move the hardware with :meth:`FakeResctrl.set_monitor` (occupancy, or anything absolute)
  and :meth:`FakeResctrl.traffic` (the MBM byte counters only ever grow). Without ``cqm_llc`` there is no
  ``mon_data`` and no ``mon_groups``, as on such a CPU.

Profiles: :data:`INTEL` (cbm ``7ff`` = 11 ways, 16 CLOSIDs, MB percent with granularity 10, minimum 10) and
:data:`AMD` (cbm ``ffff``, ``min_cbm_bits`` 0, sparse masks, MB in 1/8 GB/s units with 2048 = unlimited).
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass, field, replace

from koordlet.host.paths import HostPaths
from koordlet.host.resctrl import ResctrlKernel


@dataclass(frozen=True)
class Profile:
    vendor: str
    cbm: int
    min_cbm_bits: int
    l3_closids: int
    cache_ids: tuple[int, ...]
    mb: bool = True
    mb_gran: int = 10
    mb_min: int = 10
    mb_max: int = 100
    mb_closids: int = 16
    mb_width: int = 3               # the kernel's data_width for MB (Intel 3, AMD 4)
    sparse: bool = False
    cdp: bool = False               # code/data prioritisation: L3CODE + L3DATA instead of L3
    flags: tuple[str, ...] = ("cat_l3", "mba", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local")
    num_rmids: int = 176

    @property
    def cache_names(self) -> tuple[str, ...]:
        return ("L3CODE", "L3DATA") if self.cdp else ("L3",)

    @property
    def num_closids(self) -> int:
        return min(self.l3_closids, self.mb_closids) if self.mb else self.l3_closids

    @property
    def mon_events(self) -> tuple[str, ...]:
        """The L3 monitoring events the kernel offers for these CPU flags (its mon_features order)."""
        if "cqm_llc" not in self.flags:
            return ()
        return tuple(event for flag, event in (("cqm_occup_llc", "llc_occupancy"), ("cqm_mbm_total", "mbm_total_bytes"),
                                               ("cqm_mbm_local", "mbm_local_bytes")) if flag in self.flags)

    def with_(self, **changes: object) -> Profile:
        return replace(self, **changes)  # type: ignore[arg-type]


INTEL = Profile("GenuineIntel", 0x7FF, 1, 16, (0, 1))
AMD = Profile("AuthenticAMD", 0xFFFF, 0, 16, (0, 1, 2, 3), mb_gran=1, mb_min=0, mb_max=2048, mb_width=4,
              sparse=True)


@dataclass
class Group:
    values: dict[str, dict[int, int]]
    shown: str = ""                 # schemata text as last rendered
    tasks_shown: str = ""


@dataclass
class FakeResctrl(ResctrlKernel):
    paths: HostPaths
    profile: Profile = INTEL
    mounted: bool = True
    write_cpuinfo: bool = True
    root: str = field(init=False)
    groups: dict[str, Group] = field(init=False, default_factory=dict)     # "" = the root group
    tids: dict[int, str] = field(init=False, default_factory=dict)         # thread -> group
    violations: list[str] = field(init=False, default_factory=list)
    rounded: list[str] = field(init=False, default_factory=list)           # MB writes the kernel rounded up
    writes: list[tuple[str, str]] = field(init=False, default_factory=list)     # accepted (group, text)
    calls: list[tuple[str, str]] = field(init=False, default_factory=list)      # (mount | mkdir | rmdir, name)
    # group -> L3 domain -> event -> value (None: the kernel prints "Unavailable")
    monitor: dict[str, dict[int, dict[str, int | None]]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.paths.sys_fs("resctrl")
        os.makedirs(self.root, exist_ok=True)
        if self.write_cpuinfo:
            os.makedirs(self.paths.proc_root, exist_ok=True)
            with open(self.paths.proc("cpuinfo"), "w") as f:
                for cpu in range(2):
                    f.write(f"processor\t: {cpu}\nvendor_id\t: {self.profile.vendor}\n"
                            f"flags\t\t: fpu sse2 ht {' '.join(self.profile.flags)}\n\n")
        if self.mounted:
            self._build()

    # --- the kernel calls (ResctrlKernel's interface) ---------------------------------------------------

    def mount(self, root: str) -> None:
        self.calls.append(("mount", root))
        if os.path.realpath(root) != os.path.realpath(self.root):
            raise OSError(errno.EINVAL, "fake resctrl: wrong mount point")
        if self.mounted:
            raise OSError(errno.EBUSY, "already mounted")
        if "cat_l3" not in self.profile.flags:
            raise OSError(errno.ENODEV, "no such device")
        self.mounted = True
        self._build()

    def make_group(self, root: str, name: str) -> None:
        self.calls.append(("mkdir", name))
        self._check_root(root)
        if not name or "/" in name or name in ("info", "mon_groups", "mon_data"):
            raise OSError(errno.EINVAL, f"invalid group name {name!r}")
        if name in self.groups:
            raise FileExistsError(errno.EEXIST, "File exists", os.path.join(self.root, name))
        if len(self.groups) >= self.profile.num_closids:         # the root group holds one CLOSID
            raise OSError(errno.ENOSPC, "No space left on device")
        path = os.path.join(self.root, name)
        os.mkdir(path, 0o755)
        self._file(os.path.join(path, "cpus"), "0\n")
        self._file(os.path.join(path, "cpus_list"), "\n")
        self._file(os.path.join(path, "mode"), "shareable\n")
        self.groups[name] = Group(self._defaults())
        self._render(name)
        self._new_monitor(name)

    def remove_group(self, root: str, name: str) -> None:
        self.calls.append(("rmdir", name))
        self._check_root(root)
        if name not in self.groups or not name:
            if not name:
                raise OSError(errno.EPERM, "the root group cannot be removed")
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.path.join(self.root, name))
        self.apply()                        # pending task moves land before the group goes
        for tid, group in self.tids.items():
            if group == name:
                self.tids[tid] = ""
        del self.groups[name]
        self.monitor.pop(name, None)
        shutil.rmtree(os.path.join(self.root, name))
        self._render("")

    # --- test helpers ------------------------------------------------------------------------------

    def add_threads(self, *tids: int) -> None:
        """Threads that exist on the host (they start in the root group)."""
        for t in tids:
            self.tids.setdefault(t, "")
        if self.mounted:
            self._render("")

    def group_of(self, tid: int) -> str | None:
        return self.tids.get(tid)

    def members(self, name: str) -> set[int]:
        return {t for t, g in self.tids.items() if g == name}

    def schemata(self, name: str) -> str:
        with open(os.path.join(self.root, name, "schemata")) as f:
            return f.read()

    def set_values(self, name: str, resource: str, values: dict[int, int]) -> None:
        """Another writer changes a group (drift the agent must repair)."""
        self.groups[name].values[resource].update(values)
        self._render(name)

    def set_monitor(self, name: str, cache_id: int, **values: int | None) -> None:
        """The hardware's monitoring values of a group on one L3 domain (``llc_occupancy=...``,
        ``mbm_total_bytes=...``; None: the kernel prints Unavailable). Only events the CPU has may be set."""
        domain = self.monitor[name][cache_id]
        for event, value in values.items():
            if event not in domain:
                raise KeyError(f"fake resctrl: this CPU has no monitoring event {event!r}")
            domain[event] = value
        self._render_monitor(name)

    def traffic(self, name: str, cache_id: int, total: int, local: int = 0) -> None:
        """Memory traffic of a group's tasks on one domain: the MBM byte counters grow by it."""
        domain = self.monitor[name][cache_id]
        for event, add in (("mbm_total_bytes", total), ("mbm_local_bytes", local)):
            if event in domain:
                domain[event] = (domain[event] or 0) + add
        self._render_monitor(name)

    def unmount(self) -> None:
        """Unmount: the mount point stays as an empty directory."""
        shutil.rmtree(self.root)
        os.makedirs(self.root)
        self.groups.clear()
        self.monitor.clear()
        self.tids = dict.fromkeys(self.tids, "")
        self.mounted = False

    # --- processing writes ---------------------------------------------------------------------------

    def apply(self) -> None:
        """Process what the agent wrote since the last call, as the kernel does at write time."""
        if not self.mounted:
            return
        for name, group in list(self.groups.items()):
            gdir = os.path.join(self.root, name)
            text = self._read(os.path.join(gdir, "schemata"))
            if text is not None and text != group.shown:
                self._schemata_write(name, group, text)
            tasks = self._read(os.path.join(gdir, "tasks"))
            if tasks is not None and tasks != group.tasks_shown:
                if not tasks.startswith(group.tasks_shown):
                    self.violations.append(f"{name or '/'}/tasks: overwritten instead of appended: {tasks!r}")
                else:
                    for token in tasks[len(group.tasks_shown):].split():
                        try:
                            tid = int(token)
                        except ValueError:
                            self.violations.append(f"{name or '/'}/tasks: not a thread id: {token!r}")
                            continue
                        self.tids[tid] = name
        for name in self.groups:
            self._render(name)

    def _schemata_write(self, name: str, group: Group, text: str) -> None:
        where = f"{name or '/'}/schemata"
        if not text.endswith("\n"):
            self.violations.append(f"{where}: write without a trailing newline: {text!r}")
            return
        staged: dict[str, dict[int, int]] = {}
        for line in text[:-1].split("\n"):
            res, sep, rest = line.partition(":")
            res = res.strip()
            if not sep or not rest:
                self.violations.append(f"{where}: line {line!r}: missing ':' or value")
                return
            if res not in group.values:
                self.violations.append(f"{where}: unknown resource {res!r}")
                return
            for pair in rest.rstrip(";").split(";"):
                key, eq, raw = pair.strip().partition("=")
                if not eq or not key.strip().isdigit() or int(key) not in group.values[res]:
                    self.violations.append(f"{where}: {res}: bad or unknown domain in {pair!r}")
                    return
                problem, value = self._validate(res, raw.strip())
                if problem:
                    self.violations.append(f"{where}: {res}:{key}: {problem}")
                    return
                staged.setdefault(res, {})[int(key)] = value
        for res, values in staged.items():
            group.values[res].update(values)
        self.writes.append((name, text))

    def _validate(self, res: str, raw: str) -> tuple[str | None, int]:
        p = self.profile
        if res == "MB":
            try:
                bw = int(raw, 10)
            except ValueError:
                return f"invalid MB value {raw!r}", 0
            if not p.mb_min <= bw <= p.mb_max:
                return f"MB value {bw} out of range [{p.mb_min},{p.mb_max}]", 0
            stored = -(-bw // p.mb_gran) * p.mb_gran
            if stored != bw:
                self.rounded.append(f"MB {bw} stored as {stored}")
            return None, stored
        try:
            cbm = int(raw, 16)
        except ValueError:
            return f"non-hex mask {raw!r}", 0
        if cbm & ~p.cbm:
            return f"mask {cbm:x} out of range (cbm_mask {p.cbm:x})", 0
        run = cbm >> ((cbm & -cbm).bit_length() - 1) if cbm else 0
        if not p.sparse and run & (run + 1):
            return f"mask {cbm:x} has non-consecutive 1-bits", 0
        if bin(cbm).count("1") < p.min_cbm_bits:
            return f"need at least {p.min_cbm_bits} bits in mask {cbm:x}", 0
        return None, cbm

    # --- rendering -----------------------------------------------------------------------------------

    def _defaults(self) -> dict[str, dict[int, int]]:
        p = self.profile
        out = {name: dict.fromkeys(p.cache_ids, p.cbm) for name in p.cache_names}
        if p.mb:
            out["MB"] = dict.fromkeys(p.cache_ids, p.mb_max)
        return out

    def _render(self, name: str) -> None:
        p = self.profile
        group = self.groups[name]
        names = list(group.values)
        name_w = max(len(n) for n in names)
        data_w = max((p.cbm.bit_length() + 3) // 4, p.mb_width if p.mb else 0)
        lines = []
        for res in names:
            fmt = (lambda i, v: f"{i}={v:{data_w}d}") if res == "MB" else (lambda i, v: f"{i}={v:0{data_w}x}")
            lines.append(f"{res:>{name_w}}:" + ";".join(fmt(i, v) for i, v in sorted(group.values[res].items())))
        group.shown = "\n".join(lines) + "\n"
        self._file(os.path.join(self.root, name, "schemata"), group.shown)
        members = sorted(t for t, g in self.tids.items() if g == name)
        group.tasks_shown = "".join(f"{t}\n" for t in members)
        self._file(os.path.join(self.root, name, "tasks"), group.tasks_shown)

    def _build(self) -> None:
        p = self.profile
        info = os.path.join(self.root, "info")
        for cache in p.cache_names:
            d = os.path.join(info, cache)
            self._file(os.path.join(d, "cbm_mask"), f"{p.cbm:x}\n")
            self._file(os.path.join(d, "min_cbm_bits"), f"{p.min_cbm_bits}\n")
            self._file(os.path.join(d, "num_closids"), f"{p.l3_closids}\n")
            self._file(os.path.join(d, "shareable_bits"), "0\n")
            if p.sparse:
                self._file(os.path.join(d, "sparse_masks"), "1\n")
        if p.mb:
            d = os.path.join(info, "MB")
            self._file(os.path.join(d, "bandwidth_gran"), f"{p.mb_gran}\n")
            self._file(os.path.join(d, "min_bandwidth"), f"{p.mb_min}\n")
            self._file(os.path.join(d, "num_closids"), f"{p.mb_closids}\n")
            self._file(os.path.join(d, "delay_linear"), "1\n" if p.vendor == "GenuineIntel" else "0\n")
        self._file(os.path.join(info, "last_cmd_status"), "ok\n")
        if p.mon_events:
            d = os.path.join(info, "L3_MON")
            self._file(os.path.join(d, "mon_features"), "".join(f"{e}\n" for e in p.mon_events))
            self._file(os.path.join(d, "num_rmids"), f"{p.num_rmids}\n")
            self._file(os.path.join(d, "max_threshold_occupancy"), "270336\n")
        self._file(os.path.join(self.root, "cpus"), "3\n")
        self.groups[""] = Group(self._defaults())
        self._render("")
        self._new_monitor("")

    def _new_monitor(self, name: str) -> None:
        """A group's monitoring files as the kernel makes them at mount (the root) or mkdir: counters at 0."""
        events = self.profile.mon_events
        if not events:
            return
        os.makedirs(os.path.join(self.root, name, "mon_groups"), exist_ok=True)
        self.monitor[name] = {cid: dict.fromkeys(events, 0) for cid in self.profile.cache_ids}
        self._render_monitor(name)

    def _render_monitor(self, name: str) -> None:
        for cid, values in self.monitor[name].items():
            d = os.path.join(self.root, name, "mon_data", f"mon_L3_{cid:02d}")
            for event, value in values.items():
                self._file(os.path.join(d, event), "Unavailable\n" if value is None else f"{value}\n")

    def _check_root(self, root: str) -> None:
        if not self.mounted or os.path.realpath(root) != os.path.realpath(self.root):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", root)

    @staticmethod
    def _file(path: str, text: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    @staticmethod
    def _read(path: str) -> str | None:
        try:
            with open(path) as f:
                return f.read()
        except FileNotFoundError:
            return None
