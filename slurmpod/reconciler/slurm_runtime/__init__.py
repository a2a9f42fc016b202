"""``SlurmRuntime``: real Slurm clusters over a host ``Provider`` (the ``local`` provider by default).

``runtime.py`` is the facade the reconciler talks to; ``phases.py`` boots a node, ``membership.py`` drains,
removes, replaces and reboots nodes, ``reconfigure.py`` rewrites slurm.conf for topology changes, ``probes.py``
observes health, ``files.py`` keeps the per-cluster secrets and the saved conf.
"""

from slurmpod.reconciler.slurm_runtime.runtime import HOME_VOLUME, JOIN_TIMEOUT, STATE_VOLUME, SlurmRuntime

__all__ = ["HOME_VOLUME", "JOIN_TIMEOUT", "STATE_VOLUME", "SlurmRuntime"]
