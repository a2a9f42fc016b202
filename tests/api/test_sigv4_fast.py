"""The SigV4 fast path (``sigv4._fast_signature``) computes exactly botocore's signature, and the verifier accepts
what boto3 signs through it."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from slurmpod.api import sigv4
from slurmpod.security.credentials import Credential

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AKID = "AKIAIOSFODNN7EXAMPLE"


def _signed(headers: dict[str, str], body: bytes, when: datetime, region: str = "us-east-1",
            service: str = "sagemaker") -> sigv4.SignedRequest:
    """A request signed by botocore's client-side signer, as the wire carries it."""
    req = AWSRequest(method="POST", url="http://127.0.0.1:8080/", data=body, headers=headers)
    signer = SigV4Auth(Credentials(AKID, SECRET), service, region)
    req.context["timestamp"] = when.strftime(sigv4.SIGV4_TIMESTAMP)
    req.headers["X-Amz-Date"] = req.context["timestamp"]
    canonical = signer.canonical_request(req)
    signature = signer.signature(signer.string_to_sign(req, canonical), req)
    signer._inject_signature_to_request(req, signature)
    return sigv4.SignedRequest("POST", "/", "", [(k, str(v)) for k, v in req.headers.items()], body)


@pytest.mark.parametrize("seed", range(40))
def test_fast_path_equals_botocore(seed: int) -> None:
    rnd = random.Random(seed)
    headers = {"X-Amz-Target": "SageMaker.DescribeCluster", "Content-Type": "application/x-amz-json-1.1",
               "User-Agent": "Boto3/1.0  md/x" + " " * rnd.randint(0, 3) + "tail ", "Host": "127.0.0.1:8080"}
    if rnd.random() < 0.5:
        headers["amz-sdk-invocation-id"] = f"id-{rnd.random()}"
    body = rnd.choice([b"", b"{}", b'{"ClusterName": "c\\u00e9"}', bytes(rnd.randrange(256) for _ in range(50))])
    if rnd.random() < 0.3:
        import hashlib

        headers["X-Amz-Content-SHA256"] = hashlib.sha256(body).hexdigest()
    when = datetime(2026, 1 + rnd.randrange(12), 1 + rnd.randrange(28), rnd.randrange(24), rnd.randrange(60),
                    tzinfo=UTC)
    region = rnd.choice(["us-east-1", "ap-northeast-1", "cn-north-1"])
    req = _signed(headers, body, when, region)
    auth = sigv4.parse_authorization(req.header("authorization") or "")
    amz_date = req.header("x-amz-date") or ""
    fast = sigv4._fast_signature(req, auth, SECRET, amz_date)
    assert fast is not None
    assert fast == sigv4.botocore_signature(req, auth, SECRET, amz_date) == auth.signature
    # the extra signed header that is absent, and a repeated header: still botocore's answer
    extra = sigv4.SignedRequest(req.method, req.path, req.query, [*req.headers, ("user-agent", "second  one")],
                                req.body)
    odd = sigv4.AuthorizationHeader(auth.access_key_id, auth.date, auth.region, auth.service, auth.terminator,
                                    (*auth.signed_headers, "x-missing"), auth.signature)
    assert sigv4._fast_signature(extra, odd, SECRET, amz_date) == sigv4.botocore_signature(extra, odd, SECRET,
                                                                                            amz_date)


def test_other_shapes_fall_back_to_botocore() -> None:
    req = _signed({"Host": "h", "Content-Type": "x"}, b"{}", datetime.now(UTC))
    auth = sigv4.parse_authorization(req.header("authorization") or "")
    with_query = sigv4.SignedRequest("POST", "/", "a=1", req.headers, req.body)
    assert sigv4._fast_signature(with_query, auth, SECRET, req.header("x-amz-date") or "") is None
    other_path = sigv4.SignedRequest("POST", "/x/../", "", req.headers, req.body)
    assert sigv4._fast_signature(other_path, auth, SECRET, req.header("x-amz-date") or "") is None
    broken = sigv4.SignedRequest("POST", "/", "", [*req.headers, ("content-type", "a\nb")], req.body)
    assert sigv4._fast_signature(broken, auth, SECRET, req.header("x-amz-date") or "") is None


def test_verifier_accepts_and_refuses_through_the_fast_path() -> None:
    now = datetime.now(UTC)
    cred = Credential(access_key_id=AKID, secret_access_key=SECRET, account_id="123456789012", created="")
    verifier = sigv4.SigV4Verifier(lambda k: cred if k == AKID else None, sigv4.SERVICES, now=lambda: now)
    req = _signed({"Host": "127.0.0.1:8080", "Content-Type": "application/x-amz-json-1.1"}, b"{}", now)
    assert verifier.verify(req).credential is cred
    tampered = sigv4.SignedRequest(req.method, req.path, req.query, req.headers, b'{"a":1}')
    with pytest.raises(sigv4.InvalidSignatureException):
        verifier.verify(tampered)


@pytest.mark.parametrize("stamp", ["20260102T030405Z", "20261302T030405Z", "2026012T030405Z", "20260102T030405",
                                   "２0260102T030405Z", "20260230T000000Z"])
def test_timestamp_parse_matches_strptime(stamp: str) -> None:
    try:
        expected: object = datetime.strptime(stamp, sigv4.SIGV4_TIMESTAMP).replace(tzinfo=UTC)
    except ValueError:
        expected = ValueError
    try:
        got: object = sigv4._parse_timestamp(stamp)
    except ValueError:
        got = ValueError
    assert got == expected
