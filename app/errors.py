"""The service's exception hierarchy and its one mapping to HTTP responses.

Every error body has one shape, readable by LibreTranslate clients (`error` is a string) and by
v1 clients (`code`, and `field` / `limit` where they apply):

    {"error": "text[0] has 6000 characters; the limit is 5000", "code": "text_too_long",
     "field": "text[0]", "limit": 5000}

The LibreTranslate routes answer with the status codes LibreTranslate uses (400 for bad input
and limits, 403 for a wrong API key); `status_for` holds that difference.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("app.errors")

MAX_ECHO_CHARS = 200  # longest input excerpt a 422 body may contain
LIBRETRANSLATE_PREFIXES = ("/translate", "/languages", "/detect", "/frontend")


class ServiceError(Exception):
    """Base of every error the service answers on purpose."""

    status_code = 500
    code = "internal_error"
    libretranslate_status: int | None = None  # when LibreTranslate uses another code

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        limit: int | float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.limit = limit
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": _printable(self.message), "code": self.code}
        if self.field is not None:
            body["field"] = _printable(self.field)
        if self.limit is not None:
            body["limit"] = self.limit
        return body


class BadRequest(ServiceError):
    status_code = 400
    code = "bad_request"


class UnsupportedLanguage(BadRequest):
    code = "unsupported_language"


class Unauthorized(ServiceError):
    status_code = 401
    code = "unauthorized"

    def __init__(self, message: str, *, key_given: bool) -> None:
        super().__init__(message, field="api_key", headers={"WWW-Authenticate": "Bearer"})
        # LibreTranslate: 403 "Invalid API key", 400 when a key is missing
        self.libretranslate_status = 403 if key_given else 400


class TooLarge(ServiceError):
    """A limit on characters, texts or body size."""

    status_code = 413
    code = "too_large"
    libretranslate_status = 400


class BodyTooLarge(TooLarge):
    code = "body_too_large"
    libretranslate_status = 413


class UnsupportedMediaType(ServiceError):
    status_code = 415
    code = "unsupported_media_type"
    libretranslate_status = 400


class InvalidInput(ServiceError):
    status_code = 422
    code = "invalid_input"
    libretranslate_status = 400


class RateLimited(ServiceError):
    status_code = 429
    code = "rate_limited"


class Unavailable(ServiceError):
    """Not ready, draining, or the queue is full: try again later."""

    status_code = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message, headers={"Retry-After": str(max(1, round(retry_after)))})


class Overloaded(Unavailable):
    code = "overloaded"


class DeadlineExceeded(ServiceError):
    status_code = 504
    code = "timeout"


class EngineFailure(ServiceError):
    """The engine raised; the details go to the log, never to the client."""

    status_code = 500
    code = "internal_error"

    def __init__(self) -> None:
        super().__init__("translation failed; see the server log")


class ClientGone(ServiceError):
    """The client disconnected before its answer was ready (nginx's 499)."""

    status_code = 499
    code = "client_closed_request"


def is_libretranslate(path: str) -> bool:
    return path.startswith(LIBRETRANSLATE_PREFIXES)


def status_for(exc: ServiceError, path: str) -> int:
    if is_libretranslate(path) and exc.libretranslate_status is not None:
        return exc.libretranslate_status
    return exc.status_code


def error_response(exc: ServiceError, path: str) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=status_for(exc, path), headers=exc.headers)


def _printable(text: str) -> str:
    """Text a UTF-8 JSON body can carry: a lone surrogate from the input (say, an unknown field
    named "\\ud800") becomes a backslash escape instead of failing the error response."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _short(value: Any) -> str:
    text = repr(value)
    if len(text) > MAX_ECHO_CHARS:
        return f"{text[:MAX_ECHO_CHARS]}... ({len(text)} characters)"
    return text


def _field_name(loc: Iterable[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    name = ""
    for part in parts:
        name += f"[{part}]" if part.isdigit() else (f".{part}" if name else part)
    return name or "body"


def validation_error(exc: RequestValidationError) -> ServiceError:
    """One short message per problem, naming the field; never echoes a whole input back."""
    errors = exc.errors()
    if any(err.get("type") == "json_invalid" for err in errors):
        return BadRequest("the request body is not valid JSON", field="body")
    messages = []
    first_field = None
    for err in errors[:5]:
        field = _field_name(err.get("loc", ()))
        first_field = first_field or field
        msg = f"{field}: {err.get('msg', 'invalid')}"
        if err.get("type") not in ("missing", "extra_forbidden") and "input" in err:
            msg += f" (got {_short(err['input'])})"
        messages.append(msg)
    if len(errors) > 5:
        messages.append(f"... and {len(errors) - 5} more")
    return InvalidInput("; ".join(messages), field=first_field)


def install_handlers(app: FastAPI) -> None:
    """The one place where exceptions become HTTP responses."""

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(exc), request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        err = ServiceError(str(exc.detail), headers=dict(exc.headers or {}))
        err.code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error")
        if exc.status_code == 400 and "body" in err.message:  # FastAPI: not UTF-8, too deep
            err.field = "body"
        return JSONResponse(err.body(), status_code=exc.status_code, headers=err.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(ServiceError("internal server error").body(), status_code=500)
