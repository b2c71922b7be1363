"""``koord-scheduler-extender simulate``: a whole cluster placed pod by pod through the extender's own verbs, to measure
scheduling quality (the measure of Weng et al., "Beware of Fragmentation", USENIX ATC '23, as their artifact
hkust-adsl/kubernetes-scheduler-simulator computes it), for our policies and the paper's.

Nodes come from the trace's nodes CSV (each built as the agent would report it:
:func:`scheduler.trace.cluster.node_objects`) or from the agent's report files; pods from the trace's pods CSV.

Each module imports only modules listed after it (an import-linter contract in pyproject.toml checks this):

* ``report``: the table, the curves (CSV, JSON) and the plot;
* ``protocol``: which pods are submitted in which order (arrival, the paper's seeded shuffle and inflation, or
  churn), the runs over seeds and policies, in processes, and their medians;
* ``churn``: departures: pods arrive and leave at the trace's times, arrivals compressed to an offered load, and
  the measures per 1 % of time;
* ``simulator``: one policy's run: kube-scheduler and the API server played around the extender's verbs, and the
  measures per load level;
* ``policies``: the policies, and the in-tree node scores of ours and of the paper's baselines.
"""
