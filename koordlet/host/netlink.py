"""Traffic control over netlink (pyroute2): the egress interface, and HTB qdiscs, classes and filters on it.

The only code that talks rtnetlink. No ``tc``/``ip``/``iptables`` commands are run: everything is a netlink
request, so a host without iproute2 works, and nothing parses human-readable tool output.

What the net QoS strategy needs, typed (upstream ``pkg/koordlet/runtimehooks/hooks/tc/tc_linux.go: tcPlugin``):

- :meth:`TC.default_link` - the link of the first IPv4 default route (upstream's "egress interface").
- :meth:`TC.read` - the root qdisc, the HTB classes and the filters of one link as the kernel reports them,
  decoded into plain dataclasses (rates in bytes/s, HTB buffers in psched ticks, u32 source-IP matches).
- add/replace/delete of the HTB root qdisc, HTB classes, ``u32 match ip src`` filters and the ``cgroup``
  classifier. Every request that changes the kernel counts in :attr:`TC.writes` (the strategy's "no writes when
  nothing changed" is checked against this counter).

Units: HTB takes rate/ceil in **bytes/s** (64-bit rates above 2^32-1 go in TCA_HTB_RATE64/CEIL64, pyroute2 does
this); burst/cburst are given to pyroute2 in bytes and sent as transmit times in psched ticks, which is also what
the kernel reports back. :func:`htb_class` computes both the way ``tc`` does (burst = rate/HZ + MTU), with
upstream's floor of 200 on the raw buffer fields, and an explicit quantum (rate/r2q clamped to 1000..200000, what
the kernel would pick) so the kernel never logs "quantum of class is small".

pyroute2 quirks handled here: its u32 selector decoder reads the keys 4 bytes early (0.9.7), so keys are decoded
from the raw attribute; it has no ``cgroup`` classifier module, so a minimal one (empty TCA_OPTIONS, as ``tc``
sends) is registered under that kind if pyroute2 has none.
"""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import os
import socket
import struct
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koordlet.host.cgroup import Cgroups, CgroupVersion
from koordlet.host.paths import HostPaths

if TYPE_CHECKING:
    from pyroute2 import IPRoute

TC_H_ROOT = 0xFFFFFFFF
ETH_P_IP = 0x0800
MTU = 1600                       # tc's and pyroute2's default for HTB burst computation
MIN_BUFFER_TICKS = 200           # upstream's floor for the HTB buffer / cbuffer fields
R2Q = 10                         # HTB's default rate-to-quantum divisor
QUANTUM_MIN, QUANTUM_MAX = 1000, 200000
_U32_KEY = struct.Struct("!II")  # tc_u32_key: __be32 mask, __be32 val, then int off, int offmask (host order)
_U32_OFF = struct.Struct("=ii")
_U32_SEL_HEADER = 4 + 16         # nla header + struct tc_u32_sel before the keys
IP_SRC_OFFSET = 12               # offset of the source address in the IPv4 header


def handle(major: int, minor: int) -> int:
    return (major << 16) | minor


def handle_str(h: int) -> str:
    """``1:3`` notation (minor in hex, as tc prints it)."""
    if h == TC_H_ROOT:
        return "root"
    return f"{h >> 16:x}:{h & 0xFFFF:x}"


class NetlinkFailure(OSError):
    """A netlink request the kernel (or pyroute2) refused; ``errno`` is the kernel's, ``what`` the request."""
    what: str = ""


@dataclass(frozen=True, slots=True)
class Link:
    index: int
    name: str


@dataclass(frozen=True, slots=True)
class Qdisc:
    kind: str
    handle: int
    parent: int
    default_class: int | None = None     # HTB defcls (minor), None for other kinds


@dataclass(frozen=True, slots=True)
class HTBClass:
    """An HTB class as the kernel reports it (and as we want it): rates in bytes/s, buffers in psched ticks.
    A class directly under the qdisc has ``parent`` TC_H_ROOT (that is how the kernel reports it)."""
    handle: int
    parent: int
    rate: int
    ceil: int
    prio: int
    buffer: int = 0
    cbuffer: int = 0
    quantum: int = 0

    def describe(self) -> str:
        return (f"class={handle_str(self.handle)} parent={handle_str(self.parent)} rate={self.rate}B/s "
                f"ceil={self.ceil}B/s prio={self.prio}")


@dataclass(frozen=True, slots=True)
class Filter:
    """A classifier instance on a qdisc. ``src_ip`` is set for a u32 filter that is exactly ``match ip src
    <a.b.c.d>/32``; ``classid`` is the flowid it sends packets to (None for cgroup / structural u32 nodes)."""
    parent: int
    prio: int
    handle: int
    kind: str
    protocol: int = ETH_P_IP
    classid: int | None = None
    src_ip: str | None = None

    def describe(self) -> str:
        what = f" src={self.src_ip}" if self.src_ip else ""
        flow = f" flowid={handle_str(self.classid)}" if self.classid is not None else ""
        return f"filter={self.kind} pref={self.prio} handle={self.handle:#x}{what}{flow}"


@dataclass(frozen=True, slots=True)
class TCState:
    link: Link
    root: Qdisc | None
    classes: tuple[HTBClass, ...]
    filters: tuple[Filter, ...]          # on the root qdisc (parent = its handle)


# --------------------------------------------------------------------------------------------------------------
# HTB parameters, computed exactly as pyroute2 will send them

def _xmittime(rate: int, size: float) -> int:
    from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime
    return int(calc_xmittime(rate, size))


def _hz() -> float:
    from pyroute2.netlink.rtnl.tcmsg.common import get_hz
    return float(get_hz())


def htb_burst(rate: int) -> int:
    """Burst in bytes for a rate in bytes/s: tc's default (rate/HZ + MTU), raised until the transmit time is at
    least MIN_BUFFER_TICKS (upstream's floor on the raw field; it matters from ~1 Gbit/s up)."""
    burst = int(rate / _hz() + MTU)
    while _xmittime(rate, burst) < MIN_BUFFER_TICKS:
        burst = burst * 2
    return burst


def htb_class(handle_: int, parent: int, rate: int, ceil: int, prio: int) -> HTBClass:
    """The class we want, with the buffer/cbuffer ticks and quantum the kernel will report once it is set."""
    rate, ceil = max(1, int(rate)), max(1, int(ceil))
    quantum = min(max(rate // R2Q, QUANTUM_MIN), QUANTUM_MAX)
    return HTBClass(handle_, parent, rate, ceil, prio, _xmittime(rate, htb_burst(rate)),
                    _xmittime(ceil, htb_burst(ceil)), quantum)


# --------------------------------------------------------------------------------------------------------------
# decoding dumps

def _decode_u32_src(options: Any) -> tuple[int | None, str | None]:
    """(classid, src ip) of a u32 node; src ip only when the selector is exactly one /32 key at offset 12."""
    classid = options.get_attr("TCA_U32_CLASSID")
    sel = options.get_attr("TCA_U32_SEL")
    if sel is None:
        return classid, None
    try:
        nkeys = int(sel["nkeys"])
        base = sel.offset + _U32_SEL_HEADER
        keys = [(*_U32_KEY.unpack_from(sel.data, base + 16 * i), *_U32_OFF.unpack_from(sel.data, base + 16 * i + 8))
                for i in range(nkeys)]
    except (KeyError, TypeError, struct.error, AttributeError):
        return classid, None
    if len(keys) == 1:
        mask, val, off, offmask = keys[0]
        if mask == 0xFFFFFFFF and off == IP_SRC_OFFSET and offmask == 0:
            return classid, str(ipaddress.IPv4Address(val))
    return classid, None


def _u32_key(ip: str) -> str:
    return f"0x{int(ipaddress.IPv4Address(ip)):08x}/0xffffffff+{IP_SRC_OFFSET}"


def _cgroup_plugin() -> None:
    """Teach pyroute2 the ``cgroup`` classifier (kind only, empty options) if it does not know it."""
    from pyroute2.netlink import nla
    from pyroute2.netlink.rtnl.tcmsg import plugins
    if "cgroup" in plugins:
        return

    class options(nla):                     # type: ignore[misc]   # pyroute2 has no types: nla is Any
        nla_map = (("TCA_CGROUP_UNSPEC", "none"), ("TCA_CGROUP_ACT", "hex"), ("TCA_CGROUP_POLICE", "hex"),
                   ("TCA_CGROUP_EMATCHES", "hex"))

    def get_parameters(kwarg: dict[str, Any]) -> dict[str, Any]:
        return {"attrs": []}

    def fix_request(request: dict[str, Any]) -> None:
        request["info"] = socket.htons(request.get("protocol", 0) & 0xFFFF) | ((request.get("prio", 0) << 16)
                                                                           & 0xFFFF0000)

    module = types.ModuleType("koordlet_cls_cgroup")
    module.options = options                    # type: ignore[attr-defined]
    module.get_parameters = get_parameters      # type: ignore[attr-defined]
    module.fix_request = fix_request            # type: ignore[attr-defined]
    plugins.setdefault("cgroup", module)


def _failure(e: Exception, what: str) -> NetlinkFailure:
    code = getattr(e, "code", None)
    if not isinstance(code, int):
        code = e.errno if isinstance(e, OSError) and e.errno else errno.EIO
    failure = NetlinkFailure(code, os.strerror(code))
    failure.what = what
    return failure


# --------------------------------------------------------------------------------------------------------------
# the kernel interface

class TC:
    """rtnetlink for tc, optionally inside a named network namespace (``/run/netns/<name>``, tests and benches).

    The socket opens on first use (constructors stay cheap and never fail) and is reopened after an error.
    Not thread-safe: one owner (the reconciler thread).
    """

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self.writes = 0                  # requests that change the kernel, successful or not
        self._ipr: IPRoute | None = None

    # --- plumbing ----------------------------------------------------------------------------------------------

    def _sock(self) -> IPRoute:
        if self._ipr is None:
            try:
                from pyroute2 import IPRoute
                # flags=0: a missing namespace is an error (pyroute2 would create it by default)
                self._ipr = IPRoute(netns=self.netns, flags=0) if self.netns else IPRoute()
            except Exception as e:          # ImportError, OSError, NetlinkError: all "netlink unusable"
                raise _failure(e, f"open rtnetlink{' in netns ' + self.netns if self.netns else ''}") from e
        return self._ipr

    def close(self) -> None:
        if self._ipr is not None:
            try:
                self._ipr.close()
            except Exception:
                pass
            self._ipr = None

    def _call(self, what: str, fn: str, *args: Any, write: bool = False, **kwargs: Any) -> Any:
        ipr = self._sock()
        if write:
            self.writes += 1
        try:
            return getattr(ipr, fn)(*args, **kwargs)
        except Exception as e:
            if not hasattr(e, "code"):      # not a kernel answer: the socket may be unusable, start over
                self.close()
            raise _failure(e, what) from e

    # --- links -------------------------------------------------------------------------------------------------

    def default_link(self) -> Link | None:
        """The link of the first IPv4 default route in the main table (multipath: its first hop)."""
        for route in self._call("list default routes", "get_default_routes", family=socket.AF_INET):
            oif = route.get_attr("RTA_OIF")
            if oif is None:
                hops = route.get_attr("RTA_MULTIPATH") or []
                oif = hops[0]["oif"] if hops else None
            if oif:
                return self.link_by_index(int(oif))
        return None

    def link_by_index(self, index: int) -> Link | None:
        try:
            links = self._call(f"get link {index}", "get_links", index)
        except NetlinkFailure as e:
            if e.errno in (errno.ENODEV, errno.ENOENT):
                return None
            raise
        for link in links:
            return Link(int(link["index"]), str(link.get_attr("IFLA_IFNAME")))
        return None

    def link_by_name(self, name: str) -> Link | None:
        found = self._call(f"look up link {name}", "link_lookup", ifname=name)
        return Link(int(found[0]), name) if found else None

    # --- reading -----------------------------------------------------------------------------------------------

    def root_qdisc(self, link: Link) -> Qdisc | None:
        for q in self._call(f"dump qdiscs dev={link.name}", "get_qdiscs", link.index):
            if q["parent"] != TC_H_ROOT:
                continue
            kind = str(q.get_attr("TCA_KIND"))
            default = None
            if kind == "htb":
                opts = q.get_attr("TCA_OPTIONS")
                init = opts.get_attr("TCA_HTB_INIT") if opts is not None else None
                default = int(init["defcls"]) if init is not None else None
            return Qdisc(kind, int(q["handle"]), TC_H_ROOT, default)
        return None

    def read(self, link: Link) -> TCState:
        """Root qdisc, HTB classes of the link and the filters attached to the root qdisc."""
        root = self.root_qdisc(link)
        classes: list[HTBClass] = []
        filters: list[Filter] = []
        if root is not None and root.kind == "htb":
            for c in self._call(f"dump classes dev={link.name}", "get_classes", link.index):
                if c.get_attr("TCA_KIND") != "htb":
                    continue
                opts = c.get_attr("TCA_OPTIONS")
                parms = opts.get_attr("TCA_HTB_PARMS") if opts is not None else None
                if parms is None:
                    continue
                rate = opts.get_attr("TCA_HTB_RATE64") or parms["rate"]
                ceil = opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]
                classes.append(HTBClass(int(c["handle"]), int(c["parent"]), int(rate), int(ceil), int(parms["prio"]),
                                        int(parms["buffer"]), int(parms["cbuffer"]), int(parms["quantum"])))
            for f in self._call(f"dump filters dev={link.name}", "get_filters", link.index, parent=root.handle):
                kind = str(f.get_attr("TCA_KIND"))
                info = int(f["info"])
                prio, protocol = info >> 16, socket.ntohs(info & 0xFFFF)
                classid: int | None = None
                src: str | None = None
                opts = f.get_attr("TCA_OPTIONS")
                if kind == "u32":
                    if opts is None:
                        continue                 # the per-prio header entry: structure, not a rule
                    classid, src = _decode_u32_src(opts)
                    if classid is None:
                        continue                 # a hash table node (divisor): structure, not a rule
                filters.append(Filter(int(f["parent"]), prio, int(f["handle"]), kind, protocol, classid, src))
        return TCState(link, root, tuple(classes), tuple(filters))

    # --- writing -----------------------------------------------------------------------------------------------

    def replace_htb_root(self, link: Link, handle_: int, default_minor: int) -> None:
        """Put an HTB qdisc at the root (grafted over whatever is there; the old one's classes go with it)."""
        self._call(f"replace root qdisc dev={link.name}", "tc", "replace", "htb", link.index, handle_,
                   parent=TC_H_ROOT, default=default_minor, write=True)

    def delete_root(self, link: Link, handle_: int) -> None:
        """Delete the root qdisc (the kernel puts its default qdisc back)."""
        self._call(f"delete root qdisc dev={link.name}", "tc", "del", index=link.index, handle=handle_,
                   parent=TC_H_ROOT, write=True)

    def add_class(self, link: Link, cls: HTBClass, replace: bool = False) -> None:
        rate, ceil = cls.rate, cls.ceil
        parent = cls.handle & 0xFFFF0000 if cls.parent == TC_H_ROOT else cls.parent
        self._call(f"{'change' if replace else 'add'} htb {cls.describe()} dev={link.name}", "tc",
                   "replace-class" if replace else "add-class", "htb", link.index, cls.handle, parent=parent,
                   rate=rate, ceil=ceil, prio=cls.prio, burst=htb_burst(rate), cburst=htb_burst(ceil),
                   quantum=cls.quantum or min(max(rate // R2Q, QUANTUM_MIN), QUANTUM_MAX), write=True)

    def delete_class(self, link: Link, cls: HTBClass) -> None:
        parent = cls.handle & 0xFFFF0000 if cls.parent == TC_H_ROOT else cls.parent
        self._call(f"delete {cls.describe()} dev={link.name}", "tc", "del-class", index=link.index,
                   handle=cls.handle, parent=parent, write=True)

    def add_u32_src(self, link: Link, parent: int, prio: int, ip: str, classid: int) -> None:
        """``u32 match ip src <ip>/32 flowid <classid>`` at pref ``prio`` (the kernel picks the node handle)."""
        self._call(f"add u32 filter src={ip} flowid={handle_str(classid)} dev={link.name}", "tc", "add-filter",
                   "u32", link.index, parent=parent, prio=prio, protocol=ETH_P_IP, target=classid,
                   keys=[_u32_key(ip)], write=True)

    def add_cgroup(self, link: Link, parent: int, prio: int, handle_: int) -> None:
        """The ``cgroup`` classifier: a socket's net_cls.classid picks its class (host-network traffic only)."""
        _cgroup_plugin()
        self._call(f"add cgroup filter pref={prio} dev={link.name}", "tc", "add-filter", "cgroup", link.index,
                   handle_, parent=parent, prio=prio, protocol=ETH_P_IP, write=True)

    def delete_filter(self, link: Link, f: Filter) -> None:
        info = (f.prio << 16) | socket.htons(f.protocol & 0xFFFF)
        self._call(f"delete {f.describe()} dev={link.name}", "tc", "del-filter", index=link.index, handle=f.handle,
                   parent=f.parent, info=info, write=True)


# --------------------------------------------------------------------------------------------------------------
# doctor

def net_cls_mounted(cgroups: Cgroups) -> bool:
    """cgroup v1 ``net_cls`` is mounted (the only place net_cls.classid exists; v2 has no such controller)."""
    return cgroups.version is CgroupVersion.V1 and cgroups.has_file("net_cls", "", "net_cls.classid")


def supported(paths: HostPaths, cgroups: Cgroups, netns: str | None = None,
              interface: str | None = None) -> tuple[bool, str]:
    """Can tc net QoS work here, and how will pods be classified? Read-only (no netlink writes)."""
    psched = paths.proc("net", "psched")
    if not os.path.exists(psched):
        return False, f"{psched} missing: no traffic control in this kernel"
    if importlib.util.find_spec("pyroute2") is None:
        return False, "pyroute2 is not installed"
    tc = TC(netns)
    try:
        link = tc.link_by_name(interface) if interface else tc.default_link()
        if link is None:
            return False, (f"interface {interface} not found" if interface else
                           "no IPv4 default route: no egress interface to shape")
        root = tc.root_qdisc(link)
    except NetlinkFailure as e:
        return False, f"rtnetlink unusable: {e.strerror}"
    finally:
        tc.close()
    cls = ("net_cls mounted: host-network pods classified by net_cls.classid (needs the kernel's cgroup "
           "classifier)" if net_cls_mounted(cgroups) else
           "no net_cls (cgroup v2 or not mounted): host-network pods are not classified")
    qdisc = f"{root.kind} {handle_str(root.handle)}" if root is not None else "none"
    return True, (f"egress {link.name} (index {link.index}, root qdisc {qdisc}); pod traffic classified by "
                  f"source IP (u32); {cls}")

