"""LibreTranslate-compatible endpoints: POST /translate, POST /detect, GET /languages,
GET /frontend/settings, POST /suggest, POST /translate_file with GET /download_file/{name}.

Bodies may be JSON, form-urlencoded or multipart (as LibreTranslate accepts); errors are
{"error": "..."} with LibreTranslate's status codes (see app.http.errors.status_for).
"""

from __future__ import annotations

import asyncio
import logging
from email.errors import StartBoundaryNotFoundDefect
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from pydantic import ValidationError

from app.errors import (
    BadRequest,
    DeadlineExceeded,
    Forbidden,
    InvalidInput,
    Unavailable,
    UnsupportedMediaType,
    excerpt,
)
from app.http.access import header_api_key
from app.http.body import is_json_type, read_json
from app.http.checks import admit, disconnect_watch, get_state, media_type, ready_state
from app.http.errors import invalid_input
from app.http.schemas import (
    GLOSSARY_DOC,
    ErrorBody,
    LibreLanguage,
    LibreTranslateRequest,
    json_text,
)
from app.http.state import AppState
from app.text.langid import Detection, libretranslate_detections
from app.translation.service import (
    FieldNames,
    RequestedOptions,
    TranslationRequest,
    unless_gone,
)
from app.translation.stoppable import run_stoppable

log = logging.getLogger("app.http.routes.libretranslate")
router = APIRouter(tags=["LibreTranslate"])

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek",
    "en": "English", "es": "Spanish", "fi": "Finnish", "fr": "French", "hu": "Hungarian",
    "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pl": "Polish",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese",
}
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {  # inline: no route names the model, so it is not among the components
            kind: {"schema": LibreTranslateRequest.model_json_schema()}
            for kind in ("application/json", *FORM_TYPES)
        },
    }
}
API_KEY_DOC = {"anyOf": [{"type": "string"}, {"type": "null"}],  # as /translate's api_key
               "description": "The API key, where the server requires one (or in the "
               "Authorization or X-API-Key header)."}
DETECT_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            kind: {"schema": {
                "type": "object",
                "required": ["q"],
                "properties": {
                    "q": {"type": "string", "minLength": 1, "example": "Die Datei ist leer.",
                          "description": "The text whose language is wanted."},
                    "api_key": API_KEY_DOC,
                },
            }}
            for kind in ("application/json", *FORM_TYPES)
        },
    }
}
UPLOAD_DOC = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object",
    "required": ["file", "source", "target"],
    "properties": {
        "file": {"type": "string", "format": "binary",
                 "description": "The document: .txt .html .md .srt .po .xliff .docx .odt "
                                ".pptx .odp"},
        "source": {"type": "string", "example": "en", "description": "A language code or "
                   "`auto`."},
        "target": {"type": "string", "example": "de"},
        "api_key": API_KEY_DOC,
        "glossary": {"type": "string", "example": '{"file manager": "Dateiverwaltung"}',
                     "description": GLOSSARY_DOC + " A JSON object as text (or a file part)."},
    },
}}}}}
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in [
        (400, "Bad input, a limit on texts or characters, unsupported language, missing key"),
        (403, "Invalid API key"),
        (413, "The request body is larger than the limit"),
        (429, "Rate limited"),
        (503, "Queue full, loading or shutting down"),
        (504, "Deadline exceeded"),
    ]
}


def _pairs_to_dict(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            data[key] = [*([data[key]] if isinstance(data[key], str) else data[key]), value]
        else:
            data[key] = value
    return data


def _mime(content_type: str, body: bytes) -> EmailMessage:
    """The multipart body as a message; BadRequest where its parts cannot be found (clients
    that set the header by hand often drop the boundary, and every field then reads as
    missing)."""
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    boundary = message.get_boundary()
    if not boundary:
        raise BadRequest("Content-Type multipart/form-data needs its boundary parameter "
                         "(multipart/form-data; boundary=...)", field="Content-Type")
    if body and any(isinstance(d, StartBoundaryNotFoundDefect) for d in message.defects):
        raise BadRequest(f"the multipart body has no part: its boundary "
                         f"{excerpt(boundary, 70)!r} (from Content-Type) is not in it",
                         field="body")
    return message


def _field_text(part: EmailMessage) -> str:
    """A form field's text: in its part's charset, UTF-8 where none is named (as browsers and
    HTTP clients send form fields; the email parser's default, ASCII, would turn every other
    character into U+FFFD)."""
    data = part.get_payload(decode=True) or b""
    try:
        return data.decode(part.get_content_charset() or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return data.decode("utf-8", "replace")


def _multipart(content_type: str, body: bytes) -> list[tuple[str, str]]:
    message = _mime(content_type, body)
    pairs = []
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            pairs.append((str(name), _field_text(part)))
    return pairs


async def parse_body(request: Request) -> tuple[dict[str, Any], bool]:
    """The request's fields from JSON, form-urlencoded or multipart bodies (or the query), and
    whether they came as JSON (typed: validated strictly) rather than as form strings."""
    kind = media_type(request)
    body = await request.body()
    if is_json_type(kind) or (not kind and body.lstrip()[:1] == b"{"):
        data = read_json(body)
        if not isinstance(data, dict):
            raise BadRequest("the JSON body must be an object", field="body")
        return data, True
    pairs = list(request.query_params.multi_items())
    if kind == "application/x-www-form-urlencoded":
        pairs += parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
    elif kind == "multipart/form-data":
        try:
            pairs += _multipart(request.headers["content-type"], body)
        except BadRequest:
            raise
        except Exception:
            raise BadRequest("the multipart body could not be parsed", field="body") from None
    elif body:
        raise UnsupportedMediaType(
            f"Content-Type must be application/json or a form, got {excerpt(kind or 'none', 80)}",
            field="Content-Type",
        )
    return _pairs_to_dict(pairs), False


@router.post(
    "/translate",
    summary="Translate (LibreTranslate API)",
    openapi_extra=BODY_DOC,
    responses={200: {"content": {"application/json": {"example": {"translatedText": "Hallo"}}}},
               **ERRORS},
)
async def translate(request: Request, state: AppState = Depends(ready_state)) -> dict[str, Any]:
    data, typed = await parse_body(request)
    authorize(request, state, data)
    try:
        body = LibreTranslateRequest.model_validate(data, strict=typed)  # JSON: false is no 0
    except ValidationError as exc:
        raise invalid_input(exc.errors()) from None
    single = isinstance(body.q, str)
    outcome = await state.service.translate(
        TranslationRequest(
            texts=[body.q] if single else body.q,
            source=body.source,
            target=body.target,
            format=body.format,
            options=RequestedOptions(alternatives=body.alternatives,
                                     confidence=body.confidence),
            fields=FieldNames(text="q", options=""),
            glossary=body.glossary,
        ),
        until_gone=disconnect_watch(request),
    )
    results = outcome.results
    out: dict[str, Any] = {
        "translatedText": results[0].text if single else [r.text for r in results]
    }
    if body.alternatives:
        alts = [r.alternatives for r in results]
        out["alternatives"] = alts[0] if single else alts
    if body.source == "auto":  # each text's own language (app.translation.service)
        found = [r.detected or outcome.detected or Detection(outcome.source, 100.0)
                 for r in results]
        detected = [d.libretranslate() for d in found]
        out["detectedLanguage"] = detected[0] if single else detected
    if body.confidence:  # asked for: not in LibreTranslate's answer
        out["confidence"] = results[0].confidence if single else [r.confidence for r in results]
    return out


async def direct(request: Request) -> JSONResponse:
    """The route for app.http.direct: the same dependency and answer."""
    state = await ready_state(request)
    return JSONResponse(await translate(request, state))


@router.get("/languages", response_model=list[LibreLanguage], summary="Supported languages")
async def languages(state: AppState = Depends(ready_state)) -> list[LibreLanguage]:
    registry = state.registry
    # a language is its own target too: the text comes back as it is (LibreTranslate's way)
    return [
        LibreLanguage(code=c, name=LANGUAGE_NAMES.get(c, c),
                      targets=sorted({c, *registry.targets(c)}))
        for c in registry.languages
    ]


def authorize(request: Request, state: AppState, data: dict[str, Any]) -> None:
    """The rest of the chain of checks (app.http.checks.admit) for LibreTranslate's clients,
    whose key may come in the body's api_key field as well as in the headers; a field that is
    no string (a number, a form field given twice) is refused, not read as no key."""
    api_key = data.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        raise InvalidInput(f"api_key must be a string (got {excerpt(api_key, 40)})",
                           field="api_key")
    admit(request, state, api_key or header_api_key(request))


def required_text(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if value is None or value == "":
        raise InvalidInput(f"Invalid request: missing {name} parameter", field=name)
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string (got {excerpt(value, 40)})", field=name)
    return value


@router.post(
    "/detect",
    summary="Detect the language of a text (LibreTranslate API)",
    openapi_extra=DETECT_DOC,
    responses={200: {"content": {"application/json": {
        "example": [{"confidence": 97.5, "language": "de"}]}}}, **ERRORS},
)
async def detect(request: Request, state: AppState = Depends(ready_state)) -> list[dict[str, Any]]:
    """Every served language (targets included), most likely first, with confidences 0-100."""
    data, _ = await parse_body(request)
    authorize(request, state, data)
    return libretranslate_detections(state.service.detect(required_text(data, "q")))


def _language(code: str) -> dict[str, str]:
    name = "Auto Detect" if code == "auto" else LANGUAGE_NAMES.get(code, code)
    return {"code": code, "name": name}


def supported_file_formats() -> list[str]:
    """The extensions /translate_file takes: those whose reader is installed."""
    from app.documents import FORMATS, UnsupportedFormat, handler

    formats = []
    for ext in FORMATS:
        try:
            handler(ext)
        except UnsupportedFormat:
            continue
        formats.append("." + ext)
    return formats


@router.get("/frontend/settings", summary="Settings for a LibreTranslate web page")
async def frontend_settings(state: AppState = Depends(ready_state)) -> dict[str, Any]:
    settings, registry = state.settings, state.registry
    sources = registry.sources
    source = "auto" if len(sources) > 1 else sources[0]
    targets = registry.targets(sources[0])
    files = files_on(state)
    return {
        "charLimit": settings.max_chars_per_text,
        "frontendTimeout": settings.frontend_timeout,
        # not LibreTranslate's: the page's own web client waits this long (ms) before it gives
        # up on a request that hangs, beyond which this server has answered 504 itself
        "requestTimeout": round(settings.request_timeout * 1000),
        "apiKeys": bool(settings.api_keys),
        "keyRequired": bool(settings.api_keys),
        "suggestions": False,
        "filesTranslation": files,
        "supportedFilesFormat": supported_file_formats() if files else [],
        "language": {"source": _language(source), "target": _language(targets[0])},
    }


@router.post("/suggest", summary="Suggest a better translation (turned off here)",
             responses={403: {"model": ErrorBody, "description": "Suggestions are off"}})
async def suggest() -> None:
    raise Forbidden("Suggestions are disabled on this server.")


async def parse_upload(request: Request) -> tuple[dict[str, Any], dict[str, tuple[str, bytes]]]:
    """A multipart body's text fields, and its files by field name: (file name, bytes)."""
    if media_type(request) != "multipart/form-data":
        raise UnsupportedMediaType("Content-Type must be multipart/form-data (a file upload)",
                                   field="Content-Type")
    body = await request.body()
    try:
        # in a thread: the email parser takes a while over a body of megabytes, and the
        # event loop serves every other connection of this process meanwhile
        fields, files = await asyncio.to_thread(_upload_parts, request.headers["content-type"],
                                                body)
    except BadRequest:
        raise
    except Exception:
        raise BadRequest("the multipart body could not be parsed", field="body") from None
    return _pairs_to_dict(fields), files


def _upload_parts(content_type: str, body: bytes
                  ) -> tuple[list[tuple[str, str]], dict[str, tuple[str, bytes]]]:
    fields, files = [], {}
    for part in _mime(content_type, body).iter_parts():
        name = str(part.get_param("name", header="content-disposition") or "")
        filename = part.get_filename()
        if filename is not None:
            files[name] = (str(filename), part.get_payload(decode=True) or b"")
        elif name:
            fields.append((name, _field_text(part)))
    return fields, files


def form_glossary(data: dict[str, Any], max_bytes: int,
                  uploads: dict[str, tuple[str, bytes]] | None = None) -> dict[str, str] | None:
    """A form's `glossary` field (our extension): a JSON object as text, or None; its text
    at most `max_bytes` long (NMT_MAX_BODY_BYTES: what a JSON body with a glossary may be).
    In an upload it may come as a file part too (`curl -F glossary=@terms.json`)."""
    value = data.get("glossary")
    if value is None and uploads and "glossary" in uploads:
        try:
            value = uploads["glossary"][1].decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("glossary must be UTF-8 text", field="glossary") from None
    if value is None or value == "":
        return None
    size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else 0
    if size > max_bytes:  # refused before it is parsed
        raise BadRequest(f"glossary has {size} bytes; the limit is {max_bytes}",
                         field="glossary", limit=max_bytes)
    try:
        parsed = json_text(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidInput("glossary must be a JSON object (source term -> target term)",
                           field="glossary")
    return parsed


def files_on(state: AppState) -> bool:
    """Off by NMT_FILES_TRANSLATION=false, or where the files directory cannot be written."""
    return state.settings.files_translation and state.files is not None


def files_enabled(state: AppState) -> None:
    if not files_on(state):
        raise Forbidden("Files translation are disabled on this server.")


@router.post(
    "/translate_file",
    summary="Translate a document (LibreTranslate API)",
    openapi_extra=UPLOAD_DOC,
    responses={200: {"content": {"application/json": {"example": {
        "translatedFileUrl": "http://127.0.0.1:8000/download_file/0f3c....report.docx"}}}},
        403: {"model": ErrorBody, "description": "Invalid API key, or files are off"},
        **ERRORS},
)
async def translate_file(request: Request, state: AppState = Depends(ready_state)
                         ) -> dict[str, Any]:
    """multipart: file, source (or auto), target, api_key, and (our extension) glossary: a
    JSON object of source term -> target term. The answer's URL downloads the translated
    file, with its structure kept, until it expires (NMT_FILES_EXPIRY)."""
    from app.documents import format_of

    files_enabled(state)
    data, uploads = await parse_upload(request)
    authorize(request, state, data)
    if "file" not in uploads:
        raise InvalidInput("Invalid request: missing file parameter", field="file")
    filename, content = uploads["file"]
    source, target = required_text(data, "source"), required_text(data, "target")
    if not content:
        raise InvalidInput("Invalid request: empty file", field="file")
    fmt = format_of(filename)
    limit = state.settings.file_timeout
    glossary = form_glossary(data, state.settings.max_body_bytes, uploads)

    async def translate_and_keep() -> str:
        outcome = await state.service.translate_document(content, fmt, source, target,
                                                         glossary=glossary)
        return await run_stoppable(lambda stop: state.files.put(filename, outcome.data))

    try:
        # the client gone or the deadline passed, the document's work is cancelled in
        # whatever phase it is (reading, translating, rebuilding, writing): its thread stops
        async with asyncio.timeout(limit):
            name = await unless_gone(translate_and_keep(), disconnect_watch(request))
    except TimeoutError:
        raise DeadlineExceeded(
            f"the document took longer than the file timeout of {limit:g} s; send large "
            "documents as document jobs (/v1/documents)", field="file_timeout", limit=limit,
        ) from None
    except OSError as exc:  # a full disk, say: the server's trouble, and it may pass
        log.warning("cannot keep a translated file: %s", exc)
        raise Unavailable("the server cannot keep the translated file now; try again later",
                          retry_after=60) from None
    return {"translatedFileUrl": str(request.url_for("download_file", name=name))}


@router.get("/download_file/{name}", summary="Download a translated file",
            responses={200: {"content": {"application/octet-stream": {}}},
                       404: {"model": ErrorBody, "description": "No such file, or expired"}})
async def download_file(name: str, state: AppState = Depends(get_state)) -> Response:
    files_enabled(state)
    path = state.files.path(name)
    return FileResponse(path, filename=state.files.download_name(name),
                        media_type="application/octet-stream")
