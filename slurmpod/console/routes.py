"""Starlette routes of the console (mounted at ``/console`` by ``slurmpod.server``).

Pages are server-rendered (Jinja2, autoescaped); one small script (``static/console.js``) refreshes the
live parts of a cluster page from ``/console/clusters/<name>/live``. Every POST carries a CSRF token
(the session's, or for sign-in a double-submit cookie) and is refused when its Origin is another site.
"""

from __future__ import annotations

import secrets
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from slurmpod import regions
from slurmpod.api.app import ApiContext, origin_of, read_body, record
from slurmpod.api.audit import Call
from slurmpod.console import forms, views
from slurmpod.console.sessions import COOKIE, PRE_COOKIE, Session, SessionStore, SignIn, same_token
from slurmpod.errors import ResourceNotFound, ServiceError
from slurmpod.service.clusters import Caller

PREFIX = "/console"
HERE = Path(__file__).parent
FORM_LIMIT = 64 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
ACTIONS = {"reboot": "Reboot", "replace": "Replace"}

Handler = Callable[[Request], Awaitable[Response]]


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.globals["prefix"] = PREFIX
    env.globals["image_phrase"] = views.image_phrase
    env.globals["regions"] = regions.known_regions()
    env.filters["q"] = lambda v: urllib.parse.quote(str(v), safe="")
    env.filters["slug"] = lambda v: "".join(c if c.isalnum() else "-" for c in str(v).lower())
    return env


class Console:
    """The console of one server: its API context, sign-in check and sessions."""

    def __init__(self, ctx: ApiContext, sign_in: SignIn, *, sessions: SessionStore | None = None,
                 refresh_seconds: float = 2.0) -> None:
        self.ctx = ctx
        self.sign_in = sign_in
        self.sessions = sessions or SessionStore()
        self.refresh_seconds = refresh_seconds
        self.env = _env()

    # ---- plumbing -----------------------------------------------------------------------------------

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(refresh_ms=int(self.refresh_seconds * 1000), **values)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def fragment(self, template: str, **values: Any) -> str:
        return self.env.get_template(template).render(**values)

    def session(self, request: Request) -> Session | None:
        s = self.sessions.get(request.cookies.get(COOKIE))
        if s is not None and not self.sign_in.still_valid(s.access_key_id):
            self.sessions.drop(s.session_id)
            return None
        return s

    @staticmethod
    def _secure(request: Request) -> bool:
        return request.url.scheme == "https"

    @staticmethod
    def _foreign_origin(request: Request) -> bool:
        origin = request.headers.get("origin")
        if not origin or origin == "null":  # no information (the CSRF token still decides)
            return False
        return urllib.parse.urlsplit(origin).netloc != request.headers.get("host", "")

    async def form(self, request: Request) -> dict[str, list[str]] | None:
        """The urlencoded body, or None when it is too large or not a form."""
        if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return None
        try:
            raw = await read_body(request, FORM_LIMIT)
        except ServiceError:
            return None
        return urllib.parse.parse_qs(raw.decode("utf-8", errors="replace"), keep_blank_values=True)

    def _forbidden(self, message: str) -> HTMLResponse:
        return self.render("error.html", 403, title="Forbidden", message=message, session=None)

    async def checked_post(self, request: Request) -> tuple[Session, dict[str, list[str]]] | Response:
        """A signed-in POST with a matching CSRF token, or the response refusing it."""
        s = self.session(request)
        if s is None:
            return RedirectResponse(f"{PREFIX}/signin", status_code=303)
        fields = await self.form(request)
        if fields is None:
            return self._forbidden("The form could not be read.")
        if self._foreign_origin(request) or not same_token(s.csrf_token, (fields.get("csrf_token") or [""])[0]):
            return self._forbidden("The form expired or did not come from this console. Reload the page and retry.")
        return s, fields

    # ---- sign-in ------------------------------------------------------------------------------------

    async def home(self, request: Request) -> Response:
        target = "clusters" if self.session(request) else "signin"
        return RedirectResponse(f"{PREFIX}/{target}", status_code=303)

    def _signin_page(self, request: Request, status: int = 200, error: str = "", akid: str = "") -> Response:
        token = secrets.token_urlsafe(32)
        resp = self.render("signin.html", status, title="Sign in", error=error, access_key_id=akid,
                           csrf_token=token, session=None)
        resp.set_cookie(PRE_COOKIE, token, max_age=1800, path=PREFIX, httponly=True, samesite="strict",
                        secure=self._secure(request))
        return resp

    async def signin_form(self, request: Request) -> Response:
        if self.session(request):
            return RedirectResponse(f"{PREFIX}/clusters", status_code=303)
        return self._signin_page(request)

    async def signin(self, request: Request) -> Response:
        fields = await self.form(request)
        if fields is None or self._foreign_origin(request):
            return self._forbidden("The sign-in form could not be read.")
        if not same_token(request.cookies.get(PRE_COOKIE, ""), (fields.get("csrf_token") or [""])[0]):
            return self._signin_page(request, 400, "The sign-in form expired. Please try again.")
        akid = (fields.get("access_key_id") or [""])[0].strip()
        secret = (fields.get("secret_access_key") or [""])[0]
        caller = await run_in_threadpool(self.sign_in.verify, akid, secret) if akid and secret else None
        await run_in_threadpool(self._record_login, request, akid, caller)
        if caller is None:
            return self._signin_page(request, 401, "The access key ID or secret access key is not valid.", akid)
        s = self.sessions.create(akid, caller)
        resp = RedirectResponse(f"{PREFIX}/clusters", status_code=303)
        resp.set_cookie(COOKIE, s.session_id, path=PREFIX, httponly=True, samesite="strict",
                        secure=self._secure(request))
        resp.delete_cookie(PRE_COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return resp

    def _record_login(self, request: Request, akid: str, caller: Caller | None) -> None:
        """CloudTrail's ConsoleLogin event (source signin.amazonaws.com), failed sign-ins included."""
        account = caller.account_id if caller else self.sign_in.account_of(akid)
        region = caller.region if caller else ""
        call = Call("signin", "ConsoleLogin", account, region, akid[:128] or None,
                    origin_of(request, console=True), str(uuid.uuid4()),
                    result={"ConsoleLogin": "Success" if caller else "Failure"})
        if caller is None:
            call = replace(call, error_code="Failed authentication",
                           error_message="The access key ID or secret access key is not valid.")
        record(self.ctx, call)

    async def set_region(self, request: Request) -> Response:
        """The region the console works in (its clusters, its calls); the server's --region at sign-in."""
        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        s, fields = checked
        wanted = (fields.get("region") or [""])[0].strip()
        if regions.is_region(wanted):
            s.caller = replace(s.caller, region=wanted)
            s.flash.append(("success", f"Region {wanted}."))
        else:
            s.flash.append(("error", f"'{wanted[:64]}' is not an AWS region name (e.g. us-east-1)."))
        return RedirectResponse(f"{PREFIX}/clusters", status_code=303)

    async def signout(self, request: Request) -> Response:
        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        self.sessions.drop(checked[0].session_id)
        resp = RedirectResponse(f"{PREFIX}/signin", status_code=303)
        resp.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
        return resp

    # ---- pages --------------------------------------------------------------------------------------

    async def clusters(self, request: Request) -> Response:
        s = self.session(request)
        if s is None:
            return RedirectResponse(f"{PREFIX}/signin", status_code=303)
        rows = await run_in_threadpool(views.list_clusters, self.ctx, s.caller)
        return self.render("clusters.html", title="Clusters", session=s, clusters=rows, flash=self._flash(s))

    @staticmethod
    def _flash(s: Session) -> list[tuple[str, str]]:
        out, s.flash = s.flash, []
        return out

    async def _load(self, s: Session, name: str) -> views.ClusterPage | Response:
        try:
            return await run_in_threadpool(views.load_cluster, self.ctx, s.caller, name)
        except ResourceNotFound as err:
            return self.render("error.html", 404, title="Not found", message=err.message, session=s)

    async def cluster(self, request: Request, form: forms.UpdateForm | None = None,
                      outcome: forms.Outcome | None = None) -> Response:
        s = self.session(request)
        if s is None:
            return RedirectResponse(f"{PREFIX}/signin", status_code=303)
        page = await self._load(s, request.path_params["name"])
        if isinstance(page, Response):
            return page
        errors = outcome.errors if outcome else {}
        if form is None:
            form = forms.UpdateForm(groups=page.update_available, timing="now")
        return self.render("cluster.html", 400 if errors else 200, title=page.name, session=s, page=page,
                           form=form, errors=errors, flash=self._flash(s))

    async def live(self, request: Request) -> Response:
        s = self.session(request)
        if s is None:
            return JSONResponse({"signedIn": False}, status_code=401, headers={"Cache-Control": "no-store"})
        try:
            page = await run_in_threadpool(views.load_cluster, self.ctx, s.caller, request.path_params["name"])
        except ResourceNotFound as err:
            return JSONResponse({"error": err.message}, status_code=404, headers={"Cache-Control": "no-store"})
        parts = {key: self.fragment(f"_{key}.html", page=page, session=s)
                 for key in ("summary", "groups", "nodes", "events")}
        images = {g.name: views.image_phrase(g.image_status) for g in page.groups}
        return JSONResponse({"status": page.status, "html": parts, "imageStatus": images},
                            headers={"Cache-Control": "no-store"})

    async def update_software(self, request: Request) -> Response:
        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        s, fields = checked
        name = request.path_params["name"]
        form = forms.UpdateForm.parse(fields)
        outcome = await run_in_threadpool(forms.update_software, self.ctx, s.caller, name, form,
                                          origin_of(request, console=True))
        if not outcome.ok:
            return await self.cluster(request, form, outcome)
        s.flash.append(("success", outcome.message))
        return RedirectResponse(f"{PREFIX}/clusters/{urllib.parse.quote(name, safe='')}", status_code=303)

    def _node_params(self, request: Request) -> tuple[str, str, str] | None:
        action = request.path_params["action"]
        if action not in ACTIONS:
            return None
        return request.path_params["name"], request.path_params["node"], action

    async def node_confirm(self, request: Request) -> Response:
        s = self.session(request)
        if s is None:
            return RedirectResponse(f"{PREFIX}/signin", status_code=303)
        params = self._node_params(request)
        if params is None:
            return self.render("error.html", 404, title="Not found", message="Unknown node action.", session=s)
        name, node, action = params
        page = await self._load(s, name)
        if isinstance(page, Response):
            return page
        row = next((n for n in page.nodes if n.instance_id == node), None)
        if row is None:
            return self.render("error.html", 404, title="Not found",
                               message=f"Node {node} not found in cluster {name}.", session=s)
        return self.render("confirm.html", title=f"{ACTIONS[action]} {node}", session=s, page=page, node=row,
                           action=action, verb=ACTIONS[action])

    async def node_action(self, request: Request) -> Response:
        checked = await self.checked_post(request)
        if isinstance(checked, Response):
            return checked
        s, _fields = checked
        params = self._node_params(request)
        if params is None:
            return self.render("error.html", 404, title="Not found", message="Unknown node action.", session=s)
        name, node, action = params
        outcome = await run_in_threadpool(forms.node_action, self.ctx, s.caller, name, node, action,
                                          origin_of(request, console=True))
        s.flash.append(("success", outcome.message) if outcome.ok else ("error", outcome.errors["form"]))
        return RedirectResponse(f"{PREFIX}/clusters/{urllib.parse.quote(name, safe='')}", status_code=303)

    # ---- routing ------------------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        return [
            Route(PREFIX, self.home, methods=["GET"]),
            Route(f"{PREFIX}/", self.home, methods=["GET"]),
            Route(f"{PREFIX}/signin", self.signin_form, methods=["GET"]),
            Route(f"{PREFIX}/signin", self.signin, methods=["POST"]),
            Route(f"{PREFIX}/signout", self.signout, methods=["POST"]),
            Route(f"{PREFIX}/region", self.set_region, methods=["POST"]),
            Route(f"{PREFIX}/clusters", self.clusters, methods=["GET"]),
            Route(f"{PREFIX}/clusters/{{name}}", self.cluster, methods=["GET"]),
            Route(f"{PREFIX}/clusters/{{name}}/live", self.live, methods=["GET"]),
            Route(f"{PREFIX}/clusters/{{name}}/update-software", self.update_software, methods=["POST"]),
            Route(f"{PREFIX}/clusters/{{name}}/nodes/{{node}}/{{action}}", self.node_confirm, methods=["GET"]),
            Route(f"{PREFIX}/clusters/{{name}}/nodes/{{node}}/{{action}}", self.node_action, methods=["POST"]),
            Mount(f"{PREFIX}/static", app=StaticFiles(directory=str(HERE / "static")), name="console-static"),
        ]


def console_routes(ctx: ApiContext, sign_in: SignIn, **options: Any) -> list[BaseRoute]:
    """The console's routes for ``make_app(..., extra_routes=...)``; ``options`` go to ``Console``."""
    return Console(ctx, sign_in, **options).routes()
