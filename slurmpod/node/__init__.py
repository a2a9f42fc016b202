"""Programs that run *inside* nodes, with the node image's own ``python3`` (standard library only, Python >= 3.11).

slurmpod ships this package to every node as boot files (``slurmpod.lifecycle.nodeprograms``), under
``/usr/lib/slurmpod/node/``, so a node always runs the programs of the slurmpod that booted it, whatever its image.
Nothing here imports the rest of slurmpod (an import-linter contract says so); the control plane imports these
modules only for their constants (paths, fault kinds) and in tests.

* ``faults``: the fault markers ``slurmpod faults inject`` leaves in a node (``/run/slurmpod/faults/<kind>``).
* ``checks``: the node's health checks (daemons, GPUs, disk and memory pressure), shared by the health agent and
  the deep health checks.
"""
