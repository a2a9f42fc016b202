"""observe -> plan (pure) -> apply; level-triggered, restart-safe, one owner per cluster."""
