"""Settings: every option of the service, from NMT_* environment variables or `nmt serve` flags.

List settings (API keys, CORS origins) are read from the environment as comma-separated values.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# settings renamed since they were released: first name -> name. The first name is still read,
# as a keyword, an NMT_ variable and a flag, so existing deployments keep working.
RENAMED = {"lane_processes": "worker_processes"}
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # scheme://, e.g. an http(s), s3 or file URL


def default_models_dir() -> Path:
    """`./bundles` when the working directory has one, else the repository's `bundles/`."""
    cwd = Path.cwd() / "bundles"
    if cwd.is_dir():
        return cwd
    return Path(__file__).resolve().parent.parent / "bundles"


class Settings(BaseSettings):
    """The service's configuration. Defaults are safe: loopback bind, bounded inputs and queue."""

    model_config = SettingsConfigDict(env_prefix="NMT_", extra="ignore", frozen=True)

    # network
    host: str = Field("127.0.0.1", description="Bind address; loopback by default.")
    port: int = Field(8000, ge=0, le=65535, description="Port (0 picks a free one).")
    # models and engine
    models_dir: Path = Field(
        default_factory=default_models_dir,
        description="Directory of bundles (one sub-directory per language pair) or one bundle.",
    )
    provider: Literal["cpu", "cuda"] = Field("cpu", description="ONNX Runtime execution provider.")
    threads: int = Field(0, ge=0, description="ONNX Runtime intra-op threads (0 = its default).")
    workers: int = Field(
        0, ge=0, description="Decode workers: running batches decoded side by side, each on its "
        "own thread (or worker process) with single-thread sessions (0 = one per core, at most "
        "max_batch_size / 16; 1 on CUDA). The batch size cap and token budget are shared out "
        "among them.",
    )
    processes: int = Field(
        0, ge=0, description="Server processes behind the one port, each with its own event "
        "loop, its share of the decode workers and queue, and a spare decode worker per other "
        "process for when they idle; each new connection goes to the one with the fewest "
        "(app.serving). 0 = one per decode worker: per core, at most max_batch_size / 16 (so "
        "NMT_THREADS=1 keeps one; 1 on CUDA).",
    )
    worker_processes: bool = Field(
        True, description="Run the decode workers as worker processes (CPU, two decode "
        "workers or more), so they never wait for the event loop at Python's GIL. Costs one "
        "bundle's memory per worker process. Its first name, lane_processes "
        "(NMT_LANE_PROCESSES, --lane-processes), is still read.",
    )
    variant: str | None = Field(None, description="Precision variant (fp32, int8, fp16).")
    warmup: bool = Field(True, description="Translate a short text per bundle before ready.")
    # batching and queueing
    max_batch_tokens: int = Field(
        8192, ge=1, description="Token budget of one engine batch (longest source x batch size)."
    )
    max_batch_size: int = Field(32, ge=1, description="Sentences in one engine batch at most.")
    document_batch_size: int = Field(
        1, ge=1, description="Sentences in one batch of document-job (background) work at most: "
        "small, so a live request never waits behind a long one.",
    )
    max_wait_ms: float = Field(
        0.0, ge=0, description="How long an idle worker waits for company before it starts a "
        "batch. Our engine batches continuously (sentences join a running batch between decoder "
        "steps), so a wait only delays the first request; it pays for engines that decode whole "
        "batches.",
    )
    queue_size: int = Field(1024, ge=1, description="Queued sentences at most; beyond it 503.")
    cache_size: int = Field(
        10_000, ge=0, description="Sentences per model kept translated, per server process: the "
        "same sentence with the same options is answered from memory (and one sent twice in a "
        "request decoded once); 0 turns the cache off.",
    )
    request_timeout: float = Field(30.0, gt=0, description="Seconds per request before a 504.")
    # input limits
    max_chars_per_text: int = Field(5000, ge=1, description="Characters in one text at most.")
    max_texts_per_request: int = Field(64, ge=1, description="Texts in one request at most.")
    max_total_chars: int = Field(20000, ge=1, description="Characters in one request at most.")
    max_body_bytes: int = Field(1_000_000, ge=1, description="Request body size in bytes at most.")
    max_beam_size: int = Field(8, ge=1, description="Largest beam size a client may ask for.")
    max_alternatives: int = Field(4, ge=0, description="Most alternatives a client may ask for.")
    rerank: bool = Field(
        True, description="Rank beam search's best translations again with a bundle's language "
        "model where it has one (app.engine.rerank); off, no request reranks.",
    )
    protect_spans: bool = Field(
        True, description="Keep placeholders, inline tags, URLs, e-mail addresses, paths, file "
        "names, identifiers, command lines and quantities away from the model (plain text, and "
        "each block of text in HTML) and put them back unchanged, and numbers such as 1,000, "
        "amounts such as €19.99, times such as 5 pm and dates such as 12/31/2026 written the "
        "target language's way (app.text.protect).",
    )
    # glossaries (docs/glossaries.md)
    glossary_dir: Path | None = Field(
        None, description="Directory of server glossaries, one `<source>-<target>.tsv` file per "
        "language pair (`source term<TAB>target term` a line), read again when a file changes; "
        "a request's own glossary wins over it.",
    )
    max_glossary_entries: int = Field(
        1000, ge=1, description="Entries in one request's glossary at most.",
    )
    max_glossary_term_chars: int = Field(
        200, ge=1, description="Characters in one glossary term (source or target) at most.",
    )
    # documents (LibreTranslate /translate_file)
    files_translation: bool = Field(
        True, description="Serve document translation: /translate_file and document jobs "
        "(/v1/documents); off, both answer 403.",
    )
    files_dir: Path = Field(
        Path("data/files"), description="Where uploaded and translated files are kept."
    )
    files_expiry: float = Field(
        3600.0, gt=0, description="Seconds a translated file stays downloadable."
    )
    max_file_bytes: int = Field(
        10_000_000, ge=1, description="Size of an uploaded document in bytes at most."
    )
    max_file_segments: int = Field(
        20_000, ge=1, description="Segments (paragraphs, cues, entries) of a document at most."
    )
    max_file_chars: int = Field(
        1_000_000, ge=1, description="Characters to translate in a document at most."
    )
    file_timeout: float = Field(
        300.0, gt=0, description="Seconds a synchronous /translate_file may take (reading, "
        "translating, rebuilding, keeping the file) before a 504; its work stops then. Larger "
        "documents belong in document jobs (/v1/documents), which have none.",
    )
    # document jobs (/v1/documents)
    jobs_dir: Path | None = Field(
        None, description="Where document jobs keep their database and files (default: "
        "<files_dir>/jobs).",
    )
    jobs_expiry: float = Field(
        86_400.0, gt=0, description="Seconds a finished document job (and its result) is kept.",
    )
    max_pending_jobs: int = Field(
        100, ge=1, description="Queued and running document jobs at most; beyond it 503.",
    )
    frontend_timeout: int = Field(
        500, ge=0, description="frontendTimeout of /frontend/settings (milliseconds)."
    )
    # access
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Accepted API keys (comma-separated); empty = open."
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Origins allowed by CORS (comma-separated)."
    )
    rate_limit: float = Field(
        0.0, ge=0, description="Translate requests per minute per API key or client IP; 0 = off."
    )
    rate_limit_burst: int = Field(0, ge=0, description="Bucket size; 0 = one minute's worth.")
    # operations
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        "info", description="Log level."
    )
    json_logs: bool = Field(False, description="One JSON object per log line.")
    grace_period: float = Field(
        20.0, ge=0, description="Seconds to finish in-flight work after SIGTERM."
    )

    def __init__(self, **values: object) -> None:
        # a renamed setting's first name as a keyword (a flag, a caller): the same as its name
        for first, name in RENAMED.items():
            if first in values:
                given = values.pop(first)
                values.setdefault(name, given)
        super().__init__(**values)

    @model_validator(mode="before")
    @classmethod
    def _first_names(cls, data: object) -> object:
        """A renamed setting's first NMT_ variable (RENAMED) counts when neither its name (as a
        keyword or variable) is given: the settings sources read only the new name."""
        if isinstance(data, dict):
            for first, name in RENAMED.items():
                given = os.environ.get(f"NMT_{first.upper()}")
                if given is not None and name not in data:
                    data[name] = given
        return data

    @field_validator("api_keys", "cors_origins", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("models_dir", mode="before")
    @classmethod
    def _local_path(cls, value: object) -> object:
        # models are never fetched at run time: a URL here is a mistake, not a download
        if isinstance(value, str) and _URL.match(value.strip()):
            raise ValueError(
                f"models_dir must be a local directory, not a URL ({value!r}); download or copy "
                "the bundle first and point NMT_MODELS_DIR / --models-dir at it"
            )
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check_limits(self) -> Settings:
        if self.max_chars_per_text > self.max_total_chars:
            raise ValueError("max_chars_per_text must not exceed max_total_chars")
        if self.max_alternatives >= self.max_beam_size:
            raise ValueError("max_alternatives must be smaller than max_beam_size")
        return self

    @property
    def jobs_path(self) -> Path:
        return self.jobs_dir if self.jobs_dir is not None else self.files_dir / "jobs"

    @property
    def max_upload_bytes(self) -> int:
        """A document upload's body at most: the file, a `glossary` field as large as a JSON
        request body may be, and the rest of the form."""
        return self.max_file_bytes + self.max_body_bytes + 64 * 1024

    @property
    def is_loopback(self) -> bool:
        return self.host in LOOPBACK_HOSTS or self.host.startswith("127.")

    @property
    def rate_limit_capacity(self) -> float:
        return float(self.rate_limit_burst or max(1.0, self.rate_limit))
