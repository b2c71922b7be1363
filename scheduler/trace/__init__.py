"""The simulator's input side: the production trace's CSV files, the cluster objects they stand for, a seeded
workload generator with the trace's marginals, and nodes read back from the agent's own reports.

The trace is Alibaba's ``cluster-trace-gpu-v2023`` (github alibaba/clusterdata, ``openb_node_list_all_node.csv``,
``openb_pod_list_default.csv`` and ``openb_pod_list_gpuspec33.csv``), the one Weng et al., "Beware of Fragmentation"
(USENIX ATC '23) evaluates on.

Each module imports only modules listed after it (an import-linter contract in pyproject.toml checks this):

* ``agent_reports`` | ``generator``: Nodes and Devices from the agent's report files | a seeded trace with the
  production trace's marginals;
* ``cluster``: per-model GPU profiles, and the Node, Device and Pod objects a trace row stands for;
* ``records``: the trace's CSV files, one checked record per node or pod.
"""
