"""Benchmark: scheduling quality at the scale of the FGD paper, every policy through the extender's verbs.

A generated trace with the production trace's marginals (scheduler/trace/generator.py: 1,523 nodes of which 310
CPU-only, 6,212 GPUs; 8,400 pods, enough to reach 100 % arrived GPU load) is placed pod by pod by
`scheduler/simulate.py` for each policy; the table gives the share of GPU capacity unallocated and fragmented at
90 / 95 / 100 % arrived load, the failed pods, the multi-GPU locality, and each run's wall time.
``--gpu-nodes-only`` runs the paper's own setting (its simulator is fed the 1,213 GPU nodes). ``--known-mix`` also
runs FGD with the trace's workload mix given in advance, as the paper does (the extender learns it online). Curves
and the PNG go to ``--out``.

Usage: python bench/sched_simulate.py [--nodes 1523 --pods 8400 --seed 1 --gpu-nodes-only --known-mix --out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scheduler import simulate
from scheduler.trace import cluster, generator


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1523)
    p.add_argument("--pods", type=int, default=8400)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gpu-nodes-only", action="store_true")
    p.add_argument("--known-mix", action="store_true")
    p.add_argument("--policies", default=",".join(simulate.POLICIES))
    p.add_argument("--out", default="")
    args = p.parse_args()
    marginals = generator.Marginals(cpu_node_share=0.0) if args.gpu_nodes_only else generator.Marginals()
    nodes, pods = generator.generate(args.seed, args.nodes, args.pods, marginals)
    objects = [cluster.node_objects(n) for n in nodes]
    print(f"{len(nodes)} nodes ({sum(1 for n in nodes if n.gpus)} with GPUs, {sum(n.gpus for n in nodes)} GPUs), "
          f"{len(pods)} pods asking {sum(cluster.gpu_request_milli(x) for x in pods) / 1000:.0f} GPUs; seed "
          f"{args.seed}")
    runs = []
    plans = [(name, False) for name in args.policies.split(",")]
    if args.known_mix:
        plans.append(("fgd", True))
    for name, known in plans:
        start = time.perf_counter()
        result = simulate.run(objects, pods, simulate.POLICIES[name], seed=args.seed, known_mix=known)
        elapsed = time.perf_counter() - start
        if known:
            result.policy = "fgd (known mix)"
            for point in result.points:
                point.policy = result.policy
        print(f"  {result.policy:18s} {elapsed:6.1f} s  {result.submitted} pods submitted, {result.placed} placed",
              flush=True)
        runs.append(result)
    print(simulate.table(runs))
    out = args.out or tempfile.mkdtemp(prefix="sched-simulate-")
    for path in simulate.write_outputs(runs, out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
