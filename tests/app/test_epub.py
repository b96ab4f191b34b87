"""app.documents.epub_file: a book's pages, table of contents and title translated, in reading
order, the rest of the book copied entry by entry; a hostile book refused as unreadable.

The fake translator reverses every run of two or more letters (as in test_documents), so a
test can tell translated text from copied text."""

import io
import re
import zipfile

import pytest
from lxml import etree

from app.documents import (
    DocumentTooLarge,
    InvalidDocument,
    Limits,
    extract,
    format_of,
    rebuild,
    translate_document,
)
from tests.app.hostile import replace_part
from tests.app.samples import epub_bytes, epub_parts

XHTML = "{http://www.w3.org/1999/xhtml}"
DC = "{http://purl.org/dc/elements/1.1/}"
NCX = "{http://www.daisy.org/z3986/2005/ncx/}"
STRICT = etree.XMLParser(resolve_entities=False, no_network=True)


def fake(texts: list[str]) -> list[str]:
    return [re.sub(r"[^\W\d_]{2,}", lambda m: m.group()[::-1], t) for t in texts]


def entries(data: bytes) -> dict[str, tuple[int, bytes]]:
    """name -> (compression, content), in the archive's order."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {i.filename: (i.compress_type, archive.read(i)) for i in archive.infolist()}


def xml(data: bytes):
    return etree.fromstring(data, STRICT)  # raises where it is not well-formed


def text(root, tag: str) -> list[str]:
    return [el.text for el in root.iter(tag)]


@pytest.mark.parametrize("version", [2, 3])
def test_pages_toc_and_title_are_translated_and_the_rest_copied(version):
    original = epub_bytes(epub_parts(version))
    assert format_of("Book.EPUB") == "epub"
    out = translate_document(original, "epub", fake, target_lang="de")
    before, after = entries(original), entries(out)
    assert list(after) == list(before)  # the same entries in the same order, mimetype first
    with zipfile.ZipFile(io.BytesIO(out)) as archive:
        mimetype = archive.infolist()[0]
        assert mimetype.extra == b"" and mimetype.compress_type == zipfile.ZIP_STORED
    assert [c for c, _ in after.values()] == [c for c, _ in before.values()]
    changed = {name for name in before if before[name][1] != after[name][1]}
    pages = {"OEBPS/one.xhtml", "OEBPS/two.xhtml"} | ({"OEBPS/nav.xhtml"} if version == 3
                                                       else set())
    assert changed == {"OEBPS/content.opf", "OEBPS/toc.ncx"} | pages  # fonts, images... copied

    page = after["OEBPS/one.xhtml"][1].decode()
    assert page.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html PUBLIC')
    root = xml(page.encode())
    assert root.get("lang") == "de" and root.get("{http://www.w3.org/XML/1998/namespace}lang")
    assert text(root, f"{XHTML}h1") == ["retpahC eno"]
    assert ('tI saw a <em>krad</em> thgin\xa0dna eht <a href="notes.xhtml#n1"\n'
            ' epub:type="noteref">dniw</a>') in page
    assert '<img src="images/house.png" alt="A der esuoh"/>' in page
    assert "<code>make all</code>" in page and "Keep this line." in page
    assert '<span id="p12" title="12"/>' in page

    opf = xml(after["OEBPS/content.opf"][1])
    assert text(opf, f"{DC}title") == ["ehT llamS kooB"]
    assert text(opf, f"{DC}description") == ["A trohs yrots tuoba a esuoh."]
    assert text(opf, f"{DC}creator") == ["Ann Writer"]  # a name, not translated
    assert text(opf, f"{DC}language") == ["de"]
    ncx = xml(after["OEBPS/toc.ncx"][1])
    assert text(ncx, f"{NCX}text") == ["ehT llamS kooB", "ehT tsrif retpahc", "ehT dnoces retpahc"]
    assert ncx.get("{http://www.w3.org/XML/1998/namespace}lang") == "de"
    assert after["OEBPS/toc.ncx"][1].startswith(b"<?xml") and b"<!DOCTYPE ncx" in after[
        "OEBPS/toc.ncx"][1]
    if version == 3:
        nav = xml(after["OEBPS/nav.xhtml"][1])
        assert text(nav, f"{XHTML}a") == ["ehT tsrif retpahc", "ehT dnoces retpahc"]
        assert nav.get("lang") == "de"


def test_segments_are_in_reading_order():
    """The title first, then the table of contents, then the pages in spine order (the
    manifest lists chapter two first)."""
    segments = extract(epub_bytes(epub_parts(3)), "epub").segments
    first = segments.index
    assert segments[:2] == ["The Small Book", "A short story about a house."]
    assert first("The first chapter") < first("Chapter one") < first("Chapter two")
    assert segments.count("Chapter one") == 2  # the page's <title> and its heading


def test_a_translation_whose_tags_would_break_the_page_is_written_as_text():
    """XHTML is XML: a page that is not well-formed is an error page in a reader."""
    doc = extract(epub_bytes(epub_parts(2)), "epub")
    broken = [s.replace("<em>dark</em>", "<em>dark</i>") for s in doc.segments]
    assert broken != doc.segments
    out = entries(rebuild(doc, broken, "de"))
    root = xml(out["OEBPS/one.xhtml"][1])
    assert "It was a dark night" in "".join(root.itertext())
    assert root.find(f".//{XHTML}a") is None  # that sentence's tags are lost...
    assert root.find(f".//{XHTML}img") is not None  # ...the others' kept


def book(name: str, data: bytes | None) -> bytes:
    """The EPUB 3 sample with the entry `name` replaced by `data` (None: left out)."""
    parts = epub_parts(3)
    if data is None:
        del parts[name]
    else:
        parts[name] = data
    return epub_bytes(parts)


OPF = epub_parts(3)["OEBPS/content.opf"].decode()
LAUGHS = ('<!DOCTYPE html [<!ENTITY a "lol">'
          + "".join(f'<!ENTITY a{k} "{("&a" + (str(k - 1) if k > 1 else "") + ";") * 10}">'
                    for k in range(1, 10)) + "]>")


@pytest.mark.parametrize(("data", "message"), [
    (lambda: book("OEBPS/content.opf", OPF.replace('href="one.xhtml"',
                                                 'href="../../etc/passwd"').encode()),
     "outside the book"),
    (lambda: book("OEBPS/content.opf", OPF.replace('href="one.xhtml"',
                                                 'href="https://example.org/x.xhtml"').encode()),
     "outside the book"),
    (lambda: book("OEBPS/content.opf", OPF.replace('href="one.xhtml"',
                                                 'href="/OEBPS/one.xhtml"').encode()),
     "outside the book"),
    (lambda: book("OEBPS/one.xhtml", None), "OEBPS/one.xhtml, which is not in the book"),
    (lambda: book("OEBPS/content.opf", OPF.replace('idref="c1"', 'idref="c9"').encode()),
     "'c9', which the manifest does not list"),
    (lambda: book("META-INF/container.xml", None), "no META-INF/container.xml"),
    (lambda: book("OEBPS/content.opf", None), "OEBPS/content.opf, which is not in the book"),
    (lambda: book("OEBPS/content.opf", b"<package><metadata>"), "OEBPS/content.opf is not"),
    (lambda: book("OEBPS/content.opf", OPF.replace("<package", LAUGHS.replace("html", "package")
                                                 + "<package").encode()),
     "OEBPS/content.opf declares XML entities"),
    (lambda: book("OEBPS/two.xhtml", ("<?xml version='1.0'?>" + LAUGHS
                                    + "<html><body><p>&a9;</p></body></html>").encode()),
     "OEBPS/two.xhtml declares XML entities"),
    (lambda: book("mimetype", b"application/vnd.oasis.opendocument.text"),
     "not application/epub+zip"),
    (lambda: book("META-INF/encryption.xml", epub_parts(3)["META-INF/encryption.xml"].replace(
        b"http://www.idpf.org/2008/embedding", b"http://www.w3.org/2001/04/xmlenc#aes128-cbc")
        .replace(b"fonts/serif.otf", b"one.xhtml")), "OEBPS/one.xhtml is encrypted"),
    (lambda: b"PK\x03\x04 not a zip", "cannot read the file as .epub"),
])
def test_a_hostile_or_broken_book_is_refused_saying_why(data, message):
    with pytest.raises(InvalidDocument, match=re.escape(message)):
        translate_document(data(), "epub", fake)


def test_the_limits_apply_to_books():
    data = epub_bytes(epub_parts(3))
    with pytest.raises(DocumentTooLarge, match="unpacks to"):
        extract(data, "epub", Limits(max_unpacked_bytes=2_000))
    with pytest.raises(DocumentTooLarge, match="segments"):
        extract(data, "epub", Limits(max_segments=5))


@pytest.mark.parametrize(("limits", "named"), [
    (Limits(max_segments=12), "segments; the limit is 12"),
    (Limits(max_chars=300), "characters to translate; the limit is 300"),
])
def test_a_book_over_a_limit_is_refused_at_the_first_page_past_it(limits, named):
    """The first chapter passes the limit: the book is refused there, naming the limit, and
    the pages after it are never read (the second one, which declares entities, would be
    refused as unreadable if it were)."""
    data = book("OEBPS/two.xhtml", ("<?xml version='1.0'?>" + LAUGHS
                                    + "<html><body><p>&a9;</p></body></html>").encode())
    with pytest.raises(DocumentTooLarge, match=named) as err:
        extract(data, "epub", limits)
    assert err.value.limit in (12, 300)


def test_a_page_that_is_not_well_formed_is_still_translated():
    """Readers that forgive such a page show it; the translation changes only its text."""
    sloppy = b"<html><body><p>Open the <b>door</p> now.</body></html>"
    out = entries(translate_document(book("OEBPS/two.xhtml", sloppy), "epub", fake))
    assert out["OEBPS/two.xhtml"][1] == b"<html><body><p>nepO eht <b>rood</p> won.</body></html>"


def test_entries_the_spine_reaches_through_escaped_names_are_found():
    parts = epub_parts(3)
    parts["OEBPS/chapter one.xhtml"] = parts.pop("OEBPS/one.xhtml")
    parts["OEBPS/content.opf"] = OPF.replace('href="one.xhtml"',
                                             'href="chapter%20one.xhtml"').encode()
    out = entries(translate_document(epub_bytes(parts), "epub", fake))
    assert b"retpahC eno" in out["OEBPS/chapter one.xhtml"][1]


def test_an_entry_replaced_in_the_archive_keeps_its_place():
    """replace_part deflates every entry, mimetype too: the result stores it again, first."""
    data = replace_part(epub_bytes(epub_parts(3)), "OEBPS/style.css", b"p {}\n")
    with zipfile.ZipFile(io.BytesIO(translate_document(data, "epub", fake))) as archive:
        first = archive.infolist()[0]
        assert (first.filename, first.compress_type) == ("mimetype", zipfile.ZIP_STORED)
        assert archive.read("OEBPS/style.css") == b"p {}\n"


def test_a_mimetype_with_a_line_end_is_written_as_readers_expect_it():
    # live-manual's book says "application/epub+zip\n", last; the translation copied the line
    # end, which EPUB checkers refuse (the entry must hold the media type only)
    parts = epub_parts(3)
    parts = {**{k: v for k, v in parts.items() if k != "mimetype"},
             "mimetype": b"application/epub+zip\n"}
    with zipfile.ZipFile(io.BytesIO(translate_document(epub_bytes(parts), "epub",
                                                       fake))) as archive:
        first = archive.infolist()[0]
        assert (first.filename, archive.read(first)) == ("mimetype", b"application/epub+zip")
