"""LibreTranslate's /translate_file and /download_file on real uvicorn servers: documents
round-trip through the tiny real model with their structure intact (structure compared, not
wording), and every refusal has LibreTranslate's error shape."""

from __future__ import annotations

import io
import re
import socket
import threading
import time
import zipfile

import docx
import httpx
import polib
import pytest
import srt
from lxml import etree
from odf import draw, opendocument, teletype
from odf import text as odftext

from app.config import Settings
from app.engine import Translator
from app.http.app import create_app
from app.text.segment import segment
from tests.app import hostile
from tests.app.fakes import FakeTranslator, fake_model, running, wait_until
from tests.app.samples import (
    docx_bytes,
    docx_document,
    epub_bytes,
    epub_parts,
    odp_file,
    odt_file,
    pptx_file,
)

# the fixtures' upload body at most: the file's cap (50,000), a glossary as large as a JSON
# body may be (NMT_MAX_BODY_BYTES, default), 64 KiB of form
UPLOAD_LIMIT = 50_000 + 1_000_000 + 64 * 1024
SRT = ("1\n00:00:01,000 --> 00:00:02,500\nOpen the file\nand save it.\n\n"
       "7\n00:01:00,000 --> 00:01:03,000\nClose the window.\n\n")


def po_file() -> bytes:
    catalog = polib.POFile()
    catalog.metadata = {"Project-Id-Version": "demo 1.0",
                        "Content-Type": "text/plain; charset=UTF-8"}
    catalog.append(polib.POEntry(msgid="Open file", msgctxt="menu", occurrences=[("a.c", "3")]))
    catalog.append(polib.POEntry(msgid="Copy %s to %d places", flags=["c-format"]))
    return str(catalog).encode()


HTML = ('<html lang="en"><body><h1>Settings</h1><p>Open the <b>file</b> menu.</p>'
        '<ul><li>Save</li><li>Close the window</li></ul><code>x = 1</code></body></html>')


def docx_shape(data: bytes):
    """Per paragraph its style, its bold runs and whether it has plain text too (where in the
    sentence the bold words land is the translation's business)."""
    d = docx.Document(io.BytesIO(data))
    return ([(p.style.name, sum(bool(r.bold) for r in p.runs),
              any(not r.bold and r.text.strip() for r in p.runs)) for p in d.paragraphs],
            [len(r.cells) for r in d.tables[0].rows])


def odt_shape(data: bytes):
    d = opendocument.load(io.BytesIO(data))
    heads = [h.getAttribute("outlinelevel") for h in d.getElementsByType(odftext.H)]
    spans = [s.getAttribute("stylename") for s in d.getElementsByType(odftext.Span)]
    return heads, spans, len(d.getElementsByType(odftext.P))


def odp_shape(data: bytes):
    d = opendocument.load(io.BytesIO(data))
    return ([[s.getAttribute("stylename") for s in page.getElementsByType(odftext.Span)]
             for page in d.presentation.getElementsByType(draw.Page)],
            [teletype.extractText(p) for p in d.masterstyles.getElementsByType(odftext.P)])


def pptx_shape(data: bytes):
    """The parts in order with their compression; per paragraph of the first slide what is
    not a run (properties, breaks, fields) and whether it has a bold run."""
    a = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        slide = etree.fromstring(archive.read("ppt/slides/slide2.xml"))
        parts = [(i.filename, i.compress_type) for i in archive.infolist()]
    return parts, [(sorted(etree.QName(c).localname for c in p if c.tag != f"{a}r"),
                    any(r.get("b") == "1" for r in p.iter(f"{a}rPr"))) for p in slide.iter(f"{a}p")]


def srt_shape(data: bytes):
    return [(s.index, s.start, s.end) for s in srt.parse(data.decode())]


def po_shape(data: bytes):
    catalog = polib.pofile(data.decode())
    return catalog.metadata, [(e.msgctxt, e.occurrences, e.flags, e.msgid) for e in catalog]


def html_shape(data: bytes):
    text = data.decode()
    return re.findall(r"</?\w+", text), re.search(r"<code>.*?</code>", text).group()


def epub_shape(data: bytes):
    """The entries in order, mimetype's compression, and per page (well-formed XML) its
    elements."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    with zipfile.ZipFile(io.BytesIO(data)) as book:
        pages = [etree.fromstring(book.read(f"OEBPS/{n}.xhtml"), parser)
                 for n in ("one", "two", "nav")]
        return (book.namelist(), book.infolist()[0].compress_type,
                [sorted(el.tag for el in page.iter()) for page in pages])


CASES = [
    ("report.docx", lambda: docx_bytes(docx_document()), docx_shape),
    ("plan.odt", odt_file, odt_shape),
    ("deck.pptx", pptx_file, pptx_shape),
    ("deck.odp", odp_file, odp_shape),
    ("film.srt", lambda: SRT.encode(), srt_shape),
    ("app.po", po_file, po_shape),
    ("page.html", lambda: HTML.encode(), html_shape),
    ("book.epub", lambda: epub_bytes(epub_parts(3)), epub_shape),
]


def upload(url: str, name: str, data: bytes, **fields):
    fields = {"source": "en", "target": "de", **fields}
    return httpx.post(f"{url}/translate_file", data=fields, files={"file": (name, data)},
                      timeout=120)


@pytest.mark.parametrize(("name", "build", "shape"), CASES, ids=[c[0] for c in CASES])
def test_documents_round_trip_through_the_real_model(real_server, name, build, shape):
    original = build()
    r = upload(real_server.url, name, original)
    assert r.status_code == 200, r.text
    url = r.json()["translatedFileUrl"]
    assert url.startswith(f"{real_server.url}/download_file/") and url.endswith(name)
    got = httpx.get(url, timeout=10)
    assert got.status_code == 200
    assert f'filename="{name}"' in got.headers["content-disposition"]
    assert shape(got.content) == shape(original)
    assert got.content != original  # translated, not copied
    if name.endswith(".html"):
        assert got.content.startswith(b'<html lang="de">')  # the page says its new language
    if name.endswith(".epub"):
        with zipfile.ZipFile(io.BytesIO(got.content)) as book:
            assert b'<dc:language>de</dc:language>' in book.read("OEBPS/content.opf")
            assert b'"http://www.idpf.org/2007/ops" lang="de">' in book.read("OEBPS/nav.xhtml")


def test_a_sentence_longer_than_the_encoder_is_cut_not_truncated(real_server, tiny_bundle):
    translator = Translator.from_dir(tiny_bundle, intra_threads=1)
    words = " ".join(["the red car sees a dog and"] * 12)  # no sentence end, > 63 tokens
    assert translator.count_tokens(words) > translator.max_source_tokens
    r = upload(real_server.url, "long.txt", f"{words}\n".encode())
    assert r.status_code == 200, r.text
    got = httpx.get(r.json()["translatedFileUrl"], timeout=10).content.decode()
    seg = segment(words)
    seg.refine(lambda s: translator.count_tokens(s) <= translator.max_source_tokens)
    assert len(seg.sentences) >= 2 and " ".join(seg.sentences) == words
    pieces = [r.text for r in translator.translate_batch(seg.sentences)]
    assert got == seg.rejoin(pieces) + "\n"  # every piece translated, none cut short


def test_po_entries_are_filled(real_server):
    r = upload(real_server.url, "app.po", po_file())
    catalog = polib.pofile(httpx.get(r.json()["translatedFileUrl"]).content.decode())
    assert all(e.msgstr for e in catalog)
    assert "%s" in catalog[1].msgstr and "%d" in catalog[1].msgstr  # protected


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory):
    settings = Settings(max_wait_ms=1, files_dir=tmp_path_factory.mktemp("files"),
                        max_file_segments=3, max_file_bytes=50_000, files_expiry=1.5)
    app = create_app(settings, loader=lambda s: [fake_model(FakeTranslator())])
    with running(app) as srv:
        yield srv


def test_a_document_to_its_own_language_comes_back_as_it_is(fake_server):
    r = upload(fake_server.url, "film.srt", SRT.encode(), target="en")
    assert r.status_code == 200, r.text
    assert httpx.get(r.json()["translatedFileUrl"], timeout=10).content.decode() == SRT


def test_the_fake_engine_translates_each_cue(fake_server):
    r = upload(fake_server.url, "film.srt", SRT.encode())
    out = list(srt.parse(httpx.get(r.json()["translatedFileUrl"]).content.decode()))
    # the first subtitle's two lines are one sentence: translated whole, the break put back
    assert [s.content for s in out] == ["it. save and\nfile the Open", "window. the Close"]


def test_subtitles_saved_in_a_windows_code_page_are_translated(fake_server):
    # not UTF-8: refused with a 400 before; read in the source language's code page
    cue = "1\r\n00:00:01,000 --> 00:00:02,000\r\nDon’t open the café.\r\n\r\n"
    r = upload(fake_server.url, "film.srt", cue.encode("cp1252"))
    assert r.status_code == 200, r.text
    out = httpx.get(r.json()["translatedFileUrl"], timeout=10).content
    assert [s.content for s in srt.parse(out.decode("cp1252"))] == ["café. the open Don’t"]


@pytest.mark.parametrize(
    ("name", "data", "fields", "message"),
    [
        ("notes.exe", b"MZ", {}, "unsupported file format .exe"),
        ("empty.txt", b"", {}, "Invalid request: empty file"),
        ("long.txt", b"a\n\nb\n\nc\n\nd\n\ne\n", {}, "the limit is 3"),  # five paragraphs
        ("a.txt", b"Hello", {"target": ""}, "Invalid request: missing target parameter"),
        ("a.txt", b"Hello", {"target": "fr"}, "'fr' is not supported"),
        ("broken.docx", b"PK\x03\x04 not a zip", {}, "cannot read the file as .docx"),
        ("broken.pptx", b"PK\x03\x04 not a zip", {}, "cannot read the file as .pptx"),
        ("escape.epub", epub_bytes({**epub_parts(3), "OEBPS/content.opf": epub_parts(3)[
            "OEBPS/content.opf"].replace(b'href="one.xhtml"', b'href="../../etc/passwd"')}), {},
         "the spine's item 'c1' is '../../etc/passwd', outside the book"),
    ],
)
def test_refusals_have_libretranslate_shape(fake_server, name, data, fields, message):
    r = upload(fake_server.url, name, data, **fields)
    assert r.status_code == 400
    assert message in r.json()["error"]


@pytest.mark.parametrize("fmt", ["epub", "pdf", "docx", "pptx", "odt", "html", "md", "srt",
                                 "xliff"])
def test_a_document_over_the_segment_limit_gets_a_400_naming_it(fake_server, fmt):
    if fmt == "pdf":
        pytest.importorskip("pypdf")  # the pdf extra
        from tests.app.test_pdf import pages_of_one_line

        data = pages_of_one_line(10)
    else:
        data = (epub_bytes(epub_parts(3)) if fmt == "epub"  # 21 segments
                else hostile.paragraphs(fmt, 10))
    r = upload(fake_server.url, f"long.{fmt}", data)
    assert r.status_code == 400, r.text
    assert r.json()["limit"] == 3 and "segments; the limit is 3" in r.json()["error"]


def test_missing_file_oversized_upload_and_not_multipart(fake_server):
    r = httpx.post(f"{fake_server.url}/translate_file", data={"source": "en", "target": "de"},
                   files={"other": ("a.txt", b"x")})
    assert r.status_code == 400 and r.json()["field"] == "file"
    r = upload(fake_server.url, "big.txt", b"word " * 10_100)  # the file over its cap
    assert r.status_code == 400 and r.json()["limit"] == 50_000
    r = upload(fake_server.url, "big.txt", b"word " * 240_000)  # the body over its cap
    assert r.status_code == 413 and r.json()["limit"] == UPLOAD_LIMIT
    r = httpx.post(f"{fake_server.url}/translate_file", json={"source": "en", "target": "de"})
    assert r.status_code == 400 and r.json()["field"] == "Content-Type"


def test_downloads_expire_and_names_are_checked(fake_server):
    r = upload(fake_server.url, "a.txt", b"Hello world")
    url = r.json()["translatedFileUrl"]
    assert httpx.get(url).text == "world Hello"
    for bad in ["../../etc/passwd", "..%2F..%2Fconfig.py", "deadbeef.txt"]:
        assert httpx.get(f"{fake_server.url}/download_file/{bad}").status_code == 404
    time.sleep(2)
    r = httpx.get(url)
    assert r.status_code == 404 and r.json()["error"]


def test_files_off_and_keys(tmp_path):
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, files_translation=False)
    with running(create_app(settings, loader=lambda s: [fake_model()])) as srv:
        r = upload(srv.url, "a.txt", b"Hello")
        assert r.status_code == 403
        assert r.json()["error"] == "Files translation are disabled on this server."
    settings = Settings(max_wait_ms=1, files_dir=tmp_path, api_keys=["k1"])
    with running(create_app(settings, loader=lambda s: [fake_model()])) as srv:
        assert upload(srv.url, "a.txt", b"Hello", api_key="nope").status_code == 403
        r = upload(srv.url, "a.txt", b"Hello", api_key="k1")
        assert r.status_code == 200 and "translatedFileUrl" in r.json()


def test_files_are_off_where_they_cannot_be_kept(tmp_path, caplog):
    (tmp_path / "taken").write_text("a file where the directory should be")
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path / "taken" / "files")
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        r = upload(srv.url, "a.txt", b"Hello")
        assert r.status_code == 403, r.text  # refused before any translation, not a 500 after
        assert engine.batches == []
        assert httpx.get(f"{srv.url}/frontend/settings").json()["filesTranslation"] is False
        r = httpx.post(f"{srv.url}/translate", json={"q": "still here", "source": "en",
                                                     "target": "de"})
        assert r.json()["translatedText"] == "here still"
    assert "/translate_file is off: cannot write to" in caplog.text


def test_a_file_that_cannot_be_kept_is_a_503_and_the_service_goes_on(tmp_path):
    files = tmp_path / "files"
    settings = Settings(max_wait_ms=1, files_dir=files, jobs_dir=tmp_path / "jobs")
    with running(create_app(settings, loader=lambda s: [fake_model()])) as srv:
        files.rmdir()  # written at start; now a file stands where the directory was
        files.write_text("in the way")
        r = upload(srv.url, "a.txt", b"Hello there")
        assert r.status_code == 503 and r.headers["retry-after"] == "60"
        assert "cannot keep the translated file" in r.json()["error"]
        files.unlink()
        r = upload(srv.url, "a.txt", b"Hello there")
        assert r.status_code == 200, r.text


def test_document_sentences_share_batches_with_live_requests(tmp_path):
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, files_dir=tmp_path)
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        engine.release.clear()  # the engine holds its batches until released
        results = {}

        def call(name, fn):
            results[name] = fn()

        live = {"source": "en", "target": "de"}
        threads = [threading.Thread(target=call, args=("first", lambda: httpx.post(
            f"{srv.url}/translate", json={"q": "hold on", **live}, timeout=30)))]
        threads[0].start()
        wait_until(lambda: engine.entered == 1)
        threads += [
            threading.Thread(target=call, args=("doc", lambda: upload(srv.url, "film.srt",
                                                                     SRT.encode()))),
            threading.Thread(target=call, args=("live", lambda: httpx.post(
                f"{srv.url}/translate", json={"q": "live words", **live}, timeout=30))),
        ]
        for t in threads[1:]:
            t.start()
        wait_until(lambda: queue_depth(srv.url) >= 3)  # 2 cue sentences + 1 live
        engine.release.set()
        for t in threads:
            t.join(30)
        assert results["live"].json()["translatedText"] == "words live"
        assert results["doc"].status_code == 200
        mixed = [batch for batch, _ in engine.batches if "live words" in batch]
        assert mixed and any("Close the window." in batch for batch in mixed), engine.batches


def test_a_document_stops_when_its_client_leaves(tmp_path):
    engine = FakeTranslator()
    settings = Settings(max_wait_ms=1, max_batch_size=1, files_dir=tmp_path)
    lines = [f"Sentence number {n} here." for n in range(6)]
    with running(create_app(settings, loader=lambda s: [fake_model(engine)])) as srv:
        engine.release.clear()  # the engine holds its batches until released
        request = httpx.Request("POST", f"{srv.url}/translate_file",
                                data={"source": "en", "target": "de"},
                                files={"file": ("six.txt", "\n".join(lines).encode())})
        head = f"POST /translate_file HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in request.headers.items() if k.lower() != "host")
        with socket.create_connection(("127.0.0.1", srv.port)) as client:
            client.sendall(head.encode() + b"\r\n" + request.read())
            wait_until(lambda: engine.entered == 1)  # the first chunk is in the engine
        # the client has gone: the request ends (499) while the engine still holds the chunk
        wait_until(lambda: 'route="/translate_file",status="499"' in httpx.get(
            f"{srv.url}/metrics").text)
        engine.release.set()
        live = httpx.post(f"{srv.url}/translate", json={"q": "live words", "source": "en",
                                                         "target": "de"}, timeout=30)
        assert live.json()["translatedText"] == "words live"
        sent = [text for batch, _ in engine.batches for text in batch]
        assert sent == [lines[0], "live words"], sent  # no chunk after the one in flight


def queue_depth(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return float(re.search(r"^nmt_queue_depth (\S+)$", text, re.M).group(1))


def test_a_document_goes_through_a_pivot(tmp_path):
    """en -> fr through de: each fake hop reverses the words, so two hops restore the order."""
    models = [FakeTranslator("en-de", "en", "de"), FakeTranslator("de-fr", "de", "fr")]
    settings = Settings(max_wait_ms=1, files_dir=tmp_path)
    with running(create_app(settings, loader=lambda s: [fake_model(m) for m in models])) as srv:
        r = upload(srv.url, "notes.txt", b"Open the %s file now", target="fr")
        assert httpx.get(r.json()["translatedFileUrl"]).text == "Open the %s file now"
        assert [len(m.batches) for m in models] == [1, 1]
        # the second model takes 3 words at most (count_tokens: words + 1): the first hop's
        # output is cut for it into runs that fit, and put back together
        models[1].max_source_tokens = 4
        r = upload(srv.url, "notes.txt", b"one two three four five six seven", target="fr")
        assert httpx.get(r.json()["translatedFileUrl"]).text == "five six seven two three four one"
        assert sorted(models[1].batches[-1][0]) == ["four three two", "one", "seven six five"]


def test_a_pdf_comes_back_with_its_text_translated_in_place(fake_server):
    pytest.importorskip("pypdf")  # the pdf extra
    from pdfminer.high_level import extract_text
    from pypdf import PdfReader

    from tests.app.test_pdf import two_columns

    r = upload(fake_server.url, "guide.pdf", two_columns())
    assert r.status_code == 200, r.text
    got = httpx.get(r.json()["translatedFileUrl"], timeout=10).content
    assert len(PdfReader(io.BytesIO(got)).pages) == 1
    text = " ".join(extract_text(io.BytesIO(got)).split())
    assert text.startswith("started Getting") and "service The" in text
    r = upload(fake_server.url, "broken.pdf", b"%PDF-1.4\n%%EOF\n")
    assert r.status_code == 400 and "cannot read the file as .pdf" in r.json()["error"]
