"""The ``ssh`` provider: Slurm nodes on existing machines (host pools) reached over SSH."""
