"""GET /metrics (Prometheus text format)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse, Response

from app.http.checks import get_state
from app.http.state import AppState

router = APIRouter(tags=["operations"])


@router.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
async def metrics(state: AppState = Depends(get_state)) -> Response:
    if state.batcher is not None:
        state.metrics.queue_depth.set(state.batcher.depth)
    return Response(state.metrics.render(), media_type=state.metrics.content_type)
