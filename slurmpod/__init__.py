"""slurmpod: a self-hostable control plane for real Slurm clusters, HyperPod-compatible API."""

__version__ = "0.1.0"
