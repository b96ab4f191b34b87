"""GET /v1/models."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.engine.bundle import DECODING_KEYS
from app.http.checks import ready_state
from app.http.schemas import KernelsInfo, ModelInfo, ModelsResponse, PivotInfo
from app.http.state import AppState

router = APIRouter(prefix="/v1", tags=["v1"])


@router.get("/models", response_model=ModelsResponse, summary="Loaded models and their scores")
async def models(state: AppState = Depends(ready_state)) -> ModelsResponse:
    return ModelsResponse(
        models=[
            ModelInfo(
                name=m.name,
                source=m.source,
                target=m.target,
                variant=m.translator.variant,
                variants=m.variants,
                scores=m.scores,
                decoding={key: getattr(m.default_options, key) for key in DECODING_KEYS},
                rerank=_rerank(m.translator) if state.settings.rerank else None,
            )
            for m in state.registry
        ],
        pivots=[PivotInfo(source=s, target=t, via=v) for s, t, v in state.registry.pivots()],
        kernels=None if state.kernels is None else KernelsInfo(
            active=list(state.kernels.active), inactive=state.kernels.inactive),
    )


def _rerank(engine: object) -> dict | None:
    """A Translator's reranking language model (app.engine.rerank), if it has one."""
    reranker = getattr(engine, "reranker", None)
    if reranker is None:
        return None
    return {"weight": reranker.weight, "candidates": reranker.candidates}
