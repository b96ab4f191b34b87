"""Pure ASGI middleware: the request body size cap, enforced before the body is read."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import BodyTooLarge
from app.http.errors import error_response


class BodySizeLimit:
    """413 when Content-Length is over the limit (without reading the body), or as soon as a
    chunked body grows past it while streaming in."""

    def __init__(self, app: ASGIApp, max_bytes: int, per_path: dict[str, int] | None = None
                 ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.per_path = per_path or {}  # paths with their own limit (file uploads)

    @staticmethod
    def _too_large(limit: int) -> BodyTooLarge:
        return BodyTooLarge(
            f"the request body is larger than the limit of {limit} bytes",
            field="body", limit=limit,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes = self.per_path.get(scope["path"], self.max_bytes)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                declared = 0
            if declared > max_bytes:
                await error_response(self._too_large(max_bytes), scope["path"])(scope, receive,
                                                                                 send)
                return
        received = 0
        exceeded = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    exceeded = True  # the app sees a disconnect; we answer 413 below
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # the app's answer to the "disconnect" is replaced by the 413
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await error_response(self._too_large(max_bytes), scope["path"])(scope, receive, send)
