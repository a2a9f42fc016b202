"""SIMULATED provider: instances are records with scripted timings and failures, no daemons.

For tests and large-scale benchmarks only; everything it produces is labelled "simulated".
"""

from slurmpod.providers.simulated.provider import SimulatedProvider

__all__ = ["SimulatedProvider"]
