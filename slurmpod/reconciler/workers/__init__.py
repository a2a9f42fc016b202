"""The reconciler's slow work, one module per responsibility.

Every worker has the shape ``(ctx, cluster_id, key) -> Park | None``: it re-reads its records from the store,
reports only through version-checked store writes (and ``ctx.wake()``), and returns ``Park`` instead of
sleeping through a long wait.
"""
