"""Process-wide observability: Prometheus instruments (``metrics``)."""
