"""The ASGI application: POST / with X-Amz-Target, plus /healthz and /readyz."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from slurmpod.api import protocol
from slurmpod.api.contract.conform import conform_output
from slurmpod.api.contract.model import get_model
from slurmpod.api.contract.validate import raise_for_input
from slurmpod.api.handlers import HANDLERS
from slurmpod.errors import InternalFailure, NotImplementedOperation, ServiceError, UnknownOperationException
from slurmpod.observability import metrics
from slurmpod.service.clusters import Caller, ClusterService

log = logging.getLogger("slurmpod.api")


@dataclass
class ApiContext:
    service: ClusterService
    caller: Callable[[Request, bytes], Caller]  # authenticates (request, body); raises ServiceError
    extensions: bool = True
    ready: Callable[[], bool] = lambda: True
    scrape: Callable[[], bytes] = metrics.render  # the /metrics body (the server adds its store gauges)


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


def make_app(ctx: ApiContext, extra_routes: Sequence[BaseRoute] = ()) -> Starlette:
    """``extra_routes``: the console (``slurmpod.console``), mounted by ``slurmpod.server``."""
    async def root(request: Request) -> Response:
        request_id = str(uuid.uuid4())
        started = time.monotonic()
        op = "-"
        try:
            raw = await read_body(request)
            caller = ctx.caller(request, raw)  # authentication comes first, as on AWS
            op = protocol.parse_target(request.headers.get("x-amz-target"))
            protocol.check_content_type(request.headers.get("content-type"))
            params = protocol.decode_body(raw)
            result = await run_in_threadpool(dispatch, ctx, op, params, caller)
            status, body = 200, protocol.encode_result(result)
            code = "OK"
        except ServiceError as err:
            status, body = protocol.encode_error(err)
            code = err.code
        except Exception:  # the one catch-all: never a traceback to the client
            log.exception("internal error in %s (request %s)", op, request_id)
            status, body = protocol.encode_error(InternalFailure(f"Internal error; request id {request_id}."))
            code = "InternalFailure"
        log.info("%s %s %d %s %.1fms", request_id[:8], op, status, code, (time.monotonic() - started) * 1000)
        metrics.observe_request(op if op in HANDLERS else "other", code, time.monotonic() - started)
        return Response(
            body, status_code=status, media_type=protocol.CONTENT_TYPE, headers={"x-amzn-RequestId": request_id}
        )

    async def other_method(request: Request) -> Response:
        return JSONResponse(
            {"__type": "UnknownOperationException", "message": "Send POST / with X-Amz-Target."}, status_code=404
        )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        ok = await run_in_threadpool(ctx.ready)
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    async def prometheus(request: Request) -> Response:
        body = await run_in_threadpool(ctx.scrape)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    return Starlette(
        routes=[
            Route("/", root, methods=["POST"]),
            Route("/", other_method, methods=["GET", "PUT", "DELETE", "PATCH"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
            *extra_routes,
        ]
    )
