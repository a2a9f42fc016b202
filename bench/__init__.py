"""slurmpod benchmarks: ``python -m bench`` (see BENCHMARKS.md).

1. ``seed_local``: seed topology (1 controller + 2 compute) on the local provider vs the floor.
2. ``sw_update``: UpdateClusterSoftware (root-volume replacement) of one idle node; 4-node rolling update.
3. ``scale_local``: 50 compute nodes on the local provider vs the floor; memory per node (``memory``).
4. ``sim_scale``: 10,000 simulated nodes; pagination, idle reconcile passes, peak RSS (``simserver``).
5. ``moto_compare``: the same boto3 workload against slurmpod and ``moto_server``.
"""
