"""A translated document leaves nothing behind for the garbage collector: python-docx's parsed
package is a web of reference cycles around native lxml trees, which the collector's counts do
not see, so a long-lived server process used to hold every parsed .docx until its next full
collection and grow by each one (the one-hour soak's memory growth). With automatic collection
off, what the document path leaves in cycles stays visible: none may be left. Real uvicorn on
loopback, fake engine."""

from __future__ import annotations

import gc

import docx.package
import httpx

from app.config import Settings
from app.http.app import create_app
from tests.app.fakes import fake_model, running, wait_until
from tests.app.samples import docx_bytes, docx_document
from tests.app.test_document_stops import document_threads

PAIR = {"source": "en", "target": "de"}


def parsed_documents() -> int:
    return sum(isinstance(o, docx.package.Package) for o in gc.get_objects())


def test_no_parsed_docx_outlives_its_request_or_job(tmp_path, collector_off):
    data = docx_bytes(docx_document())
    long = docx_document()
    for i in range(20):
        long.add_paragraph(f"Paragraph {i}.")
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, jobs_dir=tmp_path / "jobs",
                        max_file_segments=10)
    with running(create_app(settings, loader=lambda s: [fake_model()])) as srv:
        before = parsed_documents()

        def left() -> int:
            wait_until(lambda: not document_threads(), 10)
            return parsed_documents() - before

        for _ in range(2):
            r = httpx.post(f"{srv.url}/translate_file", data=PAIR,
                           files={"file": ("a.docx", data)}, timeout=30)
            assert r.status_code == 200, r.text
            assert left() == 0, "a parsed .docx outlived /translate_file"
            r = httpx.post(f"{srv.url}/v1/documents", data=PAIR,
                           files={"file": ("a.docx", data)}, timeout=30)
            assert r.status_code == 202, r.text
            where = f"{srv.url}{r.headers['location']}"
            wait_until(lambda where=where: httpx.get(where, timeout=10).json()["state"] == "done",
                       30)
            assert left() == 0, "a parsed .docx outlived its job"
        # parsed, then refused: over the segment limit
        r = httpx.post(f"{srv.url}/translate_file", data=PAIR,
                       files={"file": ("long.docx", docx_bytes(long))}, timeout=30)
        assert r.status_code == 400 and "10" in r.json()["error"], r.text
        assert left() == 0, "a refused .docx outlived its request"
