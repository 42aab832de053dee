"""The Host and Origin guard of the HTTP doors.

Invariant: a request from a foreign Host or Origin never reaches an app, on HTTP or websocket alike.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


def host_allowed(host: str | None, server: tuple | None) -> bool:
    """DNS rebinding: a page from another site may resolve its own name to this machine, so the
    Host header must name the address the connection came in on (or localhost, on a loopback one)."""
    name = urlsplit(f"//{host}").hostname if host else None
    if not name:
        return False
    local = str(server[0]).lower() if server else "127.0.0.1"  # no address (a unix socket): local names only
    try:
        address = ipaddress.ip_address(local)
    except ValueError:  # a test client's made-up server name
        return name == local
    if address.version == 6 and address.ipv4_mapped:  # an IPv4 connection to a dual-stack ("::") socket
        address = address.ipv4_mapped
    return name in (local, str(address)) or (address.is_loopback and name in LOCAL_HOSTS)


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """Browsers send Origin; a page from another site must not drive the local model."""
    if not origin:
        return True  # scripts and command-line clients
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https"):
        return False
    return parts.netloc == (host or "") or (parts.hostname or "") in LOCAL_HOSTS


def refusal(scope) -> str | None:
    """Why a request must not reach the app: a foreign Host or Origin; None when it may."""
    headers = Headers(scope=scope)
    host = headers.get("host")
    if not host_allowed(host, scope.get("server")):
        return f"host {host!r} is not this server's address: open it by its address or as localhost"
    if not origin_allowed(headers.get("origin"), host):
        return f"origin {headers.get('origin')!r} is not allowed: use a page served by this server"
    return None


class GuardHostAndOrigin:
    """ASGI middleware: refuses a foreign Host or Origin on HTTP and websocket alike, before the app runs."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        problem = refusal(scope) if scope["type"] in ("http", "websocket") else None
        if problem is None:
            return await self.app(scope, receive, send)
        response = JSONResponse({"detail": problem}, status_code=403)
        if scope["type"] == "http" or "websocket.http.response" in scope.get("extensions", {}):
            await response(scope, receive, send)  # on a websocket: a 403 answer to the handshake
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": "host or origin not allowed"})
