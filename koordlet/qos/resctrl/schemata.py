"""What each resctrl group's schemata should hold (pure): the L3 masks and MB values of a class group from the
NodeSLO, of a pod group from its annotation, and the lines of them the kernel does not hold yet (the rules are in
the package docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from koordlet.host.resctrl import MB_MAX_AMD, ResctrlInfo, parse_schemata, schemata_line
from koordlet.qos.resctrl.annotation import PodResctrlConfig

if TYPE_CHECKING:
    from koordlet.states.nodeslo.schema import ResctrlQOSCfg

AMD_MB_UNITS = 160             # 25 GB/s * 8 units per GB/s * 0.8

Schemata = dict[str, dict[int, int]]     # resource name -> domain id -> value


def l3_mask(cbm: int, start: int, end: int, min_bits: int = 1) -> tuple[int, bool]:
    """(mask, widened): the ways ``[ceil(ways*start/100), ceil(ways*end/100))`` of the root cbm, widened upwards
    to ``min_bits`` (at least 1) when the range rounds to fewer ways. ValueError for a cbm that is not a run of
    ones from bit 0 or a range outside ``0 <= start < end <= 100``."""
    if cbm <= 0 or (cbm + 1) & cbm:
        raise ValueError(f"illegal cbm {cbm:x}: not a contiguous mask from bit 0")
    if not 0 <= start < end <= 100:
        raise ValueError(f"illegal L3 range start={start} end={end}: want 0 <= start < end <= 100")
    ways = cbm.bit_length()
    lo, hi = -(-ways * start // 100), -(-ways * end // 100)       # integer ceil == upstream's float ceil here
    need = min(max(min_bits, 1), ways)
    widened = hi - lo < need
    if widened:
        hi = min(ways, lo + need)
        lo = hi - need
    return (1 << hi) - (1 << lo), widened


def mb_value(percent: int | None, info: ResctrlInfo) -> int | None:
    """The MB schemata value for a percent of the node's bandwidth; None (MB not written) outside 1-100."""
    if percent is None or percent <= 0 or percent > 100:
        return None
    if info.amd:
        value = MB_MAX_AMD if percent == 100 else AMD_MB_UNITS * percent // 100
    else:
        value = percent
    gran = max(info.mb_gran, 1)
    value = -(-value // gran) * gran               # the kernel rounds up to the granularity: do it first
    return min(max(value, info.mb_min, 1), info.mb_max)


def default_schemata(info: ResctrlInfo) -> Schemata:
    """What the kernel gives a new group: every way, unthrottled bandwidth."""
    out: Schemata = {name: dict.fromkeys(info.cache_ids, info.cbm_mask) for name in info.cache_names}
    if info.mb:
        out["MB"] = dict.fromkeys(info.mb_ids, info.mb_max)
    return out


def class_schemata(cfg: ResctrlQOSCfg | None, info: ResctrlInfo) -> tuple[Schemata, str | None, bool]:
    """(desired lines, problem, widened) for a class group; an unset or invalid part is left out."""
    out: Schemata = {}
    problem, widened = None, False
    if cfg is None:
        return out, None, False
    if cfg.cat_range_start_percent is not None and cfg.cat_range_end_percent is not None:
        try:
            mask, widened = l3_mask(info.cbm_mask, cfg.cat_range_start_percent, cfg.cat_range_end_percent,
                                    info.min_cbm_bits)
        except ValueError as e:
            problem = str(e)
        else:
            for name in info.cache_names:
                out[name] = dict.fromkeys(info.cache_ids, mask)
    if info.mb:
        value = mb_value(cfg.mba_percent, info)
        if value is not None:
            out["MB"] = dict.fromkeys(info.mb_ids, value)
    return out, problem, widened


def pod_schemata(cfg: PodResctrlConfig, info: ResctrlInfo) -> tuple[Schemata, bool, str | None]:
    """(desired lines, widened, note) of a pod group: the defaults, then the global entries, then the per-cache
    ones. ValueError for a cache id the node does not have; ``note`` says when an MB setting cannot apply here."""
    out = default_schemata(info)
    widened = False

    def mask(r: tuple[int, int]) -> int:
        nonlocal widened
        m, w = l3_mask(info.cbm_mask, r[0], r[1], info.min_cbm_bits)
        widened = widened or w
        return m

    for name in info.cache_names:
        if cfg.llc is not None:
            out[name] = dict.fromkeys(info.cache_ids, mask(cfg.llc))
        for cache_id, r in cfg.llc_per_cache:
            if cache_id not in info.cache_ids:
                raise ValueError(f"llc cacheID {cache_id} is not a cache of this node "
                                 f"(ids {','.join(map(str, info.cache_ids))})")
            out[name][cache_id] = mask(r)
    note = None
    if cfg.mb is not None or cfg.mb_per_cache:
        if not info.mb:
            note = f"mb settings ignored: {info.mb_note}"
        else:
            if cfg.mb is not None:
                out["MB"] = dict.fromkeys(info.mb_ids, mb_value(cfg.mb, info) or info.mb_max)
            for cache_id, p in cfg.mb_per_cache:
                if cache_id not in info.mb_ids:
                    raise ValueError(f"mb cacheID {cache_id} is not a memory bandwidth domain of this node "
                                     f"(ids {','.join(map(str, info.mb_ids))})")
                out["MB"][cache_id] = mb_value(p, info) or info.mb_max
    return out, widened, note


def render(desired: Schemata) -> str:
    return "".join(schemata_line(name, values) for name, values in desired.items())


def differing_lines(current: str, desired: Schemata) -> list[str]:
    """The desired resource lines whose values the kernel does not hold yet (compared as numbers: the kernel
    zero-pads masks and space-pads MB)."""
    have = parse_schemata(current)
    out = []
    for name, values in desired.items():
        base = 10 if name.startswith("MB") else 16
        try:
            cur = {i: int(v, base) for i, v in have.get(name, {}).items()}
        except ValueError:
            cur = {}
        if any(cur.get(i) != v for i, v in values.items()):
            out.append(schemata_line(name, values))
    return out
