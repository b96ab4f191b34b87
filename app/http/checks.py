"""The one chain of checks a request passes before it may translate, in this order: the service
is ready (503 while loading or draining), the API key is valid (when keys are set), the caller is
within its rate limit. FastAPI's routes declare these functions as dependencies, and the hot
routes answered without FastAPI (app.http.direct) call the very same functions, so a new check
goes here once.

The dependencies are coroutines although none awaits anything (they only read memory): FastAPI
runs a plain-function dependency in its thread pool, a thread hand-off per dependency on every
request (BENCHMARKS.md has what that cost)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from email.message import Message

from fastapi import Request

from app.errors import ServiceError, Unavailable, UnsupportedMediaType, excerpt
from app.http.access import client_id, header_api_key
from app.http.state import AppState


async def get_state(request: Request) -> AppState:
    return request.app.state.nmt


async def ready_state(request: Request) -> AppState:
    """The state of a service that can translate now; 503 otherwise."""
    state = await get_state(request)
    if state.draining:
        raise Unavailable("the server is shutting down", retry_after=5)
    if not state.ready or state.registry is None or state.service is None:
        raise Unavailable("the models are still loading", retry_after=2)
    return state


def admit(request: Request, state: AppState, api_key: str | None) -> None:
    """The caller's API key (when keys are set), then its rate limit: per API key when keys are
    configured (the key was checked), else per client address: an unchecked key must not open a
    fresh bucket for each made-up value."""
    state.keys.check(api_key)
    if state.limiter is not None:
        key = api_key if state.keys else None
        try:
            state.limiter.hit(client_id(request, key))
        except ServiceError as exc:  # counted by its code, as every other refusal
            state.metrics.rejected.labels(exc.code).inc()
            raise


async def authorized_state(request: Request) -> AppState:
    """The whole chain for a key sent in the headers: ready, API key, rate limit."""
    state = await ready_state(request)
    admit(request, state, header_api_key(request))
    return state


def media_type(request: Request) -> str:
    value = request.headers.get("content-type", "")
    kind = value.split(";", 1)[0].strip().lower()
    if kind.count("/") != 1:  # email's parser reads it as text/plain: name what was sent
        return kind
    message = Message()
    message["content-type"] = value
    return message.get_content_type()


async def require_json(request: Request) -> None:
    kind = media_type(request)
    if kind != "application/json" and not kind.endswith("+json"):
        raise UnsupportedMediaType(
            f"Content-Type must be application/json, got {excerpt(kind or 'none', 80)}",
            field="Content-Type",
        )


async def until_disconnected(request: Request) -> None:
    """Returns once the client has gone away (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def disconnect_watch(request: Request) -> Callable[[], Awaitable[None]]:
    """For TranslationService.translate: what tells it that the client has gone."""
    return functools.partial(until_disconnected, request)
