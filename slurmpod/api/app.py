"""The ASGI application: POST / with X-Amz-Target, plus /healthz and /readyz.

POST / (every API call) is answered by ``ApiApp`` directly, not through Starlette's router and middleware stack
(error middleware, exception middleware, routing, the request/response wrapper: ~15 % of a request's event-loop
time), and crosses to a worker thread through the asyncio loop's executor rather than anyio's (its capacity
limiter and cancel scopes cost as much as the rest of the hop). Everything else goes to the Starlette app.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from slurmpod.api import cloudtrail, protocol
from slurmpod.api.audit import Call, Origin, build_record
from slurmpod.api.auth import Authenticator
from slurmpod.api.contract.conform import conform_output
from slurmpod.api.contract.model import get_model
from slurmpod.api.contract.validate import raise_for_input
from slurmpod.api.handlers import HANDLERS
from slurmpod.domain.audit import is_read_only
from slurmpod.errors import (
    InternalFailure,
    InvalidSignatureException,
    NotImplementedOperation,
    ServiceError,
    UnknownOperationException,
)
from slurmpod.observability import metrics
from slurmpod.service.audit import AuditService
from slurmpod.service.clusters import Caller, ClusterService

log = logging.getLogger("slurmpod.api")

T = TypeVar("T")
#: threads running API calls at once (anyio's default limit, which the API used before it had its own executor)
API_THREADS = 40


class TargetNotConnected(ServiceError):
    """SSM StartSession's modeled error; slurmpod has no Session Manager."""

    code = "TargetNotConnected"


class RequestGate(Protocol):
    def enter(self) -> None: ...

    def leave(self) -> None: ...


@dataclass
class ApiContext:
    service: ClusterService
    caller: Authenticator  # authenticates (request, body) -> Principal; raises ServiceError
    audit: AuditService | None = None
    extensions: bool = True
    ready: Callable[[], bool] = lambda: True
    ready_detail: Callable[[], dict[str, object]] = dict  # extra /readyz members (several servers: the leases)
    scrape: Callable[[], bytes] = metrics.render  # the /metrics body (the server adds its store gauges)
    gate: RequestGate | None = None  # requests in flight, which the reconciler lets finish first (reconciler.yielding)
    # SageMaker reads answered on the event loop itself, not on a worker thread: when the store's reads never wait
    # (SQLite in WAL mode: a read is ~20 us of CPU, less than the thread hop); not on PostgreSQL (a round trip)
    inline_reads: bool = False


def dispatch(ctx: ApiContext, op: str, params: object, caller: Caller) -> dict[str, object]:
    """Validates and runs one operation; raises ServiceError subclasses only (never anything else)."""
    model = get_model()
    if not model.has_operation(op):
        raise UnknownOperationException(f"Unknown operation SageMaker.{op}.")
    handler = HANDLERS.get(op)
    if handler is None:
        raise NotImplementedOperation(f"slurmpod does not implement SageMaker.{op} yet.")
    raise_for_input(op, params, extensions=ctx.extensions)
    assert isinstance(params, dict)  # guaranteed by raise_for_input  # noqa: S101
    return conform_output(op, handler(ctx.service, caller, params))


def start_session(params: object) -> dict[str, object]:
    target = params.get("Target") if isinstance(params, dict) else None
    example = "sagemaker-cluster:<cluster-id>_<group>-<instance-id>"
    named = f" {target}" if isinstance(target, str) and target else f" {example}"
    raise TargetNotConnected(
        "slurmpod does not run AWS Systems Manager Session Manager, so `aws ssm start-session` cannot open a session. "
        f"On the slurmpod server host run the equivalent: slurmpod connect{named} (the same target syntax), or "
        "slurmpod connect --cluster NAME [--group G] [-- COMMAND].")


def dispatch_service(ctx: ApiContext, service: str, op: str, params: object, caller: Caller) -> dict[str, object]:
    """One call of any service this endpoint answers (SageMaker, CloudTrail's LookupEvents, SSM StartSession)."""
    if service == "cloudtrail":
        return cloudtrail.dispatch(ctx.audit, op, params, caller)
    if service == "ssm":
        if op == "StartSession":
            return start_session(params)
        raise UnknownOperationException(f"slurmpod answers AmazonSSM.StartSession only, not AmazonSSM.{op}.")
    return dispatch(ctx, op, params, caller)


def record(ctx: ApiContext, call: Call) -> None:
    """Appends ``call`` to the audit trail (never raises): a call that changed something is written before this
    returns; any other (a read, a refused or failed call) is queued for the audit writer, and its record is built
    there too (``AuditService.enqueue``): then this never blocks, and may run on the event loop."""
    audit = ctx.audit
    if audit is None:
        return
    if call.error_code is None and not is_read_only(call.event_name):
        audit.record(build_record(call, ctx.service.clock.now()))
    else:
        audit.enqueue(partial(build_record, call, ctx.service.clock.now()))


def dispatch_recorded(ctx: ApiContext, op: str, params: dict[str, object], caller: Caller,
                      origin: Origin) -> dict[str, object]:
    """``dispatch`` plus its audit record: what the console's actions go through."""
    request_id = str(uuid.uuid4())
    call = Call("sagemaker", op, caller.account_id, caller.region, caller.access_key_id, origin, request_id, params)
    try:
        result = dispatch(ctx, op, params, caller)
    except ServiceError as err:
        record(ctx, replace(call, error_code=err.code, error_message=err.message))
        raise
    record(ctx, replace(call, result=result))
    return result


def _dispatch_and_record(ctx: ApiContext, service: str, op: str, params: object, caller: Caller,
                         call: Call) -> dict[str, object]:
    """``dispatch_service`` and, when it succeeds, its audit record, on the same worker thread (a failed call is
    recorded by the request handler, with its error)."""
    result = dispatch_service(ctx, service, op, params, caller)
    if call.event_name != "-":
        record(ctx, replace(call, result=result))
    return result


def origin_of(request: Request, *, console: bool = False) -> Origin:
    return Origin(request.client.host if request.client else "", request.headers.get("user-agent", ""), console)


async def read_body(request: Request, limit: int = protocol.MAX_BODY_BYTES) -> bytes:
    """The request body, refusing (413) more than ``limit`` bytes without buffering them."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise protocol.RequestTooLarge(f"Request body of {int(declared)} bytes exceeds the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise protocol.RequestTooLarge(f"Request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


class ApiApp:
    """The server's ASGI app: POST / answered here, any other request by ``starlette`` (``make_app``)."""

    def __init__(self, ctx: ApiContext, starlette: Starlette) -> None:
        self.ctx = ctx
        self.starlette = starlette
        self._executor = ThreadPoolExecutor(API_THREADS, thread_name_prefix="slurmpod-api")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == "/" and scope["method"] == "POST":
            status, body, request_id = await handle(self.ctx, Request(scope, receive), self._run)
            # what Starlette's Response sends, without building one
            await send({"type": "http.response.start", "status": status, "headers": [
                (b"content-length", str(len(body)).encode()), (b"content-type", _CONTENT_TYPE),
                (b"x-amzn-requestid", request_id.encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.starlette(scope, receive, send)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args))


Run = Callable[..., Any]


_CONTENT_TYPE = protocol.CONTENT_TYPE.encode()


async def handle(ctx: ApiContext, request: Request, run: Run) -> tuple[int, bytes, str]:
    """One API call: (HTTP status, body, request id); ``run`` runs a blocking function on a worker thread. Never
    raises. In flight, it is counted in ``ctx.gate`` (the reconciler lets it finish first)."""
    gate = ctx.gate
    if gate is None:
        return await _handle(ctx, request, run)
    gate.enter()
    try:
        return await _handle(ctx, request, run)
    finally:
        gate.leave()


async def _handle(ctx: ApiContext, request: Request, run: Run) -> tuple[int, bytes, str]:
    request_id = str(uuid.uuid4())
    started = time.monotonic()
    service, op = "sagemaker", "-"
    call: Call | None = None
    result: dict[str, object] | None = None
    try:
        raw = await read_body(request)
        target = request.headers.get("x-amz-target")
        service, op = protocol.guess_target(target)
        try:
            principal = ctx.caller(request, raw)  # authentication comes first, as on AWS
        except ServiceError:
            akid, account, region = ctx.caller.claimed(request)
            call = Call(service, op, account, region, akid, origin_of(request), request_id)
            raise
        caller: Caller = principal.caller
        call = Call(service, op, caller.account_id, caller.region, caller.access_key_id, origin_of(request),
                    request_id)
        service, op = protocol.parse_service_target(target)
        if principal.service is not None and principal.service != service:
            raise InvalidSignatureException(f"Credential should be scoped to correct service: '{service}'. ")
        protocol.check_content_type(request.headers.get("content-type"))
        params = protocol.decode_body(raw)
        call = replace(call, params=params)
        # one thread hop per request (none for a read, ``inline_reads``): the call and its audit record (written
        # there; a failed call's below)
        if ctx.inline_reads and service == "sagemaker" and is_read_only(op):
            result = _dispatch_and_record(ctx, service, op, params, caller, call)
        else:
            result = await run(_dispatch_and_record, ctx, service, op, params, caller, call)
        call = None  # recorded
        status, body = 200, protocol.encode_result(result)
        code = "OK"
    except ServiceError as err:
        status, body = protocol.encode_error(err)
        code = err.code
        if call is not None:
            call = replace(call, error_code=err.code, error_message=err.message)
    except Exception:  # the one catch-all: never a traceback to the client
        log.exception("internal error in %s (request %s)", op, request_id)
        status, body = protocol.encode_error(InternalFailure(f"Internal error; request id {request_id}."))
        code = "InternalFailure"
        if call is not None:
            call = replace(call, error_code=code, error_message="Internal error.")
    if call is not None and call.event_name != "-":  # a failed call: queued (``record``), no thread hop
        record(ctx, call)
    # the access log: changes and failures at INFO; successful reads (status polling, 3 % of a request's interpreter
    # time) at DEBUG: the audit trail (`slurmpod audit`) and the latency histogram (/metrics) have every call
    level = logging.DEBUG if status == 200 and is_read_only(op) else logging.INFO
    log.log(level, "%s %s %d %s %.1fms", request_id[:8], op, status, code, (time.monotonic() - started) * 1000)
    metrics.observe_request(op if op in HANDLERS else "other", code, time.monotonic() - started)
    return status, body, request_id


async def _response(ctx: ApiContext, request: Request) -> Response:
    status, body, request_id = await handle(ctx, request, run_in_threadpool)
    return Response(body, status_code=status, media_type=protocol.CONTENT_TYPE,
                    headers={"x-amzn-RequestId": request_id})


def make_app(ctx: ApiContext, extra_routes: Sequence[BaseRoute] = ()) -> ApiApp:
    """``extra_routes``: the console (``slurmpod.console``), mounted by ``slurmpod.server``."""
    async def root(request: Request) -> Response:  # not reached through ``ApiApp`` (it answers POST / itself)
        return await _response(ctx, request)

    async def other_method(request: Request) -> Response:
        return JSONResponse(
            {"__type": "UnknownOperationException", "message": "Send POST / with X-Amz-Target."}, status_code=404
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        ok = await run_in_threadpool(ctx.ready)
        return JSONResponse({"ready": ok, **ctx.ready_detail()}, status_code=200 if ok else 503)

    async def prometheus(request: Request) -> Response:
        body = await run_in_threadpool(ctx.scrape)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    return ApiApp(ctx, Starlette(
        routes=[
            Route("/", root, methods=["POST"]),
            Route("/", other_method, methods=["GET", "PUT", "DELETE", "PATCH"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
            *extra_routes,
        ]
    ))
