"""The instance-type catalogue covers every ml.* ClusterInstanceType of the installed botocore."""

from __future__ import annotations

import botocore.session
import pytest

from slurmpod.domain.catalog import InstanceTypeInfo, instance_type_info, is_known, slurm_resources


def _enum_types() -> list[str]:
    model = botocore.session.get_session().get_service_model("sagemaker")
    return [v for v in model.shape_for("ClusterInstanceType").enum if v.startswith("ml.")]


@pytest.mark.parametrize("name", _enum_types())
def test_every_botocore_instance_type_is_in_the_table(name: str) -> None:
    assert is_known(name), f"{name} missing from slurmpod.domain.catalog"
    info = instance_type_info(name)
    assert info.name == name
    assert info.vcpus >= 1 and info.memory_mib >= 2 * 1024  # Graviton "medium": 1 vCPU, 2 GiB
    assert (info.gpus == 0) == (info.gpu_type is None)


@pytest.mark.parametrize(
    ("name", "vcpus", "gib", "gpus", "gpu_type"),
    [
        ("ml.c5.large", 2, 4, 0, None),
        ("ml.t3.medium", 2, 4, 0, None),
        ("ml.m5.24xlarge", 96, 384, 0, None),
        ("ml.r7i.48xlarge", 192, 1536, 0, None),
        ("ml.p5.48xlarge", 192, 2048, 8, "h100"),
        ("ml.p4d.24xlarge", 96, 1152, 8, "a100"),
        ("ml.g5.12xlarge", 48, 192, 4, "a10g"),
        ("ml.trn1.32xlarge", 128, 512, 16, "trainium"),
    ],
)
def test_known_shapes(name: str, vcpus: int, gib: int, gpus: int, gpu_type: str | None) -> None:
    assert instance_type_info(name) == InstanceTypeInfo(name, vcpus, gib * 1024, gpus, gpu_type)


def test_unknown_type_is_estimated_from_size() -> None:
    info = instance_type_info("ml.zz9.8xlarge")
    assert not is_known("ml.zz9.8xlarge")
    assert (info.vcpus, info.memory_mib, info.gpus) == (32, 128 * 1024, 0)
    assert instance_type_info("ml.zz9.weird").vcpus == 2


def test_slurm_resources() -> None:
    info = instance_type_info("ml.c5.large")
    assert slurm_resources(info) == (2, int(4096 * 0.95))
    assert slurm_resources(info, threads_per_core=2) == (2, 3891)
    assert slurm_resources(info, threads_per_core=1) == (1, 3891)
    cpus, mem = slurm_resources(instance_type_info("ml.p5.48xlarge"), 1)
    assert cpus == 96 and mem < 2048 * 1024
