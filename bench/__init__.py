"""slurmpod benchmarks: ``python -m bench`` (see BENCHMARKS.md).

Scenario 1, *seed topology on the local provider*: 1 controller + 2 compute nodes created through the
real API (boto3 against a ``slurmpod server --provider local`` subprocess), measured side by side with
the *floor*: the same daemons on the same kind of nodes started by a plain script without slurmpod.
"""
