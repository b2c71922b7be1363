"""Analysis: how far any placement policy could go below FGD on the paper's protocol (issue 33, item 5).

Item 5 asks for a policy that leaves ≥ 10 % fewer GPUs unallocated than our FGD at 100 % arrived load. On the
generated workloads almost all that FGD leaves then is slivers on cards that hold GPU shares (bench/NOTES.md): the
whole-card pods that fail find no empty card because the shares took too many. So the question is how few cards
the shares that arrived by 100 % load could take. For each workload and seed (the pods of
``bench/sched_simulate.py``, shuffled and inflated as there, cut where the arrived GPU requests reach the
cluster's capacity), with cards alone (no nodes, cpu, memory or GPU models, so the offline optima below are
bounds: each such constraint can only cost more):

* **online rules**, the GPU pods in arrival order onto the cluster's cards (1,000 milli-GPUs each; whole-card
  pods take empty cards; a pod that finds no room fails): a share goes by first-fit, best-fit (the tightest card
  that fits) or FGD's card choice (the card whose fragmentation under the trace's target mix grows least, an
  empty card among the choices: ``scheduler.fgd.fragmentation`` of one card);
* **offline optima** (cutting-stock linear programs, column generation, HiGHS through scipy): the fewest cards that
  hold every arrived share (a lower bound for any order and policy that places them all), and the most share
  volume the cards the whole-card pods leave can hold (a policy may leave any pods out).

Each is printed as the GPU capacity left unallocated, in %, comparable with ``sched_simulate``'s figures at 100 %
(which also pay for nodes, cpu and memory). Needs scipy (``pip install -e '.[analysis]'``).

Usage: python bench/sched_packing_floor.py [--seeds 3 --workloads default,multigpu50,gpushare100,gpuspec33]
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sched_simulate import WORKLOADS, trace  # bench/ is on sys.path when run as a script

from scheduler.fgd import WHOLE, NodeFree, WorkloadMix
from scheduler.simulate import protocol
from scheduler.trace import cluster

STEP = 10                    # every share in the generated traces is a multiple of 10 milli-GPUs
Rule = Callable[[list[int], int], int | None]     # (free milli-GPUs per open card, share) -> card, None: a new one


def first_fit(cards: list[int], share: int) -> int | None:
    return next((i for i, free in enumerate(cards) if free >= share), None)


def best_fit(cards: list[int], share: int) -> int | None:
    fitting = [(free, i) for i, free in enumerate(cards) if free >= share]
    return min(fitting)[1] if fitting else None


def fgd_rule(mix: WorkloadMix) -> Rule:
    """FGD's choice of a card for a share: the least growth of the card's fragmentation (ties: the first card)."""
    def frag(free: int) -> float:
        return mix.fragmentation(NodeFree(1 << 62, 1 << 62, (free,)))

    def choose(cards: list[int], share: int) -> int | None:
        best, growth = None, frag(WHOLE - share) - frag(WHOLE)
        for i, free in enumerate(cards):
            if free >= share:
                g = frag(free - share) - frag(free)
                if g < growth:
                    best, growth = i, g
        return best

    return choose


def online(arrivals: Sequence[int], cards: int, rule: Rule) -> int:
    """Milli-GPUs left unallocated when the pods arrive in order onto ``cards`` cards: a share (< 1000) goes where
    ``rule`` puts it (a new card while one is empty), ``n`` whole cards (``-n``) take empty cards; a pod that
    finds no room fails."""
    used: list[int] = []           # free milli-GPUs of each card a share opened
    empty, placed = cards, 0
    for ask in arrivals:
        if ask < 0:
            if empty >= -ask:
                empty += ask
                placed -= WHOLE * ask
            continue
        i = rule(used, ask)
        if i is not None:
            used[i] -= ask
        elif empty:
            empty -= 1
            used.append(WHOLE - ask)
        else:
            continue
        placed += ask
    return WHOLE * cards - placed


def _knapsack(sizes: Sequence[int], values: Sequence[float]) -> tuple[float, list[int]]:
    """The most valuable multiset of sizes (in steps) that fits one card, and how many of each."""
    room = WHOLE // STEP
    best = [0.0] * (room + 1)
    last: list[int | None] = [None] * (room + 1)
    for cap in range(1, room + 1):
        best[cap], last[cap] = best[cap - 1], None
        for i, size in enumerate(sizes):
            if size <= cap and best[cap - size] + values[i] > best[cap] + 1e-12:
                best[cap], last[cap] = best[cap - size] + values[i], i
    counts, cap = [0] * len(sizes), room
    while cap > 0:
        pick = last[cap]
        if pick is None:
            cap -= 1
        else:
            counts[pick] += 1
            cap -= sizes[pick]
    return best[room], counts


def optima(shares: Sequence[int], cards: int) -> tuple[float, float]:
    """(the fewest cards holding every share, the most share volume in milli-GPUs ``cards`` cards hold), both the
    cutting-stock LP's optimum (its integer optimum is within a card or two of it)."""
    linprog: Any = importlib.import_module("scipy.optimize").linprog
    counted = Counter(s // STEP for s in shares)
    sizes = sorted(counted)
    demand = [counted[s] for s in sizes]

    def solve(fewest: bool) -> float:
        patterns = [[(WHOLE // STEP // s) if j == i else 0 for j in range(len(sizes))] for i, s in enumerate(sizes)]
        while True:
            columns = list(zip(*patterns, strict=True))      # rows: sizes; columns: patterns
            if fewest:           # min Σ y  s.t.  Σ_p a_ip y_p ≥ demand_i
                res = linprog([1.0] * len(patterns), A_ub=[[-a for a in row] for row in columns],
                              b_ub=[-d for d in demand], method="highs")
                prices, card_price = [-m for m in res.ineqlin.marginals], 1.0
            else:                # max Σ size·Σ_p a_ip y_p  s.t.  Σ_p a_ip y_p ≤ demand_i, Σ y ≤ cards
                volume = [-sum(a * s for a, s in zip(p, sizes, strict=True)) for p in patterns]
                res = linprog(volume, A_ub=[*map(list, columns), [1] * len(patterns)], b_ub=[*demand, cards],
                              method="highs")
                duals = [-m for m in res.ineqlin.marginals]
                prices = [s - d for s, d in zip(sizes, duals[:-1], strict=True)]
                card_price = duals[-1]
            value, pattern = _knapsack(sizes, prices)
            if value <= card_price + 1e-9:
                return float(res.fun) if fewest else -float(res.fun) * STEP
            patterns.append(pattern)

    return solve(True), solve(False)


def arrivals(workload: str, seed: int) -> tuple[int, list[int], WorkloadMix]:
    """(cards in the cluster, the GPU pods arrived by 100 % load in order: a share in milli-GPUs or ``-n`` for
    ``n`` whole cards, FGD's target mix)."""
    nodes, pods = trace(workload)
    total = sum(n.gpus for n in nodes)
    plan = protocol.Protocol("shuffle", seed=seed, seeds=1, max_load=130, max_pods=None)
    out, arrived = [], 0
    for tp in protocol.workload(pods, WHOLE * total, plan, seed).pods:
        if tp.num_gpu:
            out.append(tp.gpu_milli if tp.num_gpu == 1 and tp.gpu_milli < WHOLE else -tp.num_gpu)
        arrived += cluster.gpu_request_milli(tp)
        if arrived >= WHOLE * total:
            break
    mix = WorkloadMix(prior=(), cpu_step=1, memory_step=1)
    mix.set(protocol.target_mix(pods))
    return total, out, mix


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3, help="seeds from 42, as bench/sched_simulate.py")
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated")
    args = p.parse_args()
    try:
        importlib.import_module("scipy.optimize")
    except ImportError:
        sys.exit("sched_packing_floor needs scipy: pip install -e '.[analysis]'")
    print("GPU capacity unallocated at 100 % arrived load, cards only (no nodes, cpu, memory or GPU models)")
    print(f"{'workload':12s} {'seed':>4s} {'shares':>6s} {'first-fit':>9s} {'best-fit':>9s} {'fgd card':>9s} "
          f"{'LP: all':>8s} {'LP: most':>8s}")
    for workload in args.workloads.split(","):
        for seed in range(42, 42 + args.seeds):
            total, pods, mix = arrivals(workload, seed)
            shares = [a for a in pods if a > 0]
            left = total + sum(a for a in pods if a < 0)         # the cards the whole-card pods leave
            fewest, most = optima(shares, left)
            rules = (first_fit, best_fit, fgd_rule(mix))
            row = [100 * online(pods, total, rule) / (WHOLE * total) for rule in rules]
            row += [100 * (fewest - left) / total, 100 * (WHOLE * left - most) / (WHOLE * total)]
            print(f"{workload:12s} {seed:4d} {len(shares):6d} " + " ".join(f"{v:8.2f}%" for v in row))
    print("online rules: the pods in arrival order, a pod that finds no room fails. LP: all: the cards every "
          "share needs at the least beyond those the whole-card pods leave (what a policy that places them all "
          "leaves unallocated at the least); LP: most: the share volume left out when those cards hold the most "
          "they can (what any policy leaves unallocated at the least)")

if __name__ == "__main__":
    main()
