"""GPU partition table derived from NVLink/PCIe topology.

Every expected table was worked out by hand from the rule in koordlet/reporters/gpu_partitions.py. Per-link
bandwidth: NVLink 2.0-4.0 = 25 GB/s, so 2 links = "50G", 4 links = "100G", 18 switch links = "450G".

allocationScore runs the way koord-scheduler reads it: lower = taken first. The last section replays the
scheduler's partition stage (written here from its description, not from its code) over our tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from itertools import combinations

import pytest

from koordlet.reporters.gpu_partitions import (
    PCIE_HOSTBRIDGE,
    PCIE_MULTIPLE,
    PCIE_NODE,
    PCIE_SINGLE,
    PCIE_SYSTEM,
    GpuLinks,
    derive_partitions,
)

NVLINK_2_0, NVLINK_3_0, NVLINK_4_0, UNKNOWN = 2, 4, 6, 0


def bus(minor: int) -> str:
    return f"0000:{0x10 + minor:02x}:00.0"


def nv(minors: list[int], bandwidth: str | None, score: int) -> dict:
    """An expected NVLink entry (bandwidth None: the table does not know it)."""
    entry: dict = {"minors": minors, "gpuLinkType": "NVLink"}
    if bandwidth is not None:
        entry["ringBusBandwidth"] = bandwidth
    entry["allocationScore"] = score
    return entry


def pcie(minors: list[int], score: int) -> dict:
    return {"minors": minors, "gpuLinkType": "PCIe", "allocationScore": score}


def links_of(minor: int, links: dict[frozenset[int], int]) -> dict[str, int]:
    """Peers map of one GPU from {pair: link count}; both ends report each link."""
    return {bus(other): n for pair, n in links.items() if minor in pair for other in pair - {minor}}


def direct_gpus(count: int, links: dict[frozenset[int], int], version: int | dict[int, int]) -> list[GpuLinks]:
    """GPUs 0..count-1 joined by direct NVLinks; version per GPU when a dict."""
    def version_of(m: int) -> int:
        return version[m] if isinstance(version, dict) else version
    return [GpuLinks(minor=m, bus_id=bus(m), peers=links_of(m, links), link_version=version_of(m))
            for m in range(count)]


def mesh(group: Iterable[int], links: int) -> dict[frozenset[int], int]:
    return {frozenset(pair): links for pair in combinations(group, 2)}


def pcie_levels(groups: Iterable[Iterable[int]], level: int, bus_of=bus) -> dict[frozenset[str], int]:
    """`level` for every pair inside each group; pairs not listed are left out (= SYSTEM)."""
    return {frozenset((bus_of(a), bus_of(b))): level for group in groups for a, b in combinations(group, 2)}


HOPPER = {
    "1": [nv([m], "450G", 1) for m in range(8)],
    "2": [nv([0, 1], "450G", 1), nv([2, 3], "450G", 1), nv([4, 5], "450G", 1), nv([6, 7], "450G", 1)],
    "4": [nv([0, 1, 2, 3], "450G", 1), nv([4, 5, 6, 7], "450G", 1)],
    "8": [nv([0, 1, 2, 3, 4, 5, 6, 7], "450G", 1)],
}


def test_nvswitch_h100_is_the_hopper_table():
    # 18 NVLink 4.0 links per GPU, all to the switch: 450 GB/s between any two GPUs; 0-3 and 4-7 share a NUMA node.
    gpus = [GpuLinks(minor=m, bus_id=bus(m), peers={}, switch_links=18, link_version=NVLINK_4_0) for m in range(8)]
    table = derive_partitions(gpus, pcie_levels([range(4), range(4, 8)], PCIE_NODE))
    assert table == HOPPER
    assert list(table) == ["1", "2", "4", "8"]
    assert json.loads(json.dumps(table)) == HOPPER


def test_nvswitch_bus_ids_out_of_minor_order():
    # Real HGX boards number minors in bus order only by accident: minors are what the table speaks of.
    buses = {0: "0000:9a:00.0", 1: "0000:18:00.0", 2: "0000:c3:00.0", 3: "0000:3b:00.0",
             4: "0000:5d:00.0", 5: "0000:db:00.0", 6: "0000:ab:00.0", 7: "0000:4d:00.0"}
    gpus = [GpuLinks(minor=m, bus_id=buses[m], peers={}, switch_links=18, link_version=NVLINK_4_0)
            for m in (5, 2, 7, 0, 3, 6, 1, 4)]
    levels = pcie_levels([range(4), range(4, 8)], PCIE_NODE, bus_of=buses.__getitem__)
    assert derive_partitions(gpus, levels) == HOPPER


def test_two_nvlink_islands():
    # 0-3 and 4-7 each fully meshed with 2 NVLink 3.0 links per pair (50G), nothing across; a GPU has 6 links
    # (150G). Pairs and quads stay inside an island; the only 8-GPU group crosses on PCIe.
    gpus = direct_gpus(8, mesh(range(4), 2) | mesh(range(4, 8), 2), NVLINK_3_0)
    table = derive_partitions(gpus, pcie_levels([range(4), range(4, 8)], PCIE_HOSTBRIDGE))
    assert table == {
        "1": [nv([m], "150G", 1) for m in range(8)],
        "2": [nv([0, 1], "50G", 1), nv([2, 3], "50G", 1), nv([4, 5], "50G", 1), nv([6, 7], "50G", 1)],
        "4": [nv([0, 1, 2, 3], "50G", 1), nv([4, 5, 6, 7], "50G", 1)],
        "8": [pcie([0, 1, 2, 3, 4, 5, 6, 7], 1)],
    }


UNEQUAL_LINKS = mesh(range(4), 4) | mesh(range(4, 8), 2)


def test_unequal_islands_take_from_the_weak_one_first():
    # Island A (0-3): 4 links per pair = 100G, 12 links per GPU = 300G. Island B (4-7): 50G pairs, 150G per GPU.
    # Size-4 groups: A (100G) is strictly better than B (50G), so pairs inside B are cheaper to take and score 1,
    # inside A 2; likewise for single GPUs, whose ancestors are (octet, B 50G, B pair 50G) or (octet, A, A pair).
    gpus = direct_gpus(8, UNEQUAL_LINKS, NVLINK_3_0)
    table = derive_partitions(gpus, pcie_levels([range(4), range(4, 8)], PCIE_HOSTBRIDGE))
    assert table == {
        "1": [nv([0], "300G", 2), nv([1], "300G", 2), nv([2], "300G", 2), nv([3], "300G", 2),
              nv([4], "150G", 1), nv([5], "150G", 1), nv([6], "150G", 1), nv([7], "150G", 1)],
        "2": [nv([0, 1], "100G", 2), nv([2, 3], "100G", 2), nv([4, 5], "50G", 1), nv([6, 7], "50G", 1)],
        "4": [nv([0, 1, 2, 3], "100G", 1), nv([4, 5, 6, 7], "50G", 1)],
        "8": [pcie([0, 1, 2, 3, 4, 5, 6, 7], 1)],
    }


@pytest.mark.parametrize("version", [UNKNOWN, {0: NVLINK_3_0, 1: NVLINK_3_0, 2: NVLINK_3_0, 3: NVLINK_3_0,
                                               4: UNKNOWN, 5: UNKNOWN, 6: UNKNOWN, 7: UNKNOWN}],
                         ids=["all-unknown", "one-island-unknown"])
def test_unknown_nvlink_version_drops_bandwidth_but_keeps_grouping(version):
    # Same as the unequal islands, compared by link counts (A pairs 4, B pairs 2): same groups, same scores.
    gpus = direct_gpus(8, UNEQUAL_LINKS, version)
    table = derive_partitions(gpus, pcie_levels([range(4), range(4, 8)], PCIE_HOSTBRIDGE))
    assert table == {
        "1": [nv([0], None, 2), nv([1], None, 2), nv([2], None, 2), nv([3], None, 2),
              nv([4], None, 1), nv([5], None, 1), nv([6], None, 1), nv([7], None, 1)],
        "2": [nv([0, 1], None, 2), nv([2, 3], None, 2), nv([4, 5], None, 1), nv([6, 7], None, 1)],
        "4": [nv([0, 1, 2, 3], None, 1), nv([4, 5, 6, 7], None, 1)],
        "8": [pcie([0, 1, 2, 3, 4, 5, 6, 7], 1)],
    }


def test_pcie_only_pairs_follow_the_switches():
    # 4 L40S: 0,1 under one PCIe switch, 2,3 under another on the other socket.
    gpus = direct_gpus(4, {}, UNKNOWN)
    levels = pcie_levels([(0, 1), (2, 3)], PCIE_SINGLE)
    expected = {
        "1": [pcie([0], 1), pcie([1], 1), pcie([2], 1), pcie([3], 1)],
        "2": [pcie([0, 1], 1), pcie([2, 3], 1)],
        "4": [pcie([0, 1, 2, 3], 1)],
    }
    assert derive_partitions(gpus, levels) == expected
    # A pair NVML did not answer for counts as SYSTEM: spelling the cross-socket pairs out changes nothing.
    assert derive_partitions(gpus, levels | pcie_levels([(0, 2), (0, 3), (1, 2), (1, 3)], PCIE_SYSTEM)) == expected


def test_pcie_only_interleaved_minors():
    # 0 and 2 share a switch, 1 and 3 another; every other pair meets at the host bridge.
    gpus = direct_gpus(4, {}, UNKNOWN)
    levels = pcie_levels([range(4)], PCIE_HOSTBRIDGE) | pcie_levels([(0, 2), (1, 3)], PCIE_SINGLE)
    assert derive_partitions(gpus, levels) == {
        "1": [pcie([0], 1), pcie([1], 1), pcie([2], 1), pcie([3], 1)],
        "2": [pcie([0, 2], 1), pcie([1, 3], 1)],
        "4": [pcie([0, 1, 2, 3], 1)],
    }


def test_odd_count_leaves_the_unlinked_gpu_out_and_ranks_it_first():
    # 0-1 joined by 4 NVLink 3.0 links (100G), GPU 2 alone: taking GPU 2 breaks no pair, so it is the cheapest
    # (score 1) and 0, 1 score 2.
    gpus = direct_gpus(3, {frozenset((0, 1)): 4}, NVLINK_3_0)
    table = derive_partitions(gpus, pcie_levels([range(3)], PCIE_NODE))
    assert table == {
        "1": [nv([0], "100G", 2), nv([1], "100G", 2), pcie([2], 1)],
        "2": [nv([0, 1], "100G", 1)],
    }


def test_odd_count_tie_leaves_the_highest_minors_out():
    # 5 PCIe GPUs, all across sockets: every matching is equal, so 4 stays out and pairs go in minor order.
    gpus = direct_gpus(5, {}, UNKNOWN)
    assert derive_partitions(gpus, {}) == {
        "1": [pcie([0], 2), pcie([1], 2), pcie([2], 2), pcie([3], 2), pcie([4], 1)],
        "2": [pcie([0, 1], 1), pcie([2, 3], 1)],
        "4": [pcie([0, 1, 2, 3], 1)],
    }


def test_one_gpu_and_none():
    assert derive_partitions(direct_gpus(1, {}, UNKNOWN), {}) == {"1": [pcie([0], 1)]}
    assert derive_partitions([], {}) == {}


def test_direct_ring_pairs_neighbours():
    # 0-1, 1-2, 2-3, 3-0 with 2 links each (no diagonals): {0,1},{2,3} and {0,3},{1,2} tie at 50G, the smaller
    # minors win; the 4-GPU ring 0-1-2-3 runs at 2 links' worth; each GPU has 4 links = 100G.
    links = {frozenset(p): 2 for p in [(0, 1), (1, 2), (2, 3), (3, 0)]}
    table = derive_partitions(direct_gpus(4, links, NVLINK_3_0), pcie_levels([range(4)], PCIE_NODE))
    assert table == {
        "1": [nv([0], "100G", 1), nv([1], "100G", 1), nv([2], "100G", 1), nv([3], "100G", 1)],
        "2": [nv([0, 1], "50G", 1), nv([2, 3], "50G", 1)],
        "4": [nv([0, 1, 2, 3], "50G", 1)],
    }


def test_ring_found_out_of_minor_order():
    # Links 0-2, 2-1, 1-3, 3-0: the ring in minor order (0-1-2-3) has no 0-1 link; ring 0-2-1-3 does 50G.
    links = {frozenset(p): 2 for p in [(0, 2), (2, 1), (1, 3), (3, 0)]}
    table = derive_partitions(direct_gpus(4, links, NVLINK_3_0), {})
    assert table == {
        "1": [nv([0], "100G", 1), nv([1], "100G", 1), nv([2], "100G", 1), nv([3], "100G", 1)],
        "2": [nv([0, 2], "50G", 1), nv([1, 3], "50G", 1)],
        "4": [nv([0, 1, 2, 3], "50G", 1)],
    }


def test_a_link_counts_once_both_ends_see_it():
    # GPU 0 reports 4 links to GPU 1, GPU 1 only 2 to GPU 0: the pair gets the smaller view (2 links = 50G);
    # a single GPU counts its own links.
    gpus = [GpuLinks(0, bus(0), {bus(1): 4}, link_version=NVLINK_3_0),
            GpuLinks(1, bus(1), {bus(0): 2}, link_version=NVLINK_3_0)]
    assert derive_partitions(gpus, {}) == {
        "1": [nv([0], "100G", 1), nv([1], "50G", 1)],
        "2": [nv([0, 1], "50G", 1)],
    }


def test_sixteen_gpus_use_the_greedy_steps():
    # DGX-2 style: 16 V100 (NVLink 2.0) with 6 switch links each = 150G between any two. PCIe: pairs 2i,2i+1 on
    # one switch, quads behind several switches, 0-7 and 8-15 on one NUMA node each. 16 singles -> greedy
    # matching; the 16-GPU ring -> greedy ring.
    gpus = [GpuLinks(minor=m, bus_id=bus(m), peers={}, switch_links=6, link_version=NVLINK_2_0) for m in range(16)]
    levels = (pcie_levels([range(8), range(8, 16)], PCIE_NODE)
              | pcie_levels([range(q, q + 4) for q in range(0, 16, 4)], PCIE_MULTIPLE)
              | pcie_levels([(p, p + 1) for p in range(0, 16, 2)], PCIE_SINGLE))
    table = derive_partitions(gpus, levels)
    assert list(table) == ["1", "2", "4", "8", "16"]
    assert table == {
        "1": [nv([m], "150G", 1) for m in range(16)],
        "2": [nv([p, p + 1], "150G", 1) for p in range(0, 16, 2)],
        "4": [nv([q, q + 1, q + 2, q + 3], "150G", 1) for q in range(0, 16, 4)],
        "8": [nv([0, 1, 2, 3, 4, 5, 6, 7], "150G", 1), nv([8, 9, 10, 11, 12, 13, 14, 15], "150G", 1)],
        "16": [nv(list(range(16)), "150G", 1)],
    }


# ================================================== koord-scheduler's partition stage, replayed over our tables
#
# Written from the behaviour of pkg/scheduler/plugins/deviceshare (GetGPUPartitionIndexer in allocator_gpu_helper.go,
# allocateByPartition and selectPartitionByBinPack in allocator_gpu.go), not from its code:
# * the partitions of the requested size are grouped by allocationScore, groups sorted by ASCENDING score;
# * walk the groups; a partition is feasible when none of its GPUs is used and, if the pod asks for a ring bus
#   bandwidth, it has one at least that big; stop at the first group with a feasible partition (a Restricted pod
#   stops after the first group whatever it holds);
# * with several feasible partitions, each scores sum over sizes s in (8, 4, 2), s >= request, of weight(s) x
#   allocationScore of every partition of the LOWEST-score group of size s that stays untouched; highest wins. Go's
#   sort.Slice does not fix the order of ties, so the replay follows every tied choice.

BINPACK_WEIGHT = {8: 10000, 4: 100, 2: 1}
DECIMAL_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}


def bytes_per_second(quantity: str) -> int:
    """A DecimalSI quantity as our table writes it ("450G", "2T")."""
    suffix = quantity.lstrip("0123456789")
    return int(quantity[:len(quantity) - len(suffix)]) * DECIMAL_SUFFIX[suffix]


def score_groups(table: dict, count: int) -> list[list[dict]]:
    """The partitions of `count` GPUs grouped by allocationScore, lowest score first, table order inside a group."""
    groups: dict[int, list[dict]] = {}
    for partition in table.get(str(count), []):
        groups.setdefault(partition["allocationScore"], []).append(partition)
    return [groups[score] for score in sorted(groups)]


def scheduler_picks(table: dict, used: frozenset[int], count: int, bandwidth: int | None = None,
                    restricted: bool = False) -> list[frozenset[int]]:
    """Every partition koord-scheduler may give a pod of `count` GPUs (more than one only on a binpack tie)."""
    feasible: list[frozenset[int]] = []
    for group in score_groups(table, count):
        for partition in group:
            minors = frozenset(partition["minors"])
            if minors & used:
                continue
            if bandwidth is not None and ("ringBusBandwidth" not in partition
                                          or bytes_per_second(partition["ringBusBandwidth"]) < bandwidth):
                continue
            feasible.append(minors)
        if feasible or restricted:
            break
    if len(feasible) <= 1:
        return feasible

    def binpack(candidate: frozenset[int]) -> int:
        taken = used | candidate
        return sum(weight * other["allocationScore"]
                   for size, weight in BINPACK_WEIGHT.items() if size >= count and str(size) in table
                   for other in score_groups(table, size)[0] if not taken & set(other["minors"]))

    best = max(map(binpack, feasible))
    return [candidate for candidate in feasible if binpack(candidate) == best]


def replay(table: dict, requests: list[int]) -> list[set[frozenset[int]]]:
    """The GPUs in use after each request (every state some tie-break can reach); every pod must be placed."""
    states = {frozenset[int]()}
    history = []
    for count in requests:
        following = set()
        for used in states:
            picks = scheduler_picks(table, used, count)
            assert picks, f"no partition of {count} GPUs with {sorted(used)} in use"
            following.update(used | pick for pick in picks)
        states = following
        history.append(states)
    return history


def reversed_scores(table: dict) -> dict:
    """The same table with each size's scores turned upside down (higher is better, as upstream's comments say)."""
    flipped = {}
    for size, partitions in table.items():
        top = max(p["allocationScore"] for p in partitions)
        flipped[size] = [p | {"allocationScore": top + 1 - p["allocationScore"]} for p in partitions]
    return flipped


# B's pairs are as strong as A's (4 links = 100G) but B's quad is not: 4-6 and 5-7 have only 2 links, so B's best
# ring runs at 50G. A parent-only score could not tell A's singles from B's: the whole ancestor chain does.
EQUAL_PAIRS_LINKS = (mesh(range(4), 4) | {frozenset((4, 5)): 4, frozenset((6, 7)): 4,
                                          frozenset((4, 6)): 2, frozenset((5, 7)): 2})


def test_equal_pairs_unequal_quads_are_told_apart_by_the_quads():
    gpus = direct_gpus(8, EQUAL_PAIRS_LINKS, NVLINK_3_0)
    table = derive_partitions(gpus, pcie_levels([range(4), range(4, 8)], PCIE_HOSTBRIDGE))
    assert table == {
        "1": [nv([m], "300G", 2) for m in range(4)] + [nv([m], "150G", 1) for m in range(4, 8)],
        "2": [nv([0, 1], "100G", 2), nv([2, 3], "100G", 2), nv([4, 5], "100G", 1), nv([6, 7], "100G", 1)],
        "4": [nv([0, 1, 2, 3], "100G", 1), nv([4, 5, 6, 7], "50G", 1)],
        "8": [pcie([0, 1, 2, 3, 4, 5, 6, 7], 1)],
    }


# (GPU count, NVLinks, the strong group, its ring bandwidth in bytes/s, request sequences that fit in the weak GPUs)
ASYMMETRIC_BOARDS = {
    "unequal-islands": (8, UNEQUAL_LINKS, frozenset(range(4)), 100 * 10**9,
                        [[1, 1, 1, 1], [1, 2, 1], [2, 1, 1], [1, 1, 2], [2, 2]]),
    "equal-pairs-unequal-quads": (8, EQUAL_PAIRS_LINKS, frozenset(range(4)), 100 * 10**9,
                                  [[1, 1, 1, 1], [1, 2, 1], [2, 1, 1], [1, 1, 2], [2, 2]]),
    "strong-quad-and-a-weak-pair": (6, mesh(range(4), 4) | {frozenset((4, 5)): 2}, frozenset(range(4)),
                                    100 * 10**9, [[1, 1], [2]]),
}


@pytest.mark.parametrize("board", list(ASYMMETRIC_BOARDS))
def test_koord_scheduler_takes_the_weak_groups_first_and_keeps_the_strong_one_whole(board):
    count, links, strong, strong_bandwidth, sequences = ASYMMETRIC_BOARDS[board]
    gpus = direct_gpus(count, links, NVLINK_3_0)
    table = derive_partitions(gpus, pcie_levels([range(4), range(4, count)], PCIE_HOSTBRIDGE))
    for requests in sequences:
        history = replay(table, requests)
        for step, states in enumerate(history):
            for used in states:
                assert not used & strong, f"{board} {requests[:step + 1]}: strong group lost {sorted(used & strong)}"
        # The weak GPUs are all taken now; a pod that needs the strong group's bandwidth still gets it whole.
        for used in history[-1]:
            assert used == frozenset(range(count)) - strong
            assert scheduler_picks(table, used, len(strong), strong_bandwidth) == [strong]
            # ... and a further 1-GPU pod, with nothing weak left, now goes into the strong group.
            assert all(pick <= strong for pick in scheduler_picks(table, used, 1))
    # The replay tells the directions apart: with the scores upside down the first 1-GPU pod lands in the strong group.
    assert all(used <= strong for used in replay(reversed_scores(table), [1])[0])


def test_symmetric_board_leaves_the_choice_to_the_binpack():
    # All scores equal (the Hopper table): one group per size, and the binpack alone keeps pairs and quads whole.
    gpus = [GpuLinks(minor=m, bus_id=bus(m), peers={}, switch_links=18, link_version=NVLINK_4_0) for m in range(8)]
    table = derive_partitions(gpus, pcie_levels([range(4), range(4, 8)], PCIE_NODE))
    for used in replay(table, [1, 1])[-1]:
        assert any(used <= frozenset(p["minors"]) for p in table["2"])      # the second GPU completes the pair
    for used in replay(table, [1, 2])[-1]:
        assert any(used <= frozenset(p["minors"]) for p in table["4"])      # the pair stays in the broken quad


def test_restricted_pods_only_see_the_lowest_score_group():
    # Upstream stops a Restricted pod after the first (lowest-score) group: on the unequal islands that is B's GPUs,
    # so once B is full a Restricted 1-GPU pod finds nothing, where a BestEffort one moves on to A.
    table = derive_partitions(direct_gpus(8, UNEQUAL_LINKS, NVLINK_3_0),
                              pcie_levels([range(4), range(4, 8)], PCIE_HOSTBRIDGE))
    weak_full = frozenset(range(4, 8))
    assert scheduler_picks(table, weak_full, 1, restricted=True) == []
    assert scheduler_picks(table, weak_full, 1) != []
    # A BestEffort pod asking for more than B's singles have (150G) skips B's group for A's (300G).
    assert all(pick <= frozenset(range(4)) for pick in scheduler_picks(table, frozenset(), 1, 300 * 10**9))
