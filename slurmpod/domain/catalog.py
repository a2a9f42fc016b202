"""Instance-type catalogue: what each ``ml.*`` HyperPod instance type offers (pure data).

Sizes follow the public EC2 specifications of the underlying instance types. A type the table does not
know is estimated from its size suffix (``xlarge`` = 4 vCPU, ``Nxlarge`` = 4N vCPU, 4 GiB per vCPU) so a
new botocore release never breaks cluster creation. ``slurm_resources`` turns an entry into what a
node advertises to Slurm (``CPUs=`` / ``RealMemory=``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1024

#: fraction of physical memory a node advertises as RealMemory (the OS keeps the rest)
REAL_MEMORY_FRACTION = 0.95


@dataclass(frozen=True)
class InstanceTypeInfo:
    name: str
    vcpus: int
    memory_mib: int
    gpus: int = 0
    gpu_type: str | None = None  # "h100", "a10g", "trainium2" ... (accelerators count as gpus)


# size suffix -> vCPUs for the regular x86 families
_SIZE_VCPUS: dict[str, int] = {
    "medium": 2,
    "large": 2,
    "xlarge": 4,
    "2xlarge": 8,
    "3xlarge": 12,
    "4xlarge": 16,
    "6xlarge": 24,
    "8xlarge": 32,
    "9xlarge": 36,
    "12xlarge": 48,
    "16xlarge": 64,
    "18xlarge": 72,
    "24xlarge": 96,
    "32xlarge": 128,
    "36xlarge": 144,
    "48xlarge": 192,
}

# CPU families: GiB of memory per vCPU
_FAMILY_GIB_PER_VCPU: dict[str, int] = {
    "c5": 2,
    "c6i": 2,
    "c6a": 2,
    "c8a": 2,
    "c6g": 2,  # Graviton: no SMT, "medium" is 1 vCPU (explicit below)
    "c7g": 2,
    "c8g": 2,
    "m5": 4,
    "m6i": 4,
    "m7i": 4,
    "m6a": 4,
    "m8a": 4,
    "m6g": 4,
    "m7g": 4,
    "m8g": 4,
    "t3": 4,
    "r5d": 8,
    "r6i": 8,
    "r7i": 8,
    "i3en": 8,
}

# Types whose shape does not follow their family's ratio, and accelerated types:
# name (without "ml.") -> (vCPUs, memory GiB, accelerators, accelerator type)
_EXPLICIT: dict[str, tuple[float, float, int, str | None]] = {
    "t3.medium": (2, 4, 0, None),
    # Graviton medium sizes: 1 vCPU
    "c6g.medium": (1, 2, 0, None),
    "c7g.medium": (1, 2, 0, None),
    "c8g.medium": (1, 2, 0, None),
    "m6g.medium": (1, 4, 0, None),
    "m7g.medium": (1, 4, 0, None),
    "m8g.medium": (1, 4, 0, None),
    # c5n: network-optimised, a little more memory than c5
    "c5n.large": (2, 5.25, 0, None),
    "c5n.xlarge": (4, 10.5, 0, None),
    "c5n.2xlarge": (8, 21, 0, None),
    "c5n.4xlarge": (16, 42, 0, None),
    "c5n.9xlarge": (36, 96, 0, None),
    "c5n.18xlarge": (72, 192, 0, None),
    # NVIDIA A100 / H100 / H200 / Blackwell
    "p4d.24xlarge": (96, 1152, 8, "a100"),
    "p4de.24xlarge": (96, 1152, 8, "a100-80gb"),
    "p5.4xlarge": (16, 256, 1, "h100"),
    "p5.48xlarge": (192, 2048, 8, "h100"),
    "p5e.48xlarge": (192, 2048, 8, "h200"),
    "p5en.48xlarge": (192, 2048, 8, "h200"),
    "p6-b200.48xlarge": (192, 2048, 8, "b200"),
    "p6-b300.48xlarge": (192, 4096, 8, "b300"),
    "p6e-gb200.36xlarge": (144, 960, 4, "gb200"),
    # AWS Trainium
    "trn1.32xlarge": (128, 512, 16, "trainium"),
    "trn1n.32xlarge": (128, 512, 16, "trainium"),
    "trn2.3xlarge": (12, 128, 1, "trainium2"),
    "trn2.48xlarge": (192, 2048, 16, "trainium2"),
    # g5: NVIDIA A10G
    "g5.xlarge": (4, 16, 1, "a10g"),
    "g5.2xlarge": (8, 32, 1, "a10g"),
    "g5.4xlarge": (16, 64, 1, "a10g"),
    "g5.8xlarge": (32, 128, 1, "a10g"),
    "g5.12xlarge": (48, 192, 4, "a10g"),
    "g5.16xlarge": (64, 256, 1, "a10g"),
    "g5.24xlarge": (96, 384, 4, "a10g"),
    "g5.48xlarge": (192, 768, 8, "a10g"),
    # g4dn: NVIDIA T4
    "g4dn.xlarge": (4, 16, 1, "t4"),
    "g4dn.2xlarge": (8, 32, 1, "t4"),
    "g4dn.4xlarge": (16, 64, 1, "t4"),
    "g4dn.8xlarge": (32, 128, 1, "t4"),
    "g4dn.12xlarge": (48, 192, 4, "t4"),
    "g4dn.16xlarge": (64, 256, 1, "t4"),
    # g6 / gr6: NVIDIA L4
    "g6.xlarge": (4, 16, 1, "l4"),
    "g6.2xlarge": (8, 32, 1, "l4"),
    "g6.4xlarge": (16, 64, 1, "l4"),
    "g6.8xlarge": (32, 128, 1, "l4"),
    "g6.12xlarge": (48, 192, 4, "l4"),
    "g6.16xlarge": (64, 256, 1, "l4"),
    "g6.24xlarge": (96, 384, 4, "l4"),
    "g6.48xlarge": (192, 768, 8, "l4"),
    "gr6.4xlarge": (16, 128, 1, "l4"),
    "gr6.8xlarge": (32, 256, 1, "l4"),
    # g6e: NVIDIA L40S
    "g6e.xlarge": (4, 32, 1, "l40s"),
    "g6e.2xlarge": (8, 64, 1, "l40s"),
    "g6e.4xlarge": (16, 128, 1, "l40s"),
    "g6e.8xlarge": (32, 256, 1, "l40s"),
    "g6e.12xlarge": (48, 384, 4, "l40s"),
    "g6e.16xlarge": (64, 512, 1, "l40s"),
    "g6e.24xlarge": (96, 768, 4, "l40s"),
    "g6e.48xlarge": (192, 1536, 8, "l40s"),
    # g7e: NVIDIA RTX PRO 6000 Blackwell Server Edition
    "g7e.2xlarge": (8, 64, 1, "rtx-pro-6000"),
    "g7e.4xlarge": (16, 128, 1, "rtx-pro-6000"),
    "g7e.8xlarge": (32, 256, 1, "rtx-pro-6000"),
    "g7e.12xlarge": (48, 512, 2, "rtx-pro-6000"),
    "g7e.24xlarge": (96, 1024, 4, "rtx-pro-6000"),
    "g7e.48xlarge": (192, 2048, 8, "rtx-pro-6000"),
    # g7 (botocore 1.44): no public sizing yet; assumed to match g7e
    "g7.2xlarge": (8, 64, 1, "rtx-pro-6000"),
    "g7.4xlarge": (16, 128, 1, "rtx-pro-6000"),
    "g7.8xlarge": (32, 256, 1, "rtx-pro-6000"),
    "g7.12xlarge": (48, 512, 2, "rtx-pro-6000"),
    "g7.24xlarge": (96, 1024, 4, "rtx-pro-6000"),
    "g7.48xlarge": (192, 2048, 8, "rtx-pro-6000"),
}

_NXLARGE = re.compile(r"^(\d+)xlarge$")


def _strip(name: str) -> str:
    return name[3:] if name.startswith("ml.") else name


def _size_vcpus(size: str) -> int | None:
    if size in _SIZE_VCPUS:
        return _SIZE_VCPUS[size]
    m = _NXLARGE.match(size)
    if m:
        return 4 * int(m.group(1))
    return None


def is_known(name: str) -> bool:
    """True when ``name`` is in the table (not merely estimated from its size)."""
    base = _strip(name)
    if base in _EXPLICIT:
        return True
    family, _, size = base.partition(".")
    return family in _FAMILY_GIB_PER_VCPU and _size_vcpus(size) is not None


def instance_type_info(name: str) -> InstanceTypeInfo:
    """Shape of ``name`` (``ml.c5.large`` or ``c5.large``); unknown types are estimated from the size."""
    base = _strip(name)
    if base in _EXPLICIT:
        vcpus, gib, gpus, gpu_type = _EXPLICIT[base]
        return InstanceTypeInfo(name, int(vcpus), int(gib * GIB), gpus, gpu_type)
    family, _, size = base.partition(".")
    vcpus = _size_vcpus(size) or 2
    gib_per_vcpu = _FAMILY_GIB_PER_VCPU.get(family, 4)
    return InstanceTypeInfo(name, vcpus, vcpus * gib_per_vcpu * GIB)


def slurm_resources(info: InstanceTypeInfo, threads_per_core: int | None = None) -> tuple[int, int]:
    """``(CPUs, RealMemory MiB)`` a node of this type advertises to Slurm.

    ``threads_per_core=1`` (HyperPod's "hyper-threading off") halves the CPUs; RealMemory is
    ``REAL_MEMORY_FRACTION`` of physical memory, rounded down.
    """
    cpus = info.vcpus
    if threads_per_core == 1 and cpus > 1:
        cpus = cpus // 2
    return cpus, int(info.memory_mib * REAL_MEMORY_FRACTION)


#: the device files a host of an accelerated type has, one per accelerator (NVIDIA driver / AWS Neuron driver)
NVIDIA_DEVICE_PREFIX = "/dev/nvidia"
NEURON_DEVICE_PREFIX = "/dev/neuron"


def is_trainium(info: InstanceTypeInfo) -> bool:
    return (info.gpu_type or "").startswith("trainium")


def accelerator_devices(info: InstanceTypeInfo) -> tuple[str, ...]:
    """The accelerators' device files on a host of this type, in index order (``/dev/nvidia0`` ...; Trainium:
    ``/dev/neuron0`` ...); empty for CPU types."""
    prefix = NEURON_DEVICE_PREFIX if is_trainium(info) else NVIDIA_DEVICE_PREFIX
    return tuple(f"{prefix}{i}" for i in range(info.gpus))


def slurm_gres(info: InstanceTypeInfo) -> str | None:
    """The ``Gres=`` a node of this type advertises: ``gpu:<type>:<n>`` (HyperPod's ``gpu:h100:8``), None for CPU
    types. Trainium chips are advertised as ``gpu`` GRES too (``gpu:trainium2:16``), so ``--gres=gpu:N`` and
    ``--gpus-per-node`` schedule them and sacct counts them as ``gres/gpu``."""
    if info.gpus <= 0:
        return None
    return f"gpu:{info.gpu_type}:{info.gpus}" if info.gpu_type else f"gpu:{info.gpus}"
