#!/usr/bin/env python3
"""The provisioning steps of a HyperPod Slurm node, in the way AWS's base-config runs them (our own code).

* reads ``provisioning_parameters.json`` (controller/login group) and the resource config (every instance),
* learns this node's address by connecting a UDP socket (no packet is sent) and finds its own entry by
  ``CustomerIpAddress``, hence its group and Slurm role,
* reads its instance metadata with IMDSv2 (token, then instance-id/local-ipv4),
* runs each step under ``sudo bash``: packages (apt-get), users, Slurm daemons (start_slurm.sh), log rotation,
* writes what it found to ``/var/lib/base-config-like/node.json`` for the test to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
import urllib.request

SLURM_CONF = os.environ.get("SLURM_CONF", "/opt/slurm/etc/slurm.conf")
FACTS = "/var/lib/base-config-like/node.json"
#: any non-local address will do: connect() on a UDP socket only picks the route and source address
PROBE = ("10.254.254.254", 1)
IMDS = "http://169.254.169.254/latest"
SLURMCTLD_PORT = 6817


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def addresses(resource_config: dict, group: str | None) -> list[str]:
    for g in resource_config.get("InstanceGroups", []):
        if g.get("Name") == group:
            return [i["CustomerIpAddress"] for i in g.get("Instances") or []]
    return []


def find_instance(resource_config: dict, ip: str) -> tuple[dict | None, dict | None]:
    for g in resource_config.get("InstanceGroups", []):
        for inst in g.get("Instances") or []:
            if inst.get("CustomerIpAddress") == ip:
                return g, inst
    return None, None


def own_address(peers: list[str]) -> tuple[str, str]:
    """(address, how): the UDP-socket trick towards PROBE; without a route there, towards a cluster peer."""
    for target, how in [(PROBE, "probe")] + [((p, 1), "peer") for p in peers]:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect(target)
            return s.getsockname()[0], how
        except OSError as exc:
            print(f"[base-config-like] UDP connect to {target[0]} failed: {exc!r}")
        finally:
            s.close()
    raise SystemExit("cannot learn this node's address")


def imds_v2() -> dict[str, str]:
    """instance-id, local-ipv4 and ami-id with a session token (never through an HTTP proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(f"{IMDS}/api/token", method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"})
    token = opener.open(req, timeout=5).read().decode()
    out = {}
    for key in ("instance-id", "local-ipv4", "ami-id"):
        req = urllib.request.Request(f"{IMDS}/meta-data/{key}", headers={"X-aws-ec2-metadata-token": token})
        out[key] = opener.open(req, timeout=5).read().decode()
    return out


def wait_for_slurm_conf(controllers: list[str], timeout: float = 60.0) -> bool:
    """Like base-config: no slurm.conf is fine (configless nodes); one that exists must name a controller."""
    deadline = time.monotonic() + timeout
    while True:
        if not os.path.exists(SLURM_CONF):
            print(f"[base-config-like] {SLURM_CONF} is not present")
            return False
        with open(SLURM_CONF) as f:
            text = f.read()
        if any(ip in text for ip in controllers):
            print(f"[base-config-like] {SLURM_CONF} names a controller")
            return True
        if time.monotonic() > deadline:
            raise SystemExit(f"{SLURM_CONF} names none of the controllers {controllers}")
        time.sleep(1)


def step(script: str, *args: str) -> None:
    print(f"[base-config-like] step: sudo bash {script} {' '.join(args)}")
    subprocess.run(["sudo", "-n", "bash", script, *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-rc", "--resource_config", required=True)
    parser.add_argument("-pp", "--provisioning_parameters", required=True)
    parser.add_argument("--stage", default="on_create")
    args = parser.parse_args()

    params = load(args.provisioning_parameters)
    rc = load(args.resource_config)
    if params.get("workload_manager") != "slurm":
        raise SystemExit(f"workload_manager is {params.get('workload_manager')!r}, not slurm")
    controllers = addresses(rc, params.get("controller_group"))
    if not controllers:
        raise SystemExit(f"controller group {params.get('controller_group')!r} has no instance in "
                         f"{args.resource_config}")

    step("./utils/install_packages.sh")
    step("./utils/add_users.sh", "shared_users.txt")

    conf_present = wait_for_slurm_conf(controllers)
    ip, how = own_address(controllers)
    group, instance = find_instance(rc, ip)
    if group is None or instance is None:
        raise SystemExit(f"this node ({ip}) is not in {args.resource_config}")
    if group["Name"] == params.get("controller_group"):
        node_type = "controller"
    elif group["Name"] == params.get("login_group"):
        node_type = "login"
    else:
        node_type = "compute"
    print(f"[base-config-like] this node: {ip} ({how}), {instance.get('InstanceName')} of {group['Name']}: {node_type}")
    metadata = imds_v2()

    step("./start_slurm.sh", node_type, ",".join(controllers))
    step("./utils/enable_log_rotation.sh")

    os.makedirs(os.path.dirname(FACTS), exist_ok=True)
    facts = {"stage": args.stage, "ip": ip, "ip_from": how, "group": group["Name"], "node_type": node_type,
             "instance_name": instance.get("InstanceName"), "instance_id": instance.get("InstanceId"),
             "controllers": controllers, "slurm_conf_present": conf_present, "imds": metadata,
             "sagemaker_cluster": os.path.isdir("/opt/sagemaker_cluster")}
    with open(FACTS, "w") as f:
        json.dump(facts, f, indent=2)
    print("[base-config-like] success: all provisioning steps completed")


if __name__ == "__main__":
    main()
