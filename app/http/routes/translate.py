"""POST /v1/translate."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import ValidationError

from app.errors import ServiceError
from app.http.body import JSONBodyRoute, is_json_type, read_json
from app.http.checks import (
    authorized_state,
    disconnect_watch,
    media_type,
    require_json,
)
from app.http.direct import Fallback
from app.http.schemas import (
    DetectedLanguage,
    ErrorBody,
    TranslateRequest,
    TranslateResponse,
    Translation,
)
from app.http.state import AppState
from app.translation.service import RequestedOptions, TranslationRequest, route_name

router = APIRouter(prefix="/v1", tags=["v1"], route_class=JSONBodyRoute)

ERRORS = {
    code: {"model": ErrorBody, "description": text,
           "content": {"application/json": {"example": example}}}
    for code, text, example in [
        (400, "Unsupported language pair or malformed JSON",
         {"error": "target 'xx' is not supported from 'en'; available: ['de']",
          "code": "unsupported_language", "field": "target"}),
        (401, "Missing or invalid API key", {"error": "invalid API key", "code": "unauthorized"}),
        (413, "A limit on texts, characters or body size",
         {"error": "text has 6000 characters; the limit is 5000", "code": "too_large",
          "field": "text", "limit": 5000}),
        (415, "Not JSON", {"error": "Content-Type must be application/json, got 'text/plain'",
                           "code": "unsupported_media_type", "field": "Content-Type"}),
        (422, "Invalid fields", {"error": "options.beam_size: Input should be greater than or "
                                 "equal to 1 (got 0)", "code": "invalid_input",
                                 "field": "options.beam_size"}),
        (429, "Rate limited", {"error": "too many requests", "code": "rate_limited"}),
        (503, "Queue full, loading or shutting down",
         {"error": "the queue is full; retry later", "code": "overloaded"}),
        (504, "Deadline exceeded", {"error": "the translation took longer than the request "
                                    "timeout of 30 s", "code": "timeout"}),
    ]
}


@router.post(
    "/translate",
    response_model=TranslateResponse,
    response_model_exclude_none=True,
    responses=ERRORS,
    dependencies=[Depends(require_json)],
    summary="Translate one or more texts",
)
async def translate(
    body: TranslateRequest, request: Request, state: AppState = Depends(authorized_state)
) -> TranslateResponse:
    return await run(body, request, state)


async def run(body: TranslateRequest, request: Request, state: AppState) -> TranslateResponse:
    outcome = await state.service.translate(
        TranslationRequest(
            texts=[body.text] if isinstance(body.text, str) else body.text,
            source=body.source,
            target=body.target,
            format=body.format,
            options=RequestedOptions(**body.options.model_dump()),
            glossary=body.glossary,
        ),
        until_gone=disconnect_watch(request),
    )
    return TranslateResponse(
        translations=[
            Translation(text=r.text, score=r.score, alternatives=r.alternatives or None,
                        confidence=r.confidence,
                        detected=DetectedLanguage(**r.detected.libretranslate())
                        if r.detected else None,
                        model=route_name(r.route) if r.route is not None else None)
            for r in outcome.results
        ],
        model=outcome.model_name,
        source=outcome.source,
        target=outcome.target,
        pivot=outcome.pivot,
        sentences=outcome.sentences,
        elapsed_ms=outcome.elapsed_ms,
    )


async def direct(request: Request) -> Response:
    """The route for app.http.direct: a JSON body that parses and validates is checked (ready,
    API key, rate limit: the route's dependencies, in their order) and translated here; any
    other goes back to FastAPI (Fallback), whose parsing and validation come first there too."""
    if not is_json_type(media_type(request)):
        raise Fallback
    try:
        body = TranslateRequest.model_validate(read_json(await request.body()))
    except (ServiceError, ValidationError):
        raise Fallback from None
    state = await authorized_state(request)  # the route's dependency, called as it is
    answer = await run(body, request, state)
    return Response(answer.model_dump_json(exclude_none=True), media_type="application/json")
