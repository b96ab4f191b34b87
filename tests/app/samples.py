"""Sample documents the document tests share, built with the libraries that read them."""

from __future__ import annotations

import io
import zipfile

import docx
from odf import opendocument, teletype
from odf import text as odftext
from odf.style import Style, TextProperties


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
