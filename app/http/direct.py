"""The two hot translation routes answered without FastAPI's per-request machinery.

POST /v1/translate and LibreTranslate's POST /translate stay declared as FastAPI routes (their
OpenAPI schema, /docs, every error they answer), but a request for one of them is answered here
first, by the same code: the route's checks, the service, the same error responses
(app.http.errors). What FastAPI adds per request on top of that (route matching over every
route, dependency solving, the body validated twice over, the response validated again and
encoded through jsonable_encoder) took a sizeable share of the server's CPU time per request
(BENCHMARKS.md), CPU time that comes out of the decode workers' share of the cores. The checks
are app.http.checks' chain, the one the FastAPI routes declare.

A handler that meets a request it does not take the usual way raises `Fallback` before any
side effect (the rate limiter untouched); FastAPI then answers it from the start, with the body
replayed, so its errors and their order are FastAPI's own. The middleware sits innermost among
the app's middlewares: metrics, CORS and the body size cap still see every request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import ServiceError
from app.http.errors import client_gone, error_response

Handler = Callable[[Request], Awaitable[Response]]


class Fallback(Exception):  # noqa: N818 - a signal, not an error
    """This request goes the FastAPI way (raised before any side effect)."""


class DirectRoutes:
    """POST requests for `handlers`' paths go to their handlers; everything else, and what a
    handler hands back with Fallback, to `app`."""

    def __init__(self, app: ASGIApp, handlers: dict[str, Handler],
                 routes: dict[str, APIRoute]) -> None:
        self.app = app
        self.handlers = handlers
        self.routes = routes  # the FastAPI route of each path: the metrics label it by

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = (self.handlers.get(scope["path"])
                   if scope["type"] == "http" and scope["method"] == "POST" else None)
        if handler is None or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        messages = await _read_body(receive)
        scope["route"] = self.routes[scope["path"]]
        try:
            response = await handler(Request(scope, _replay(messages, receive)))
        except Fallback:
            await self.app(scope, _replay(messages, receive), send)
            return
        except ServiceError as exc:
            response = error_response(exc, scope["path"])
        except ClientDisconnect:  # it left while sending its body
            response = client_gone(scope["path"])
        await response(scope, receive, send)


async def _read_body(receive: Receive) -> list[Message]:
    """The request's messages up to its last body part (or a disconnect)."""
    messages = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            return messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A receive that gives `messages` again, then what `receive` gives."""
    pending = list(messages)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
