"""GPU GRES rendering: catalogue -> Gres=, slurm.conf's GresTypes/AccountingStorageTRES, the controller's gres.conf
(one static Include) and each node's own lines, device discovery, and the boot step that writes a node's lines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from slurmpod.domain.catalog import accelerator_devices, instance_type_info, slurm_gres
from slurmpod.domain.spec import ClusterSpec, InstanceGroupSpec, SlurmConfig
from slurmpod.domain.status import NodeType
from slurmpod.providers.base import CommandResult
from slurmpod.reconciler import headnodes
from slurmpod.reconciler.runtime import NodeBootError
from slurmpod.reconciler.slurm_runtime import gpus
from slurmpod.slurm import units
from slurmpod.slurm.conf import AccountingConfig, SlurmTopology, render_slurm_conf
from slurmpod.slurm.control import slurmd_argv
from slurmpod.slurm.gres import (
    NODE_GRES_CONF,
    device_prefix,
    find_devices,
    parse_devices,
    render_gres_conf,
    render_node_gres_conf,
)


def test_catalogue_gres() -> None:
    p5 = instance_type_info("ml.p5.48xlarge")
    assert slurm_gres(p5) == "gpu:h100:8"
    assert accelerator_devices(p5) == tuple(f"/dev/nvidia{i}" for i in range(8))
    assert slurm_gres(instance_type_info("ml.g5.xlarge")) == "gpu:a10g:1"
    trn = instance_type_info("ml.trn2.48xlarge")
    assert slurm_gres(trn) == "gpu:trainium2:16"
    assert accelerator_devices(trn)[-1] == "/dev/neuron15"
    cpu = instance_type_info("ml.c5.xlarge")
    assert slurm_gres(cpu) is None and accelerator_devices(cpu) == ()


def test_slurm_conf_gres_lines() -> None:
    base = SlurmTopology(cluster_name="c", controllers=(("ip-10-1-0-10", "10.1.0.10"),),
                         compute_groups=(("gpu", "train"),))
    cpu = render_slurm_conf(base)
    assert "Gres" not in cpu and "AccountingStorageTRES" not in cpu  # CPU-only clusters: no GRES lines at all
    gpu = render_slurm_conf(SlurmTopology(**{**base.__dict__, "gres_types": ("gpu",)}))
    assert "GresTypes=gpu\n" in gpu and "AccountingStorageTRES" not in gpu  # no accounting: no TRES line
    acct = render_slurm_conf(SlurmTopology(**{**base.__dict__, "gres_types": ("gpu",),
                                              "accounting": AccountingConfig("10.1.0.11")}))
    assert "GresTypes=gpu\n" in acct and "AccountingStorageTRES=gres/gpu\n" in acct
    cpu_acct = render_slurm_conf(SlurmTopology(**{**base.__dict__, "accounting": AccountingConfig("10.1.0.11")}))
    assert "AccountingStorageTRES" not in cpu_acct


def test_gres_conf_files() -> None:
    assert render_gres_conf().splitlines()[-1] == f"Include {NODE_GRES_CONF}"
    devs = [f"/dev/nvidia{i}" for i in (10, 2, 0, 1)]
    lines = render_node_gres_conf("h100", devs).splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == [f"Name=gpu Type=h100 File=/dev/nvidia{i}" for i in (0, 1, 2, 10)]  # number order
    assert render_node_gres_conf(None, ["/dev/nvidia0"]).splitlines()[1:] == ["Name=gpu File=/dev/nvidia0"]
    assert render_node_gres_conf(None, []).count("\n") == 1  # comment only: the Include needs the file
    for bad_type, bad_dev in (("h 100", "/dev/nvidia0"), ("h100", "/dev/../etc/passwd0"), ("h100", "/tmp/x0")):
        with pytest.raises(ValueError):
            render_node_gres_conf(bad_type, [bad_dev])


def test_device_discovery() -> None:
    listing = "/dev/nvidia1\n/dev/nvidiactl\n/dev/nvidia-uvm\n/dev/nvidia0\n/dev/nvidia10\n"
    assert parse_devices(listing, "/dev/nvidia") == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia10"]
    assert device_prefix("/dev/neuron12") == "/dev/neuron"
    r = FakeRunner({"find": CommandResult(0, "/dev/nvidia0\n/dev/nvidia1\n", "")})
    assert find_devices(r, "/dev/nvidia") == ["/dev/nvidia0", "/dev/nvidia1"]
    assert r.calls[0] == ["find", "/dev", "-maxdepth", "1", "-type", "c", "-name", "nvidia[0-9]*"]


def test_dynamic_node_conf_has_gres() -> None:
    p5 = _group("gpu", "ml.p5.48xlarge")
    assert headnodes.node_gres(p5) == "gpu:h100:8"
    assert headnodes.node_gres(_group("cpu", "ml.c5.xlarge")) is None
    conf = units.node_conf(*headnodes.node_resources(p5), "gpu", headnodes.node_gres(p5))
    assert conf == "CPUs=96 RealMemory=1992294 Feature=gpu Gres=gpu:h100:8"
    argv = slurmd_argv(["10.0.0.1:6817"], 96, 1992294, "gpu", "gpu:h100:8")
    assert argv[-1].endswith(" Gres=gpu:h100:8") and "-Z" in argv


class FakeRunner:
    def __init__(self, answers: Mapping[str, CommandResult] | None = None) -> None:
        self.answers = dict(answers or {})
        self.calls: list[list[str]] = []
        self.inputs: dict[str, bytes] = {}

    def run(self, argv: Sequence[str], *, timeout: float, input: bytes | None = None, env: object = None,
            cwd: str | None = None) -> CommandResult:
        self.calls.append(list(argv))
        if input is not None:
            self.inputs[argv[-1]] = input
        return self.answers.get(argv[0], CommandResult(0, "", ""))

    def interactive_argv(self, argv: Sequence[str]) -> list[str]:
        return list(argv)


def _group(name: str, itype: str, node_type: NodeType = NodeType.COMPUTE) -> InstanceGroupSpec:
    return InstanceGroupSpec(name=name, instance_type=itype, instance_count=1, threads_per_core=1,
                             slurm_config=SlurmConfig(node_type=node_type))


def _written(r: FakeRunner) -> str | None:
    data = r.inputs.get(f"{NODE_GRES_CONF}.slurmpod-tmp")
    return data.decode() if data is not None else None


def test_boot_writes_node_gres_lines() -> None:
    gpu, cpu, ctl = _group("gpu", "ml.p5.48xlarge"), _group("cpu", "ml.c5.xlarge"), \
        _group("ctl", "ml.m5.large", NodeType.CONTROLLER)
    spec = ClusterSpec(name="c", instance_groups=(ctl, gpu, cpu))
    assert gpus.gres_types(spec) == ("gpu",)
    assert gpus.gres_types(ClusterSpec(name="c", instance_groups=(ctl, cpu))) == ()
    found = "".join(f"/dev/nvidia{i}\n" for i in range(8))
    r = FakeRunner({"find": CommandResult(0, found, "")})
    gpus.write_node_gres(r, spec, gpu)
    text = _written(r)
    assert text is not None and text.count("Name=gpu Type=h100 File=/dev/nvidia") == 8
    for g in (cpu, ctl):  # other nodes of a GPU cluster: the file exists, without lines
        r = FakeRunner()
        gpus.write_node_gres(r, spec, g)
        assert _written(r) is not None and "Name=" not in (_written(r) or "")
    r = FakeRunner()
    gpus.write_node_gres(r, ClusterSpec(name="c", instance_groups=(ctl, cpu)), cpu)
    assert r.calls == []  # CPU-only cluster: nothing written
    r = FakeRunner({"find": CommandResult(0, "/dev/nvidia0\n", "")})
    with pytest.raises(NodeBootError, match="has 8 accelerators but the node has 1"):
        gpus.write_node_gres(r, spec, gpu)


def test_gpu_group_added_to_a_running_cpu_cluster() -> None:
    """apply_topology's step: running nodes booted before the cluster had GPUs get their (empty) node file, so
    their slurmd can read the controller's new gres.conf (its Include) when it next restarts."""
    from slurmpod.domain.model import ClusterRecord, NodeRecord
    from slurmpod.domain.status import ClusterStatus, InstanceStatus

    ctl, cpu, gpu = _group("ctl", "ml.m5.large", NodeType.CONTROLLER), _group("cpu", "ml.c5.xlarge"), \
        _group("gpu", "ml.p5.48xlarge")
    login = _group("login", "ml.m5.large", NodeType.LOGIN)
    cluster = ClusterRecord(cluster_id="c1", account_id="1", region="us-east-1", name="c", arn="arn", status=
                            ClusterStatus.UPDATING, creation_time=0.0,
                            spec=ClusterSpec(name="c", instance_groups=(ctl, cpu, login, gpu)))

    def node(iid: str, group: str, phases: tuple[str, ...] = ("launched", "baseline")) -> NodeRecord:
        return NodeRecord(instance_id=iid, cluster_id="c1", group=group, seq=0, status=InstanceStatus.RUNNING,
                          launch_time=0.0, phases=phases)

    runners = {iid: FakeRunner({"test": CommandResult(0 if iid == "has" else 1, "", "")})
               for iid in ("i-ctl", "i-cpu", "i-login", "has", "i-new")}

    class Rt:
        def runner(self, cluster: ClusterRecord, n: NodeRecord) -> FakeRunner:
            return runners[n.instance_id]

    nodes = [node("i-ctl", "ctl"), node("i-cpu", "cpu"), node("i-login", "login"), node("has", "cpu"),
             node("i-new", "gpu", ("launched",))]
    gpus.ensure_node_gres_files(Rt(), cluster, nodes)  # type: ignore[arg-type]
    assert _written(runners["i-ctl"]) is not None and _written(runners["i-cpu"]) is not None
    assert runners["i-login"].calls == [] and runners["i-new"].calls == []  # login: no slurmd; new: its baseline
    assert _written(runners["has"]) is None  # already there
