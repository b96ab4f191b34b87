"""The one mapping from the service's errors (app.errors) to HTTP responses, for both APIs.

Every error body has one shape, readable by LibreTranslate clients (`error` is a string) and by
v1 clients (`code`, and `field` / `limit` where they apply):

    {"error": "text[0] has 6000 characters; the limit is 5000", "code": "text_too_long",
     "field": "text[0]", "limit": 5000}

The LibreTranslate routes answer with the status codes LibreTranslate uses (400 for bad input
and limits, 403 for a wrong API key); `status_for` holds that difference.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import compile_path

from app.errors import (
    BadRequest,
    BodyTooLarge,
    ClientGone,
    Conflict,
    DeadlineExceeded,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    ServiceError,
    TooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    excerpt,
)

log = logging.getLogger("app.http.errors")

LIBRETRANSLATE_PREFIXES = ("/translate", "/languages", "/detect", "/frontend", "/suggest",
                           "/download_file")  # /translate_file too

# the most specific class in an error's MRO decides
STATUS: dict[type[ServiceError], int] = {
    ServiceError: 500,
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    TooLarge: 413,
    UnsupportedMediaType: 415,
    InvalidInput: 422,
    RateLimited: 429,
    ClientGone: 499,  # nginx's "client closed request"
    Unavailable: 503,
    DeadlineExceeded: 504,
}
LIBRETRANSLATE_STATUS: dict[type[ServiceError], int] = {
    TooLarge: 400,
    BodyTooLarge: 413,
    UnsupportedMediaType: 400,
    InvalidInput: 400,
}


def _lookup(table: dict[type[ServiceError], int], exc: ServiceError) -> int | None:
    return next((table[cls] for cls in type(exc).__mro__ if cls in table), None)


def is_libretranslate(path: str) -> bool:
    return path.startswith(LIBRETRANSLATE_PREFIXES)


def status_for(exc: ServiceError, path: str) -> int:
    if is_libretranslate(path):
        if isinstance(exc, Unauthorized):  # LibreTranslate: 403 wrong key, 400 missing key
            return 403 if exc.key_given else 400
        status = _lookup(LIBRETRANSLATE_STATUS, exc)
        if status is not None:
            return status
    return _lookup(STATUS, exc) or 500


def headers_for(exc: ServiceError) -> dict[str, str]:
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, BodyTooLarge):  # the rest of the body is never read
        headers["Connection"] = "close"
    return headers


def error_body(exc: ServiceError) -> dict[str, Any]:
    body: dict[str, Any] = {"error": _printable(exc.message), "code": exc.code}
    if exc.field is not None:
        body["field"] = _printable(exc.field)
    if exc.limit is not None:
        body["limit"] = exc.limit
    return body


def error_response(exc: ServiceError, path: str) -> JSONResponse:
    return JSONResponse(error_body(exc), status_code=status_for(exc, path),
                        headers=headers_for(exc))


def client_gone(path: str) -> JSONResponse:
    """The answer to a client that went away while it sent its body: 499 like any other
    client gone (nobody reads it; the metrics count it), not a server error."""
    return error_response(ClientGone("the client closed the connection"), path)


def _printable(text: str) -> str:
    """Text a UTF-8 JSON body can carry: a lone surrogate from the input (say, an unknown field
    named "\\ud800") becomes a backslash escape instead of failing the error response."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# loc parts that are not fields: where the value came from, and the member of a union that
# pydantic tried (`str`, `list[str]`)
_NOT_FIELDS = {"body", "query", "path", "header", "str", "int", "float", "bool", "bytes"}


def _field_name(loc: Iterable[Any]) -> str:
    parts = [str(p) for p in loc
             if isinstance(p, int) or (p not in _NOT_FIELDS and "[" not in str(p))]
    name = ""
    for part in parts:
        name += f"[{part}]" if part.isdigit() else (f".{part}" if name else part)
    return name or "body"


def invalid_input(errors: Sequence[Any]) -> ServiceError:
    """Validation errors (pydantic's dicts) as one error: a short message per problem, naming
    the field; never echoes a whole input back."""
    if any(err.get("type") == "json_invalid" for err in errors):
        return BadRequest("the request body is not valid JSON", field="body")
    messages = []
    first_field = None
    for err in errors[:5]:
        field = _field_name(err.get("loc", ()))
        first_field = first_field or field
        msg = f"{field}: {err.get('msg', 'invalid')}"
        if err.get("type") not in ("missing", "extra_forbidden") and "input" in err:
            msg += f" (got {excerpt(err['input'])})"
        messages.append(msg)
    if len(errors) > 5:
        messages.append(f"... and {len(errors) - 5} more")
    return InvalidInput("; ".join(messages), field=first_field)


def allowed_methods(request: Request) -> set[str]:
    """The methods of every route whose path matches the request's (Starlette's 405 names
    only the first such route's)."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.routes):
        if route.path and route.methods and compile_path(route.path)[0].match(request.url.path):
            methods |= route.methods
    return methods


def install_handlers(app: FastAPI) -> None:
    """The one place where exceptions become HTTP responses."""

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(invalid_input(exc.errors()), request.url.path)

    @app.exception_handler(ClientDisconnect)
    async def _client_disconnect(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return client_gone(request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        err = ServiceError(str(exc.detail))
        err.code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error")
        if exc.status_code == 400 and "body" in err.message:  # FastAPI: not UTF-8, too deep
            err.field = "body"
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every route of the path, not only the first one's methods
            headers["Allow"] = ", ".join(sorted(allowed_methods(request)))
        return JSONResponse(error_body(err), status_code=exc.status_code, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(ServiceError("internal server error")), status_code=500)
