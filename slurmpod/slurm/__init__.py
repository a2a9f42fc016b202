"""Slurm on slurmpod nodes: conf rendering (``conf``), node state parsing (``state``) and daemon
control through a provider's CommandRunner (``control``)."""
