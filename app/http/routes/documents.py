"""Document jobs: POST /v1/documents, GET /v1/documents/{id}, GET /v1/documents/{id}/result,
DELETE /v1/documents/{id} (the jobs themselves: app.translation.jobs)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import FileResponse, JSONResponse

from app.errors import Conflict, InvalidInput, NotFound, Unavailable
from app.http.access import header_api_key
from app.http.checks import authorized_state, get_state
from app.http.routes.libretranslate import (
    files_enabled,
    form_glossary,
    parse_upload,
    required_text,
)
from app.http.schemas import DocumentJob, ErrorBody, JobProgress
from app.http.state import AppState
from app.translation.jobs import Job, JobRunner

router = APIRouter(prefix="/v1/documents", tags=["v1 documents"])

UPLOAD_DOC = {"requestBody": {"required": True, "content": {"multipart/form-data": {
    "schema": {
        "type": "object",
        "required": ["file", "target"],
        "properties": {
            "file": {"type": "string", "format": "binary",
                     "description": "The document: .txt .html .md .srt .po .xliff .docx .odt "
                                    ".pptx .odp"},
            "source": {"type": "string", "default": "auto", "example": "en"},
            "target": {"type": "string", "example": "de"},
            "glossary": {"type": "string", "example": '{"file manager": "Dateiverwaltung"}',
                         "description": "Terms that must come out as given: a JSON object, "
                         "source term -> target term, over the server's glossary for the pair "
                         "(docs/glossaries.md)"},
        },
    },
}}}}


def _error(code: int, text: str, example: dict[str, Any]) -> dict[str, Any]:
    return {"model": ErrorBody, "description": text,
            "content": {"application/json": {"example": example}}}


NOT_FOUND = {404: _error(404, "No such job (or another API key's, or expired)",
                         {"error": "no document job 5d41...: it never existed, has expired or "
                          "belongs to another API key", "code": "not_found", "field": "id"})}
ERRORS = {
    401: _error(401, "Missing or invalid API key",
                {"error": "invalid API key", "code": "unauthorized"}),
    403: _error(403, "Files translation is off", {"error": "Files translation are disabled on "
                                                  "this server.", "code": "forbidden"}),
    503: _error(503, "Document jobs are not available (no writable jobs directory)",
                {"error": "document jobs are not available", "code": "unavailable"}),
}


def _owner(request: Request, state: AppState) -> str:
    """Whose jobs the caller sees: its API key's digest when keys are set, else everyone's."""
    return state.keys.owner(header_api_key(request))


def _runner(state: AppState) -> JobRunner:
    files_enabled(state)
    if state.jobs is None:
        raise Unavailable("document jobs are not available", retry_after=2)
    return state.jobs


def _job(request: Request, state: AppState, job_id: str) -> tuple[JobRunner, Job]:
    owner = _owner(request, state)
    runner = _runner(state)
    job = runner.store.get(job_id) if len(job_id) == 32 else None
    if job is None or job.owner != owner:
        raise NotFound(f"no document job {job_id[:40]}: it never existed, has expired or "
                       "belongs to another API key", field="id")
    return runner, job


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _view(request: Request, job: Job) -> DocumentJob:
    result = (request.url_for("document_result", job_id=job.id).path
              if job.state == "done" else None)
    return DocumentJob(
        id=job.id, state=job.state, filename=job.filename, source=job.source, target=job.target,
        segments=job.segments, progress=JobProgress(done=job.done, total=job.total,
                                                     pages_read=job.pages_read, pages=job.pages),
        error=job.error, created=_when(job.created), started=_when(job.started),
        finished=_when(job.finished), expires=_when(job.expires), result=result,
    )


@router.post(
    "",
    status_code=202,
    response_model=DocumentJob,
    summary="Start a document job",
    openapi_extra=UPLOAD_DOC,
    responses={
        202: {"headers": {"Location": {"description": "The job's URL",
                                       "schema": {"type": "string"}}}},
        **ERRORS,
        400: _error(400, "Unsupported language pair, or a glossary over a limit", {
            "error": "target 'xx' is not supported from 'en'; available: ['de']",
            "code": "unsupported_language", "field": "target"}),
        413: _error(413, "A limit on size, segments or characters", {
            "error": "the file has at least 20001 segments; the limit is 20000",
            "code": "document_too_large", "field": "file", "limit": 20000}),
        415: _error(415, "Not a multipart upload, or an unsupported format", {
            "error": "unsupported file format .exe; supported: .txt, ...",
            "code": "unsupported_format", "field": "file"}),
        422: _error(422, "A missing field or an unreadable file", {
            "error": "Invalid request: missing target parameter", "code": "invalid_input",
            "field": "target"}),
        429: _error(429, "Rate limited", {"error": "too many requests", "code": "rate_limited"}),
        503: _error(503, "Too many jobs waiting, loading or shutting down", {
            "error": "100 document jobs are waiting; the limit is 100; retry later",
            "code": "overloaded", "field": "max_pending_jobs", "limit": 100}),
    },
)
async def create_job(request: Request, state: AppState = Depends(authorized_state)
                     ) -> JSONResponse:
    """multipart: file, source (or `auto`), target, glossary (optional: a JSON object). The
    document and the glossary are checked against the limits now; the document is translated
    in the background at a lower priority than live requests, with the glossary kept with the
    job. Poll the job (Location header), then download `result`."""
    from app.documents import format_of

    runner = _runner(state)
    owner = _owner(request, state)
    data, uploads = await parse_upload(request)
    if "file" not in uploads:
        raise InvalidInput("Invalid request: missing file parameter", field="file")
    filename, content = uploads["file"]
    if not content:
        raise InvalidInput("Invalid request: empty file", field="file")
    target = required_text(data, "target")
    source = required_text(data, "source") if "source" in data else "auto"
    glossary = form_glossary(data, state.settings.max_body_bytes, uploads)
    state.service.requested_glossary(glossary)  # refused now, not when the job runs
    fmt = format_of(filename)
    pages = [0]  # of a PDF, as this read counts them

    def reading(done: int, total: int) -> None:
        pages[0] = total

    # read into a box, handed to the job if this process runs it next (it is not read again)
    box, _, _ = await state.service.read_document(content, fmt, source, target,
                                                  lambda doc: [doc], reading)
    try:
        job = await runner.submit(owner, filename, fmt, source, target, len(box[0].segments),
                                  content, glossary, read=box, pages=pages[0])
    finally:
        if box:  # kept by no job: freed off the event loop (read_document)
            await asyncio.to_thread(box.clear)
    url = request.url_for("document_job", job_id=job.id).path
    return JSONResponse(_view(request, job).model_dump(), status_code=202,
                        headers={"Location": url})


@router.get("/{job_id}", response_model=DocumentJob, name="document_job",
            summary="A document job's state and progress", responses={**ERRORS, **NOT_FOUND})
async def get_job(job_id: str, request: Request, state: AppState = Depends(get_state)
                  ) -> DocumentJob:
    _, job = _job(request, state, job_id)
    return _view(request, job)


@router.get(
    "/{job_id}/result", name="document_result", summary="Download a done job's document",
    responses={200: {"content": {"application/octet-stream": {}}}, **ERRORS, **NOT_FOUND,
               409: _error(409, "The job is not done", {
                   "error": "document job 5d41... is running, not done", "code": "conflict",
                   "field": "state"})},
)
async def job_result(job_id: str, request: Request, state: AppState = Depends(get_state)
                     ) -> Response:
    runner, job = _job(request, state, job_id)
    if job.state != "done":
        raise Conflict(f"document job {job.id} is {job.state}, not done"
                       + (f": {job.error}" if job.error else ""), field="state")
    return FileResponse(runner.store.result_path(job.id), filename=job.filename,
                        media_type="application/octet-stream")


@router.delete(
    "/{job_id}", summary="Cancel a job, or remove a finished one",
    responses={200: {"model": DocumentJob, "description": "Cancelled (it was queued or running)"},
               204: {"description": "Removed with its result (it had finished)"},
               **ERRORS, **NOT_FOUND},
)
async def delete_job(job_id: str, request: Request, state: AppState = Depends(get_state)
                     ) -> Response:
    runner, job = _job(request, state, job_id)
    if job.finished_state:
        await asyncio.to_thread(runner.store.remove, job.id)
        return Response(status_code=204)
    cancelled = await asyncio.to_thread(runner.cancel, job)
    return JSONResponse(_view(request, cancelled).model_dump())
