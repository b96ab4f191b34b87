"""The service's exception hierarchy: what went wrong, in words that know nothing of HTTP.

Each error carries a stable `code`, a message naming the field and the limit, and where they
apply the `field`, the `limit` and how long to wait before retrying. The batcher, the engine
adapters and the translation use case raise these; `app.http.errors` is the one place that turns
them into responses (status codes of either API, headers, the JSON body).
"""

from __future__ import annotations

from typing import Any

MAX_ECHO_CHARS = 200  # the longest excerpt of a client's input an error message may quote


def excerpt(value: Any, limit: int = MAX_ECHO_CHARS) -> str:
    """repr(value), cut to `limit` characters: errors never echo a whole input back."""
    text = repr(value)
    if len(text) > limit:
        return f"{text[:limit]}... ({len(text)} characters)"
    return text


class ServiceError(Exception):
    """Base of every error the service answers on purpose."""

    code = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        limit: int | float | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.limit = limit
        self.retry_after = retry_after


class BadRequest(ServiceError):
    code = "bad_request"


class UnsupportedLanguage(BadRequest):
    code = "unsupported_language"


class Unauthorized(ServiceError):
    code = "unauthorized"

    def __init__(self, message: str, *, key_given: bool) -> None:
        super().__init__(message, field="api_key")
        self.key_given = key_given


class Forbidden(ServiceError):
    """A feature this server has turned off."""

    code = "forbidden"


class NotFound(ServiceError):
    code = "not_found"


class Conflict(ServiceError):
    """The resource is not in the state the request needs (a result before it is done)."""

    code = "conflict"


class TooLarge(ServiceError):
    """A limit on characters, texts or body size."""

    code = "too_large"


class BodyTooLarge(TooLarge):
    code = "body_too_large"


class UnsupportedMediaType(ServiceError):
    code = "unsupported_media_type"


class InvalidInput(ServiceError):
    """A field whose value is of the wrong type, out of range, or not convertible."""

    code = "invalid_input"


class RateLimited(ServiceError):
    code = "rate_limited"


class Unavailable(ServiceError):
    """Not ready, draining, or the queue is full: try again later."""

    code = "unavailable"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message, retry_after=retry_after)


class Overloaded(Unavailable):
    code = "overloaded"


class DeadlineExceeded(ServiceError):
    code = "timeout"


class EngineFailure(ServiceError):
    """The engine raised; the details go to the log, never to the client."""

    code = "internal_error"

    def __init__(self) -> None:
        super().__init__("translation failed; see the server log")


class ClientGone(ServiceError):
    """The client went away before its answer was ready."""

    code = "client_closed_request"
