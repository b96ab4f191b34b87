"""Request bodies as both APIs read them: one JSON reader with the same rules for every route.

`read_json` turns any body the JSON parser or a number conversion cannot take into a client
error: not JSON or not UTF-8 and nesting too deep for the parser are 400s naming the body; a key
given twice in one object is refused naming that field (JSON leaves its meaning open); an
integer too long to convert (Python stops at 4300 digits) reads as an infinity of its sign, which
every field refuses as non-finite or of the wrong type, naming the field. NaN and Infinity
literals parse, and the fields refuse them in the same way.

`JSONBodyRoute` makes FastAPI routes (v1) read their JSON bodies with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from app.errors import BadRequest, InvalidInput
from app.http.checks import media_type


class _Object(dict):
    """A parsed JSON object that remembers the first key it was given twice."""

    duplicate: str | None = None


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        obj.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def _int(digits: str) -> int | float:
    try:
        return int(digits)
    except ValueError:  # longer than int() converts: beyond any limit of any field
        return -math.inf if digits.startswith("-") else math.inf


def _reject_duplicates(data: Any) -> None:
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:  # iterative: the parser's nesting may be deeper than recursion allows here
        value, path = stack.pop()
        if isinstance(value, _Object):
            if value.duplicate is not None:
                name = f"{path}.{value.duplicate}" if path else value.duplicate
                raise InvalidInput(f"{name}: the key appears more than once in its object",
                                   field=name)
            stack.extend((v, f"{path}.{k}" if path else k) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(value))


_DECODER = json.JSONDecoder(parse_int=_int, object_pairs_hook=_object)


def read_json(body: bytes) -> Any:
    """Parse a JSON body (UTF-8, -16 or -32, a UTF-8 byte order mark allowed)."""
    try:  # json.loads, without a new decoder each time
        data = _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except RecursionError:
        raise BadRequest("the JSON body is nested too deeply", field="body") from None
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        raise BadRequest("the request body is not valid JSON", field="body") from None
    _reject_duplicates(data)
    return data


def is_json_type(kind: str) -> bool:
    return kind == "application/json" or kind.endswith("+json")


class _JSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_parsed"):
            self._parsed = read_json(await self.body())
        return self._parsed


class JSONBodyRoute(APIRoute):
    """A route whose JSON body is read by `read_json` before FastAPI validates it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def parse_then_handle(request: Request) -> Response:
            request = _JSONRequest(request.scope, request.receive)
            if is_json_type(media_type(request)) and await request.body():
                await request.json()  # a bad body fails here, as a ServiceError
            return await handler(request)

        return parse_then_handle
