"""Sample documents the document tests share, built with the libraries that read them (a
.pptx by hand: none here writes one)."""

from __future__ import annotations

import io
import zipfile

import docx
from odf import draw, opendocument, presentation, teletype
from odf import text as odftext
from odf.style import MasterPage, PageLayout, Style, TextProperties


def odt_file(tail: str = "") -> bytes:
    """A heading and a paragraph "We ship <bold span>next week</span>" + tail (added as ODF
    text: a run of spaces in it becomes text:s)."""
    document = opendocument.OpenDocumentText()
    strong = Style(name="Strong", family="text")
    strong.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(strong)
    document.text.addElement(odftext.H(outlinelevel=1, text="Quarterly plan"))
    p = odftext.P(text="We ship ")
    p.addElement(odftext.Span(stylename=strong, text="next week"))
    if tail:
        teletype.addTextToElement(p, tail)
    document.text.addElement(p)
    buf = io.BytesIO()
    document.write(buf)
    return buf.getvalue()


def docx_document() -> docx.document.Document:
    """A heading, a bullet with a bold run in it, and a one-row table of two cells."""
    document = docx.Document()
    document.add_heading("Annual results", level=1)
    p = document.add_paragraph("Sales grew ", style="List Bullet")
    p.add_run("very strongly").bold = True
    p.add_run(" this year.")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "Left cell"
    table.cell(0, 1).text = "Right cell"
    return document


def docx_bytes(document: docx.document.Document) -> bytes:
    buf = io.BytesIO()
    document.save(buf)
    return buf.getvalue()


_PML = ('xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
        'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
        'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"')
_RELS = "http://schemas.openxmlformats.org/package/2006/relationships"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"
_XML = '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'


def _rels(*targets: tuple[str, str]) -> str:
    """A relationships part: (type, target) each, ids rId1, rId2 ..."""
    return (f'{_XML}<Relationships xmlns="{_RELS}">' + "".join(
        f'<Relationship Id="rId{i}" Type="{_REL}{kind}" Target="{target}"/>'
        for i, (kind, target) in enumerate(targets, 1)) + "</Relationships>")


def _shapes(root: str, shapes: str) -> str:
    return (f"{_XML}<p:{root} {_PML}><p:cSld><p:spTree><p:nvGrpSpPr><p:cNvPr id=\"1\" "
            f'name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/>{shapes}'
            f"</p:spTree></p:cSld></p:{root}>")


def _box(*paragraphs: str) -> str:
    return ('<p:sp><p:nvSpPr><p:cNvPr id="2" name="Text"/><p:cNvSpPr/><p:nvPr/></p:nvSpPr>'
            f'<p:spPr/><p:txBody><a:bodyPr/><a:lstStyle/>{"".join(paragraphs)}</p:txBody></p:sp>')


def _p(*runs: str, end: bool = True) -> str:
    """A paragraph of runs: a string is a plain run, ("b", text) a bold one, ("b!", text) a
    bold one marked as misspelt (PowerPoint splits runs there), "<..." an element as it is."""
    def run(r) -> str:
        if isinstance(r, str):
            return r if r.startswith("<") else f'<a:r><a:rPr lang="en-US"/><a:t>{r}</a:t></a:r>'
        err = ' err="1" dirty="0"' if r[0] == "b!" else ""
        return f'<a:r><a:rPr lang="en-US" b="1"{err}/><a:t>{r[1]}</a:t></a:r>'
    return ('<a:p><a:pPr algn="ctr"/>' + "".join(map(run, runs))
            + ('<a:endParaRPr lang="en-US"/>' if end else "") + "</a:p>")


SLIDE_NUMBER = '<a:fld id="{B6F15528}" type="slidenum"><a:rPr lang="en-US"/><a:t>1</a:t></a:fld>'


def pptx_file() -> bytes:
    """A presentation of two slides, listed in the other order than their part names: the
    first (slide2.xml) has a title, a text box (bold runs, a line break, a slide number), a
    group of one shape and a table, and speaker notes; the second a line of text. The layout
    holds a placeholder prompt, which is not content."""
    table = ('<p:graphicFrame><p:nvGraphicFramePr><p:cNvPr id="5" name="Table"/>'
             '<p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr><p:xfrm/><a:graphic>'
             '<a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/table">'
             "<a:tbl><a:tr h=\"370840\">" + "".join(
                 f"<a:tc><a:txBody><a:bodyPr/><a:lstStyle/>{_p(cell)}</a:txBody></a:tc>"
                 for cell in ("Left cell", "Right cell"))
             + "</a:tr></a:tbl></a:graphicData></a:graphic></p:graphicFrame>")
    first = _shapes("sld", _box(_p("Quarterly plan")) + _box(
        _p("We ship ", ("b", "impor"), ("b!", "tant"), " news", "<a:br><a:rPr/></a:br>",
           "on slide ", SLIDE_NUMBER, " of ten."),
        _p(end=False), _p("  ")) + "<p:grpSp><p:nvGrpSpPr><p:cNvPr id=\"4\" name=\"Group\"/>"
        f"<p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr><p:grpSpPr/>{_box(_p('Grouped words'))}"
        f"</p:grpSp>{table}")
    notes = _shapes("notes", _box(_p("Say hello first.")) + _box(_p(SLIDE_NUMBER)))
    layout = _shapes("sldLayout", _box(_p("Click to edit the title")))
    parts = {
        "[Content_Types].xml": (f'{_XML}<Types xmlns="http://schemas.openxmlformats.org/package'
                                '/2006/content-types"><Default Extension="xml" '
                                'ContentType="application/xml"/></Types>'),
        "_rels/.rels": _rels(("officeDocument", "ppt/presentation.xml")),
        "ppt/presentation.xml": (f'{_XML}<p:presentation {_PML}><p:sldIdLst><p:sldId id="256" '
                                 'r:id="rId3"/><p:sldId id="257" r:id="rId2"/></p:sldIdLst>'
                                 "</p:presentation>"),
        "ppt/_rels/presentation.xml.rels": _rels(
            ("slideMaster", "slideMasters/slideMaster1.xml"), ("slide", "slides/slide1.xml"),
            ("slide", "/ppt/slides/slide2.xml")),
        "ppt/slides/slide1.xml": _shapes("sld", _box(_p("Thank you."))),
        "ppt/slides/_rels/slide1.xml.rels": _rels(
            ("slideLayout", "../slideLayouts/slideLayout1.xml")),
        "ppt/slides/slide2.xml": first,
        "ppt/slides/_rels/slide2.xml.rels": _rels(
            ("slideLayout", "../slideLayouts/slideLayout1.xml"),
            ("notesSlide", "../notesSlides/notesSlide1.xml")),
        "ppt/notesSlides/notesSlide1.xml": notes,
        "ppt/slideLayouts/slideLayout1.xml": layout,
        "ppt/slideMasters/slideMaster1.xml": _shapes("sldMaster", ""),
    }
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, xml in parts.items():
            # the package's own parts stored, the slides deflated: both must come back so
            archive.writestr(name, xml, zipfile.ZIP_DEFLATED if "/slide" in name
                             else zipfile.ZIP_STORED)
    return buf.getvalue()


def odp_file() -> bytes:
    """A presentation of two pages: a title with a bold span and the first page's speaker
    notes, then a line of text; its master page holds a placeholder prompt, not content."""
    document = opendocument.OpenDocumentPresentation()
    strong = Style(name="Strong", family="text")
    strong.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(strong)
    layout = PageLayout(name="PM1")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    document.masterstyles.addElement(master)

    def frame(parent, *paragraphs) -> None:
        box = draw.TextBox()
        for p in paragraphs:
            box.addElement(p)
        f = draw.Frame(width="20cm", height="3cm", x="2cm", y="2cm")
        f.addElement(box)
        parent.addElement(f)

    frame(master, odftext.P(text="Click to add Title"))
    title = odftext.P(text="Quarterly ")
    title.addElement(odftext.Span(stylename=strong, text="plan"))
    first = draw.Page(name="page1", masterpagename=master)
    frame(first, title)
    notes = presentation.Notes()
    frame(notes, odftext.P(text="Say hello first."))
    first.addElement(notes)
    second = draw.Page(name="page2", masterpagename=master)
    frame(second, odftext.P(text="Thank you."))
    document.presentation.addElement(first)
    document.presentation.addElement(second)
    buf = io.BytesIO()
    document.write(buf)
    return buf.getvalue()


CHAPTER = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"
 xml:lang="en" lang="en">
<head><title>{title}</title><link rel="stylesheet" type="text/css" href="style.css"/></head>
<body><h1 id="top">{title}</h1>
<p>It was a <em>dark</em> night&#160;and the <a href="notes.xhtml#n1"
 epub:type="noteref">wind</a> was cold.</p>
<p><img src="images/house.png" alt="A red house"/><br/>Open the door now.</p>
<p>Run <code>make all</code> to build it.<span id="p12" title="12"/></p>
<p translate="no">Keep this line.</p>
</body></html>
"""
NAV = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" lang="en">
<head><title>Contents</title></head>
<body><nav epub:type="toc" id="toc"><h2>Contents</h2><ol>
<li><a href="one.xhtml">The first chapter</a></li>
<li><a href="two.xhtml">The second chapter</a></li>
</ol></nav></body></html>
"""
NCX = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1" xml:lang="en">
<head><meta name="dtb:uid" content="urn:uuid:1"/></head>
<docTitle><text>The Small Book</text></docTitle>
<navMap>
<navPoint id="n1" playOrder="1"><navLabel><text>The first chapter</text></navLabel>
<content src="one.xhtml"/></navPoint>
<navPoint id="n2" playOrder="2"><navLabel><text>The second chapter</text></navLabel>
<content src="two.xhtml"/></navPoint>
</navMap></ncx>
"""
OPF = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="{version}" unique-identifier="uid">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier id="uid">urn:uuid:1</dc:identifier>
<dc:title>The Small Book</dc:title>
<dc:creator>Ann Writer</dc:creator>
<dc:description>A short story about a house.</dc:description>
<dc:language>en</dc:language>
</metadata>
<manifest>
{nav}<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
<item id="c2" href="two.xhtml" media-type="application/xhtml+xml"/>
<item id="c1" href="one.xhtml" media-type="application/xhtml+xml"/>
<item id="css" href="style.css" media-type="text/css"/>
<item id="img" href="images/house.png" media-type="image/png"/>
<item id="font" href="fonts/serif.otf" media-type="font/otf"/>
</manifest>
<spine toc="ncx"><itemref idref="c1"/><itemref idref="c2"/></spine>
</package>
"""
NAV_ITEM = '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>\n'
CONTAINER = """<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>
</rootfiles></container>
"""
ENCRYPTION = """<?xml version="1.0" encoding="UTF-8"?>
<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container"
 xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>
<enc:EncryptionMethod Algorithm="http://www.idpf.org/2008/embedding"/>
<enc:CipherData><enc:CipherReference URI="OEBPS/fonts/serif.otf"/></enc:CipherData>
</enc:EncryptedData></encryption>
"""


def epub_parts(version: int = 3) -> dict[str, bytes]:
    """The entries of a small book, in order: two chapters (spine order one, two; the manifest
    lists two first), a table of contents (EPUB 3: a nav document, not in the spine, and an
    NCX; EPUB 2: the NCX), a style sheet, an image and an obfuscated font."""
    parts = {
        "mimetype": b"application/epub+zip",
        "META-INF/container.xml": CONTAINER.encode(),
        "META-INF/encryption.xml": ENCRYPTION.encode(),
        "OEBPS/content.opf": OPF.format(version=f"{version}.0",
                                        nav=NAV_ITEM if version == 3 else "").encode(),
        "OEBPS/toc.ncx": NCX.encode(),
        "OEBPS/one.xhtml": CHAPTER.format(title="Chapter one").encode(),
        "OEBPS/two.xhtml": CHAPTER.format(title="Chapter two").encode(),
        "OEBPS/style.css": b"p { text-indent: 1em; }\n",
        "OEBPS/images/house.png": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
        "OEBPS/fonts/serif.otf": bytes(range(255, -1, -1)) * 4,
    }
    if version == 3:
        parts["OEBPS/nav.xhtml"] = NAV.encode()
    return parts


def epub_bytes(parts: dict[str, bytes]) -> bytes:
    """The entries zipped as a book: mimetype stored, the images stored (they are compressed
    already), the rest deflated."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in parts.items():
            stored = name == "mimetype" or name.endswith(".png")
            archive.writestr(name, data, zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED)
    return buf.getvalue()
