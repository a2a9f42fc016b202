"""The web console at ``/console``: sign-in with an access key, clusters, groups, nodes, events, updates.

``console_routes(ctx, sign_in)`` returns the Starlette routes to mount next to the API; every read and
every change goes through ``slurmpod.api.app.dispatch`` (the API's validation, account scoping and
service layer). ``credential_sign_in`` / ``open_sign_in`` build the sign-in check for ``--auth sigv4`` /
``--auth none``.
"""

from slurmpod.console.routes import Console, console_routes
from slurmpod.console.sessions import SessionStore, SignIn, credential_sign_in, open_sign_in

__all__ = ["Console", "SessionStore", "SignIn", "console_routes", "credential_sign_in", "open_sign_in"]
