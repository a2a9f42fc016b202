"""IMDS of local nodes (slurmpod/providers/local/imds*.py).

* Protocol: ``ImdsNode.respond`` called directly (no sockets), with a fake clock for token expiry.
* HTTP framing: an ``ImdsServer`` serving a plain loopback socket (keep-alive, pipelining, malformed requests).
* Root only: two network namespaces of this test's own, each attached as a node; everything is checked from
  inside them with curl (seed 003's exact commands included) and removed in ``finally``.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurmpod.providers.local import imds as imds_mod
from slurmpod.providers.local.imds import ImdsServer
from slurmpod.providers.local.imds_protocol import (
    MAX_TOKENS,
    BadRequest,
    ImdsNode,
    NodeMetadata,
    Response,
    parse_head,
)
from slurmpod.providers.local.imds_source import http_tokens, record_metadata
from slurmpod.providers.local.state import InstanceRecord

TTL = "x-aws-ec2-metadata-token-ttl-seconds"
TOK = "x-aws-ec2-metadata-token"


def md(**kw: str) -> NodeMetadata:
    base = {"instance_id": "i-0123456789abcdef0", "instance_type": "ml.c5.xlarge", "image_id": "ami-0aaaabbbbcccc0001",
            "local_ipv4": "10.231.7.10", "hostname": "ip-10-231-7-10", "mac": "02:42:0a:e7:07:0a"}
    base.update(kw)
    return NodeMetadata(**base)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def node(http_tokens: str = "optional", clock: Callable[[], float] = time.monotonic,
         meta: Callable[[], NodeMetadata] = md) -> ImdsNode:
    return ImdsNode("i-0123456789abcdef0", meta, http_tokens, clock=clock)


def token(n: ImdsNode, ttl: str = "21600") -> str:
    r = n.respond("PUT", "/latest/api/token", {TTL: ttl})
    assert r.status == 200, r
    return r.body.decode()


def get(n: ImdsNode, path: str, tok: str | None = None) -> Response:
    return n.respond("GET", path, {TOK: tok} if tok is not None else {})


# ---------------------------------------------------------------------------------------------- protocol


def test_token_flow_v2() -> None:
    n = node()
    r = n.respond("PUT", "/latest/api/token", {TTL: "21600"})
    assert r.status == 200 and ("Content-Type", "text/plain") in r.headers
    assert ("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600") in r.headers
    tok = r.body.decode()
    assert len(tok) >= 40 and "\n" not in tok
    got = get(n, "/latest/meta-data/ami-id", tok)
    assert (got.status, got.body) == (200, b"ami-0aaaabbbbcccc0001")  # no trailing newline, as on EC2


@pytest.mark.parametrize("ttl", [None, "", "0", "21601", "abc", "-5", "1.5"])
def test_token_ttl_missing_or_invalid_is_400(ttl: str | None) -> None:
    headers = {} if ttl is None else {TTL: ttl}
    r = node().respond("PUT", "/latest/api/token", headers)
    assert r.status == 400
    assert b"<title>400 - Bad Request</title>" in r.body and ("Content-Type", "text/html") in r.headers


def test_token_ttl_bounds_accepted() -> None:
    n = node()
    for ttl in ("1", "21600", " 60 "):
        assert n.respond("PUT", "/latest/api/token", {TTL: ttl}).status == 200


def test_token_put_with_x_forwarded_for_is_403() -> None:
    r = node().respond("PUT", "/latest/api/token", {TTL: "60", "x-forwarded-for": "10.0.0.1"})
    assert r.status == 403 and b"403 - Forbidden" in r.body


def test_token_path_other_methods_and_writes_405() -> None:
    n = node()
    assert get(n, "/latest/api/token").status == 405
    assert n.respond("POST", "/latest/meta-data/ami-id", {}).status == 405
    assert n.respond("PUT", "/latest/meta-data/ami-id", {TTL: "60"}).status == 405


def test_v1_allowed_by_default_and_refused_when_v2_only() -> None:
    assert get(node(), "/latest/meta-data/instance-id").body == b"i-0123456789abcdef0"
    strict = node("required")
    r = get(strict, "/latest/meta-data/instance-id")
    assert r.status == 401 and b"<h1>401 - Unauthorized</h1>" in r.body
    assert get(strict, "/latest/meta-data/instance-id", token(strict)).status == 200


def test_invalid_and_expired_tokens_are_401_even_in_v1_mode() -> None:
    clock = Clock()
    n = node(clock=clock)
    tok = token(n, "10")
    assert get(n, "/latest/meta-data/ami-id", "not-a-token").status == 401
    assert get(n, "/latest/meta-data/ami-id", "").status == 401
    clock.now += 9
    ok = get(n, "/latest/meta-data/ami-id", tok)
    assert ok.status == 200 and ("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "1") in ok.headers
    clock.now += 2
    assert get(n, "/latest/meta-data/ami-id", tok).status == 401


def test_tokens_are_per_node() -> None:
    a, b = node(), node()
    tok = token(a)
    assert get(a, "/latest/meta-data/ami-id", tok).status == 200
    assert get(b, "/latest/meta-data/ami-id", tok).status == 401


def test_token_store_is_bounded() -> None:
    n = node()
    first = token(n)
    for _ in range(MAX_TOKENS):
        token(n)
    assert get(n, "/", first).status == 401  # the oldest went first
    assert len(n._tokens) == MAX_TOKENS


def test_listings() -> None:
    n = node()
    assert get(n, "/").body == b"latest"
    assert get(n, "/latest/").body == b"dynamic\nmeta-data"
    keys = get(n, "/latest/meta-data/").body.decode().split("\n")
    for key in ("ami-id", "instance-id", "instance-type", "local-ipv4", "local-hostname", "hostname", "mac",
                "placement/", "network/", "services/"):
        assert key in keys
    assert keys == sorted(keys) and "iam/" not in keys
    assert get(n, "/latest/meta-data").body.decode().split("\n") == keys  # directories answer without "/" too
    assert get(n, "/latest/meta-data/placement/").body == b"availability-zone\nregion"
    assert get(n, "/latest/meta-data/placement").body == b"availability-zone\nregion"
    assert get(n, "/latest/dynamic/").body == b"instance-identity/"
    assert get(n, "/latest/dynamic/instance-identity/").body == b"document"
    mac = "02:42:0a:e7:07:0a"
    assert get(n, "/latest/meta-data/network/interfaces/macs/").body == f"{mac}/".encode()
    assert get(n, f"/latest/meta-data/network/interfaces/macs/{mac}/local-ipv4s").body == b"10.231.7.10"


def test_values_and_defaults() -> None:
    n = node()
    want = {"instance-type": "c5.xlarge", "local-ipv4": "10.231.7.10", "hostname": "ip-10-231-7-10",
            "local-hostname": "ip-10-231-7-10", "mac": "02:42:0a:e7:07:0a", "placement/region": "us-east-1",
            "placement/availability-zone": "us-east-1a", "ami-launch-index": "0"}
    for key, value in want.items():
        assert get(n, "/latest/meta-data/" + key).body.decode() == value, key
    west = node(meta=lambda: md(region="ap-northeast-1", availability_zone="ap-northeast-1c"))
    assert get(west, "/latest/meta-data/placement/region").body == b"ap-northeast-1"
    assert get(west, "/latest/meta-data/placement/availability-zone").body == b"ap-northeast-1c"
    assert get(node(meta=lambda: md(region="eu-west-1")), "/latest/meta-data/placement/availability-zone").body \
        == b"eu-west-1a"
    assert get(node(meta=lambda: md(instance_type="t3.medium")), "/latest/meta-data/instance-type").body \
        == b"t3.medium"


def test_identity_document() -> None:
    n = node(meta=lambda: md(account_id="123456789012", region="us-west-2"))
    r = get(n, "/latest/dynamic/instance-identity/document")
    assert r.status == 200 and b'"region" : "us-west-2"' in r.body  # EC2's " : " separators
    doc = json.loads(r.body)
    assert doc["accountId"] == "123456789012" and doc["availabilityZone"] == "us-west-2a"
    assert doc["imageId"] == "ami-0aaaabbbbcccc0001" and doc["instanceId"] == "i-0123456789abcdef0"
    assert doc["instanceType"] == "c5.xlarge" and doc["privateIp"] == "10.231.7.10"
    assert doc["architecture"] and doc["version"] == "2017-09-30"


def test_unknown_paths_are_404_pages() -> None:
    n = node()
    for path in ("/latest/meta-data/iam/", "/latest/meta-data/iam/security-credentials/", "/latest/nope",
                 "/latest/meta-data/nope", "/2009-04-04/meta-data/", "/latest/user-data", "/x",
                 "/latest//meta-data/", "/latest/meta-data/placement/region/more"):
        r = get(n, path)
        assert r.status == 404, path
        assert b"<title>404 - Not Found</title>" in r.body and ("Content-Type", "text/html") in r.headers


def test_query_string_ignored_and_leaf_with_slash() -> None:
    n = node()
    assert get(n, "/latest/meta-data/ami-id?x=1").body == b"ami-0aaaabbbbcccc0001"
    assert get(n, "/latest/meta-data/ami-id/").body == b"ami-0aaaabbbbcccc0001"


def test_values_are_read_at_request_time() -> None:
    current = {"ami": "ami-0aaaabbbbcccc0001"}
    n = node(meta=lambda: md(image_id=current["ami"]))
    tok = token(n)
    assert get(n, "/latest/meta-data/ami-id", tok).body == b"ami-0aaaabbbbcccc0001"
    current["ami"] = "ami-0ddddeeeeffff0002"  # e.g. after a root-volume replacement
    assert get(n, "/latest/meta-data/ami-id", tok).body == b"ami-0ddddeeeeffff0002"


def test_bad_http_tokens_value() -> None:
    with pytest.raises(ValueError):
        node("sometimes")


def test_parse_head() -> None:
    head = parse_head(b"GET /latest/meta-data/ HTTP/1.1\r\nHost: x\r\nX-aws-ec2-metadata-token: abc ")
    assert (head.method, head.target, head.headers[TOK], head.keep_alive) == ("GET", "/latest/meta-data/", "abc", True)
    assert not parse_head(b"GET / HTTP/1.0").keep_alive
    assert not parse_head(b"GET / HTTP/1.1\r\nConnection: close").keep_alive
    for bad in (b"GET /", b"GET / HTTP/2", b"G3T / HTTP/1.1", b"GET / HTTP/1.1\r\nno colon",
                b"GET / HTTP/1.1\r\n folded: x"):
        with pytest.raises(BadRequest):
            parse_head(bad)


def test_record_metadata_follows_meta_json(tmp_path: Path) -> None:
    rec = InstanceRecord(cluster_id="c1", instance_id="i-0123456789abcdef0", group="g", instance_type="ml.c5.xlarge",
                         image_id="ami-0aaaabbbbcccc0001", image_root="/", volumes=[], ip="10.231.7.10",
                         hostname="ip-10-231-7-10", netns="sp-c1-89abcdef0", veth="spv0ae7070a",
                         metadata={"region": "eu-central-1", "account-id": "123456789012"})
    meta = tmp_path / "meta.json"
    rec.save(meta)
    fn = record_metadata(meta, rec)
    first = fn()
    assert (first.image_id, first.effective_region, first.effective_az, first.account_id) == (
        "ami-0aaaabbbbcccc0001", "eu-central-1", "eu-central-1a", "123456789012")
    rec.image_id = "ami-0ddddeeeeffff0002"
    rec.save(meta)
    assert fn().image_id == "ami-0ddddeeeeffff0002"
    meta.unlink()
    assert fn().image_id == "ami-0ddddeeeeffff0002"  # the last known values while the record is gone
    assert http_tokens(rec) == "optional"
    rec.metadata["http-tokens"] = "required"
    assert http_tokens(rec) == "required"


# ---------------------------------------------------------------------------------------------- framing


@pytest.fixture
def loop_server() -> Iterator[tuple[ImdsServer, int]]:
    server = ImdsServer()
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server.serve_socket("i-0123456789abcdef0", sock, md)
    try:
        yield server, port
    finally:
        server.close()
    assert not [t for t in threading.enumerate() if t.name == "slurmpod-imds"]


def test_http_keep_alive_token_flow(loop_server: tuple[ImdsServer, int]) -> None:
    _, port = loop_server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("PUT", "/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    r = conn.getresponse()
    tok = r.read().decode()
    assert r.status == 200 and r.getheader("Server") == "EC2ws"
    conn.request("GET", "/latest/meta-data/instance-type", headers={"X-aws-ec2-metadata-token": tok})
    r = conn.getresponse()
    assert (r.status, r.read()) == (200, b"c5.xlarge")
    conn.request("HEAD", "/latest/meta-data/ami-id")
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Length") == "21" and r.read() == b""
    conn.request("GET", "/latest/meta-data/iam/")
    r = conn.getresponse()
    assert r.status == 404 and b"404 - Not Found" in r.read()
    conn.close()


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_http_pipelining_and_close(loop_server: tuple[ImdsServer, int]) -> None:
    _, port = loop_server
    out = raw(port, b"GET /latest/meta-data/ami-id HTTP/1.1\r\nHost: x\r\n\r\n"
                    b"GET /latest/meta-data/local-ipv4 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert out.endswith(b"10.231.7.10") and b"ami-0aaaabbbbcccc0001" in out


def test_http_malformed_and_oversized(loop_server: tuple[ImdsServer, int]) -> None:
    _, port = loop_server
    assert raw(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400 Bad Request")
    assert raw(port, b"GET / HTTP/1.1\r\nX: " + b"a" * 10000).startswith(b"HTTP/1.1 400")
    assert raw(port, b"PUT /latest/api/token HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").startswith(
        b"HTTP/1.1 400")
    body = b"PUT /latest/api/token HTTP/1.1\r\nX-aws-ec2-metadata-token-ttl-seconds: 5\r\nContent-Length: 3\r\n" \
           b"Connection: close\r\n\r\nabc"
    assert raw(port, body).startswith(b"HTTP/1.1 200 OK")


def test_detach_and_one_thread_for_many(loop_server: tuple[ImdsServer, int]) -> None:
    server, port = loop_server
    before = threading.active_count()
    ports = []
    for k in range(20):
        sock = socket.create_server(("127.0.0.1", 0))
        ports.append(sock.getsockname()[1])
        server.serve_socket(f"i-{k:017x}", sock, functools.partial(md, instance_id=f"i-{k:017x}"))
    assert threading.active_count() == before
    assert raw(ports[7], b"GET /latest/meta-data/instance-id HTTP/1.0\r\n\r\n").endswith(b"i-00000000000000007")
    assert len(server.attached()) == 21
    server.detach("i-00000000000000007")
    server.detach("i-00000000000000007")  # idempotent
    with pytest.raises(OSError):
        raw(ports[7], b"GET / HTTP/1.0\r\n\r\n")
    assert raw(port, b"GET / HTTP/1.0\r\n\r\n").endswith(b"latest")


# ---------------------------------------------------------------------------------------------- namespaces

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("curl") and shutil.which("nsenter")),
    reason="needs root, iproute2, curl and nsenter")

SEED_003 = ('TOKEN=$(curl -s -X PUT "http://169.254.169.254/latest/api/token" '
            '-H "X-aws-ec2-metadata-token-ttl-seconds: 21600")\n'
            'curl -s -H "X-aws-ec2-metadata-token: $TOKEN" http://169.254.169.254/latest/meta-data/ami-id')
ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}  # no proxy variables


def in_ns(ns: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=20, env=ENV)


def curl(ns: str, path: str, *args: str) -> tuple[int, str]:
    """(HTTP status, body) of a request made from inside ``ns``."""
    proc = in_ns(ns, "curl", "-s", "-m", "5", "-w", "\n%{http_code}", *args, f"http://169.254.169.254{path}")
    body, _, code = proc.stdout.rpartition("\n")
    return int(code or 0), body


def listeners(ns: str | None) -> str:
    argv = ["ss", "-Htln"]
    proc = in_ns(ns, *argv) if ns else subprocess.run(argv, capture_output=True, text=True, timeout=10, env=ENV)
    return proc.stdout


@needs_root
def test_nodes_in_their_own_netns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(imds_mod, "NETNS_CHECK", 0.2)
    tag = uuid.uuid4().hex[:8]
    names = {"a": f"spimdstest-{tag}-a", "b": f"spimdstest-{tag}-b"}
    ips = {"a": "10.254.77.11", "b": "10.254.77.12"}
    amis = {"a": "ami-0aaaaaaaaaaaaaaa1", "b": "ami-0bbbbbbbbbbbbbbb2"}
    server = ImdsServer()
    created: list[str] = []
    try:
        for k, ns in names.items():
            subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
            created.append(ns)
            subprocess.run(["ip", "-n", ns, "-batch", "-"], check=True, timeout=10, text=True, input=(
                "link add eth0 type veth peer name eth1\n"
                f"addr add {ips[k]}/24 dev eth0\n"
                "link set eth0 up\n"))
        server.attach("i-000000000000000aa", f"/run/netns/{names['a']}",
                      lambda: md(instance_id="i-000000000000000aa", image_id=amis["a"], local_ipv4=ips["a"],
                                 mac=""))
        server.attach("i-000000000000000bb", f"/run/netns/{names['b']}",
                      lambda: md(instance_id="i-000000000000000bb", image_id=amis["b"], local_ipv4=ips["b"],
                                 instance_type="ml.g5.xlarge", region="us-west-2"), http_tokens="required")
        # idempotent: attaching again keeps the listener (and would keep tokens)
        server.attach("i-000000000000000aa", f"/run/netns/{names['a']}",
                      lambda: md(instance_id="i-000000000000000aa", image_id=amis["a"], local_ipv4=ips["a"],
                                 mac=""))
        a, b = names["a"], names["b"]

        # seed 003's exact commands print each node's own AMI id
        for k, ns in names.items():
            proc = in_ns(ns, "bash", "-c", SEED_003)
            assert (proc.returncode, proc.stdout) == (0, amis[k]), proc

        # IMDSv2 token flow, per-node values
        tok_a = curl(a, "/latest/api/token", "-X", "PUT", "-H", "X-aws-ec2-metadata-token-ttl-seconds: 300")[1]
        hdr_a = f"X-aws-ec2-metadata-token: {tok_a}"
        assert curl(a, "/latest/meta-data/instance-id", "-H", hdr_a) == (200, "i-000000000000000aa")
        assert curl(a, "/latest/meta-data/local-ipv4", "-H", hdr_a) == (200, ips["a"])
        mac_a = json.loads(in_ns(a, "ip", "-j", "link", "show", "eth0").stdout)[0]["address"]
        assert curl(a, "/latest/meta-data/mac", "-H", hdr_a) == (200, mac_a)  # eth0's, read inside the netns
        tok_b = curl(b, "/latest/api/token", "-X", "PUT", "-H", "X-aws-ec2-metadata-token-ttl-seconds: 300")[1]
        hdr_b = f"X-aws-ec2-metadata-token: {tok_b}"
        assert curl(b, "/latest/meta-data/instance-type", "-H", hdr_b) == (200, "g5.xlarge")
        assert curl(b, "/latest/meta-data/placement/availability-zone", "-H", hdr_b) == (200, "us-west-2a")
        doc = json.loads(curl(b, "/latest/dynamic/instance-identity/document", "-H", hdr_b)[1])
        assert (doc["instanceId"], doc["privateIp"], doc["imageId"]) == ("i-000000000000000bb", ips["b"], amis["b"])

        # v1 on A; B is v2-only; A's token is refused by B; bad requests
        assert curl(a, "/latest/meta-data/ami-id") == (200, amis["a"])
        assert curl(b, "/latest/meta-data/ami-id")[0] == 401
        assert curl(b, "/latest/meta-data/ami-id", "-H", hdr_a)[0] == 401
        assert curl(a, "/latest/api/token", "-X", "PUT")[0] == 400
        assert curl(a, "/latest/api/token", "-X", "PUT", "-H", "X-aws-ec2-metadata-token-ttl-seconds: 60",
                    "-H", "X-Forwarded-For: 1.2.3.4")[0] == 403

        # inside a node the address is local on lo; the host has no address, no listener
        route = in_ns(a, "ip", "route", "get", "169.254.169.254").stdout
        assert route.startswith("local 169.254.169.254") and "dev lo" in route
        host_addrs = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=10).stdout
        assert "169.254.169.254" not in host_addrs
        assert "169.254.169.254:80" not in listeners(None)
        assert "169.254.169.254:80" in listeners(a)
        # no thread of ours is left inside a node's netns; one serving thread for every node
        assert len([t for t in threading.enumerate() if t.name.startswith("slurmpod-imds")]) == 1

        # detach closes A's listener; removing B's netns behind the server's back detaches it too
        server.detach("i-000000000000000aa")
        assert "169.254.169.254:80" not in listeners(a)
        assert curl(a, "/latest/meta-data/ami-id")[0] == 0  # connection refused
        subprocess.run(["ip", "netns", "del", b], check=True, timeout=10)
        created.remove(b)
        deadline = time.monotonic() + 5
        while server.attached() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.attached() == []
    finally:
        server.close()
        for ns in created:
            subprocess.run(["ip", "netns", "del", ns], timeout=10)
    assert not [t for t in threading.enumerate() if t.name.startswith("slurmpod-imds")]
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"spimdstest-{tag}")]


@needs_root
def test_provider_attaches_detaches_and_adopts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local provider's hooks without booting a node: a record whose netns is this test's own."""
    from slurmpod.providers.local import LocalProvider

    ns = f"spimdstest-{uuid.uuid4().hex[:8]}-p"
    state = tmp_path / "state"
    rec = InstanceRecord(cluster_id="imdsc1", instance_id="i-00000000000000p01", group="g",
                         instance_type="ml.t3.medium", image_id="ami-0ccccccccccccccc3", image_root="/", volumes=[],
                         ip="10.254.78.11", hostname="ip-10-254-78-11", netns=ns, veth="",
                         metadata={"region": "eu-west-3", "http-tokens": "required"})
    providers: list[LocalProvider] = []
    created = False
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, timeout=10)
        created = True
        prov = LocalProvider(state)
        providers.append(prov)
        prov.start_imds()
        meta = prov.layout.instance(rec.cluster_id, rec.instance_id) / "meta.json"
        meta.parent.mkdir(parents=True)
        rec.save(meta)
        prov._imds_attach(rec, required=True)
        tok = curl(ns, "/latest/api/token", "-X", "PUT", "-H", "X-aws-ec2-metadata-token-ttl-seconds: 60")[1]
        hdr = f"X-aws-ec2-metadata-token: {tok}"
        assert curl(ns, "/latest/meta-data/placement/region", "-H", hdr) == (200, "eu-west-3")
        assert curl(ns, "/latest/meta-data/ami-id")[0] == 401  # http-tokens=required from the request metadata
        rec.image_id = "ami-0ddddddddddddddd4"  # what replace_root_volume writes
        rec.save(meta)
        assert curl(ns, "/latest/meta-data/ami-id", "-H", hdr) == (200, "ami-0ddddddddddddddd4")
        prov._imds_detach(rec.instance_id)
        assert "169.254.169.254:80" not in listeners(ns)

        prov.close()  # what the server calls when it stops; a new provider object re-adopts the live node
        monkeypatch.setattr(LocalProvider, "_alive", lambda self, r: r.instance_id == rec.instance_id)
        fresh = LocalProvider(state)
        providers.append(fresh)
        fresh.start_services()  # what the server calls when it starts
        assert curl(ns, "/latest/meta-data/ami-id", "-H", hdr)[0] == 401  # a new server: old tokens are gone
        tok = curl(ns, "/latest/api/token", "-X", "PUT", "-H", "X-aws-ec2-metadata-token-ttl-seconds: 60")[1]
        assert curl(ns, "/latest/meta-data/instance-type", "-H", f"X-aws-ec2-metadata-token: {tok}") == (
            200, "t3.medium")
        assert LocalProvider(state).list_instances("imdsc1")  # imds off (connect, demo): takes no listener
        assert curl(ns, "/latest/meta-data/instance-id", "-H", f"X-aws-ec2-metadata-token: {tok}") == (
            200, rec.instance_id)
    finally:
        for p in providers:
            p.close_imds()
        if created:
            subprocess.run(["ip", "netns", "del", ns], timeout=10)
    assert not [t for t in threading.enumerate() if t.name.startswith("slurmpod-imds")]
