"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from app.http.checks import get_state
from app.http.state import AppState

router = APIRouter(prefix="/health", tags=["operations"])


@router.get("/live", summary="The process is up")
async def live(state: AppState = Depends(get_state)) -> JSONResponse:
    if state.load_error:
        return JSONResponse({"status": "failed", "error": state.load_error}, status_code=503)
    return JSONResponse({"status": "alive"})


@router.get("/ready", summary="Models loaded and warmed up, not draining")
async def ready(state: AppState = Depends(get_state)) -> JSONResponse:
    if state.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    if state.load_error:
        return JSONResponse({"status": "failed", "error": state.load_error}, status_code=503)
    if not state.ready or state.registry is None:
        return JSONResponse({"status": "loading"}, status_code=503)
    if state.peers is not None and not state.peers.all_ready:  # another server process is not
        return JSONResponse({"status": "loading", "processes": state.peers.count,
                             "processes_ready": state.peers.ready_count()}, status_code=503)
    return JSONResponse({"status": "ready", "models": [m.name for m in state.registry]})
