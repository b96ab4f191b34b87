"""A request's own glossary on the document routes: LibreTranslate's /translate_file (a form
field) and /v1/documents jobs (the same field, kept with the job in the jobs' store). Real
documents through the shipped en-de model: the target term lands in the document, its structure
kept; a job's document comes out as the synchronous route's; the server's glossary is merged
exactly as on the text path; bad glossaries are refused naming the field and the limit. A job
stopped half done and finished by a fresh server (the fake engine: exact output) shows that the
glossary travels with the job's record."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import docx
import httpx
import polib
import pytest
import srt
from odf import opendocument, teletype
from odf import text as odftext

from app.config import Settings
from app.http.app import create_app
from tests.app.conftest import REAL
from tests.app.fakes import FakeTranslator, fake_model, running, wait_until
from tests.app.samples import docx_bytes, docx_document, odt_file
from tests.app.test_jobs import job, submit, wait_for
from tests.app.test_translate_file import SRT, docx_shape, odt_shape, po_file, po_shape, srt_shape

SHIPPED = Path(__file__).resolve().parents[2] / "bundles" / "en-de"
pytestmark = pytest.mark.skipif(not SHIPPED.exists(), reason="the shipped bundle is not here")

# (file, its bytes, its shape, a glossary whose target term the model does not write itself)
DOCS = [
    ("report.docx", lambda: docx_bytes(docx_document()), docx_shape, {"cell": "Tabellenfeld"}),
    ("plan.odt", odt_file, odt_shape, {"next week": "kommende Woche"}),
    ("film.srt", lambda: SRT.encode(), srt_shape, {"window": "Dialogfenster"}),
    ("app.po", po_file, po_shape, {"file": "Dokument"}),
]
MAX_BODY_BYTES = 20_000


def text_of(name: str, data: bytes) -> str:
    """The translated words of a document as its own library reads them (runs, cells, cues
    and entries joined)."""
    kind = name.rsplit(".", 1)[1]
    if kind == "docx":
        d = docx.Document(io.BytesIO(data))
        cells = [c.text for t in d.tables for row in t.rows for c in row.cells]
        return "\n".join([p.text for p in d.paragraphs] + cells)
    if kind == "odt":
        d = opendocument.load(io.BytesIO(data))
        return "\n".join(teletype.extractText(e) for tag in (odftext.H, odftext.P)
                         for e in d.getElementsByType(tag))
    if kind == "srt":
        return "\n".join(cue.content for cue in srt.parse(data.decode()))
    if kind == "po":
        return "\n".join(entry.msgstr for entry in polib.pofile(data.decode()))
    return data.decode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    glossaries = tmp_path_factory.mktemp("glossaries")
    (glossaries / "en-de.tsv").write_text("save\tsichern\nwindow\tFensterscheibe\n",
                                          encoding="utf-8")
    settings = Settings(models_dir=SHIPPED, files_dir=tmp_path_factory.mktemp("files"),
                        glossary_dir=glossaries, max_glossary_entries=3,
                        max_glossary_term_chars=30, max_body_bytes=MAX_BODY_BYTES, **REAL)
    with running(create_app(settings)) as srv:
        yield srv


def translate_file(url: str, name: str, data: bytes, **fields) -> httpx.Response:
    return httpx.post(f"{url}/translate_file", files={"file": (name, data)},
                      data={"source": "en", "target": "de", **fields}, timeout=60)


def job_result(url: str, name: str, data: bytes, **fields) -> bytes:
    """A /v1/documents job run to completion; its translated document."""
    r = submit(url, name, data, **fields)
    assert r.status_code == 202, r.text
    done = wait_for(url, r.json()["id"], timeout=60)
    assert done["state"] == "done", done
    return httpx.get(url + done["result"], timeout=10).content


@pytest.mark.parametrize(("name", "build", "shape", "glossary"), DOCS,
                         ids=[d[0] for d in DOCS])
def test_documents_take_a_glossary_on_both_apis(server, name, build, shape, glossary):
    original, [(_, term)] = build(), glossary.items()
    plain = translate_file(server.url, name, original)
    assert plain.status_code == 200, plain.text
    assert term not in text_of(name, httpx.get(plain.json()["translatedFileUrl"]).content)
    r = translate_file(server.url, name, original, glossary=json.dumps(glossary))
    assert r.status_code == 200, r.text
    synchronous = httpx.get(r.json()["translatedFileUrl"]).content
    assert term in text_of(name, synchronous)
    assert shape(synchronous) == shape(original)
    from_job = job_result(server.url, name, original, glossary=json.dumps(glossary))
    assert text_of(name, from_job) == text_of(name, synchronous)  # the glossary applied
    assert shape(from_job) == shape(original)


def test_a_job_merges_the_server_glossary_as_the_text_path_does(server):
    paragraphs = ["Open the file and save it.", "Close the window."]
    request = {"window": "Dialogfenster"}  # over the server's "window" -> "Fensterscheibe"
    got = job_result(server.url, "notes.txt", "\n\n".join(paragraphs).encode() + b"\n",
                     glossary=json.dumps(request)).decode()
    text = httpx.post(f"{server.url}/v1/translate", timeout=30, json={
        "text": paragraphs, "source": "en", "target": "de", "glossary": request}).json()
    expected = [t["text"] for t in text["translations"]]
    assert got == "\n\n".join(expected) + "\n"
    assert "sichern" in got and "Dialogfenster" in got and "Fensterscheibe" not in got


def test_translate_file_without_a_glossary_answers_as_before(server):
    paragraphs = ["Open the file manager.", "Close the program."]  # no server term
    r = translate_file(server.url, "notes.txt", "\n\n".join(paragraphs).encode() + b"\n")
    assert r.status_code == 200 and list(r.json()) == ["translatedFileUrl"]
    got = httpx.get(r.json()["translatedFileUrl"]).text
    lt = httpx.post(f"{server.url}/translate", timeout=30,
                    json={"q": paragraphs, "source": "en", "target": "de"}).json()
    assert got == "\n\n".join(lt["translatedText"]) + "\n"


@pytest.mark.parametrize(("glossary", "field", "limit", "v1_status"), [
    (json.dumps({"a": "1", "b": "2", "c": "3", "d": "4"}), "glossary", 3, 400),
    (json.dumps({"x" * 31: "y"}), "glossary['" + "x" * 31 + "']", 30, 400),
    (json.dumps({"file": ""}), "glossary['file']", None, 400),
    (json.dumps({"file": 3}), "glossary['file']", None, 400),
    (json.dumps({"a" * 9_000: "b", "c": "d" * 9_000, "e": "f" * 3_000}), "glossary",
     MAX_BODY_BYTES, 400),
    ("[1, 2]", "glossary", None, 422),  # not an object: v1's validation error, as for text
    ("{oops", "glossary", None, 422),
])
def test_bad_glossaries_are_refused_naming_the_field(server, glossary, field, limit, v1_status):
    data = b"Open the file.\n"
    for r, status in [(translate_file(server.url, "a.txt", data, glossary=glossary), 400),
                      (submit(server.url, "a.txt", data, glossary=glossary), v1_status)]:
        assert r.status_code == status, r.text
        assert (r.json()["field"], r.json().get("limit")) == (field, limit), r.text


def test_a_job_glossary_travels_with_the_job_record(tmp_path):
    """A job stopped half done stays queued with its glossary in the store; a fresh server on
    the same directory (nothing of the first in memory) finishes it with the glossary."""
    lines = [f"line number {i} here" for i in range(40)]
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, max_batch_size=4,
                        document_batch_size=2, grace_period=5)
    db = settings.jobs_path / "jobs.db"

    def server(engine):
        return running(create_app(settings, loader=lambda s: [fake_model(engine)]))

    with server(FakeTranslator(delay=0.02)) as srv:
        r = submit(srv.url, "lines.txt", "\n".join(lines).encode(),
                   glossary=json.dumps({"number": "Nummer"}))
        job_id = r.json()["id"]
        wait_until(lambda: job(srv.url, job_id)["progress"]["done"] >= 8)
    with sqlite3.connect(db) as conn:
        state = conn.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        kept = conn.execute("SELECT entries FROM glossaries WHERE job = ?", (job_id,)).fetchall()
    assert state == ("queued",) and [json.loads(e) for e, in kept] == [{"number": "Nummer"}]
    with server(FakeTranslator()) as srv:
        assert wait_for(srv.url, job_id)["state"] == "done"
        result = httpx.get(f"{srv.url}/v1/documents/{job_id}/result").text
    # the fake engine reverses the words; "number" came back as the glossary's term
    assert result.splitlines() == [" ".join(reversed(s.replace("number", "Nummer").split()))
                                   for s in lines]
    with sqlite3.connect(db) as conn:  # a finished job keeps no glossary
        assert conn.execute("SELECT count(*) FROM glossaries").fetchone() == (0,)
