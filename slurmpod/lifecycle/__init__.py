"""Lifecycle scripts: fetch sources, snapshot them by content hash, run them inside nodes.

See SPEC §6. Typical use by the reconciler::

    snap = snapshot_source(group.life_cycle_config.source_s3_uri, settings.state_dir / "lifecycle",
                           s3_endpoint_url=settings.s3_endpoint_url)      # when the operation is accepted
    write_node_file(runner, RESOURCE_CONFIG_PATH, render_resource_config(groups))
    result = run_lifecycle_script(runner, snap, group.life_cycle_config.on_create)
    if not result.ok:
        failure_message = format_failure(group.life_cycle_config.on_create, result)
"""

from slurmpod.lifecycle.resource_config import (
    PROVISIONING_PARAMETERS_NAME,
    RESOURCE_CONFIG_PATH,
    ResourceGroup,
    ResourceInstance,
    render_provisioning_parameters,
    render_resource_config,
)
from slurmpod.lifecycle.run import (
    LifecycleRunError,
    ScriptResult,
    format_failure,
    install_snapshot,
    resolve_entry_point,
    run_lifecycle_script,
    write_node_file,
)
from slurmpod.lifecycle.snapshot import Snapshot, load_snapshot, snapshot_source
from slurmpod.lifecycle.sources import (
    LifecycleSourceError,
    S3Options,
    SourceLimits,
    fetch_source,
)

__all__ = [
    "PROVISIONING_PARAMETERS_NAME",
    "RESOURCE_CONFIG_PATH",
    "LifecycleRunError",
    "LifecycleSourceError",
    "ResourceGroup",
    "ResourceInstance",
    "S3Options",
    "ScriptResult",
    "Snapshot",
    "SourceLimits",
    "fetch_source",
    "format_failure",
    "install_snapshot",
    "load_snapshot",
    "render_provisioning_parameters",
    "render_resource_config",
    "resolve_entry_point",
    "run_lifecycle_script",
    "snapshot_source",
    "write_node_file",
]
