"""EPUB books (.epub, EPUB 2 and 3): a zip whose META-INF/container.xml names the package
document (the OPF); its manifest lists the book's files and its spine the order they are read in.

Segments, in reading order: the book's title and description (what people read in their
library), the table of contents (the NCX's labels, the EPUB 3 nav document where the spine does
not hold it), then every XHTML page of the spine in spine order. Pages are read and written by
app.documents.html_file, so inline tags, alt and title values, code and translate="no" behave
as in an HTML page; their XML declaration and DOCTYPE are copied with the rest of the markup.
The language is set to the target: dc:language (the first), the pages' <html lang>/xml:lang, the
NCX's xml:lang and the xml:lang of what was translated in the OPF.

Every other entry (images, style sheets, fonts, META-INF/encryption.xml) is copied with its
bytes, its place and its compression; mimetype is written first, stored and holding the media
type alone, as readers need it.
A book whose files point outside it, that lacks its package document, whose XML declares
entities (never expanded: "billion laughs") or whose pages are encrypted (DRM) is refused,
naming the file."""

from __future__ import annotations

import html
import io
import posixpath
import zipfile
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from lxml import etree

from app.documents import Budget, Document, InvalidDocument, html_file
from app.documents.txt_file import replace_stripped
from app.text.protect import ANY_TAG_RE, has_words
from app.text.segment import always

_CONTAINER = "META-INF/container.xml"
_ENCRYPTION = "META-INF/encryption.xml"
_MIMETYPE = b"application/epub+zip"
_XHTML = "application/xhtml+xml"
_NCX = "application/x-dtbncx+xml"
_DC = "{http://purl.org/dc/elements/1.1/}"
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
# fonts are obfuscated with these (not DRM): they are copied, the pages stay readable
_FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}


def _parser(recover: bool = False) -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, recover=recover)


def _no_entities(tree, name: str) -> None:
    dtd = tree.docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        raise InvalidDocument(f"{name} declares XML entities in its DOCTYPE; a book whose "
                              "files declare entities is not translated")


def _xml(archive: zipfile.ZipFile, name: str):
    """The entry `name` parsed as XML (entities not expanded, nothing fetched)."""
    try:
        tree = etree.parse(io.BytesIO(archive.read(name)), _parser())
    except etree.XMLSyntaxError as exc:
        raise InvalidDocument(f"{name} is not well-formed XML: {exc}") from exc
    _no_entities(tree, name)
    return tree


def _well_formed(data: bytes, name: str) -> bool:
    """Whether a page is well-formed XML; one that is not (read as HTML, as lenient readers
    show it) is still checked for entity declarations."""
    parser = _parser(recover=True)
    try:
        tree = etree.parse(io.BytesIO(data), parser)
    except etree.XMLSyntaxError:
        return False
    _no_entities(tree, name)
    return tree.getroot() is not None and not any(
        e.level >= etree.ErrorLevels.ERROR for e in parser.error_log)


def _fragment_ok(markup: str) -> bool:
    """Whether a segment is well-formed XML; its prefixes (epub:type) are declared on the
    page's root, not here, so an unbound one is no error."""
    parser = _parser(recover=True)
    try:
        etree.fromstring(f"<x>{markup}</x>", parser)
    except etree.XMLSyntaxError:
        return False
    return not any(e.level >= etree.ErrorLevels.ERROR and e.domain != etree.ErrorDomains.NAMESPACE
                   for e in parser.error_log)


def _entry(archive: zipfile.ZipFile, base: str, href: str, what: str) -> str:
    """The name of the entry `href` (a URL relative to the entry `base`) points to, which must
    be in the book."""
    url = urlsplit(href)
    name = posixpath.normpath(posixpath.join(posixpath.dirname(base), unquote(url.path)))
    if url.scheme or url.netloc or name.startswith(("/", "../")) or name in ("..", "."):
        raise InvalidDocument(f"{what} is {href!r}, outside the book")
    if name not in archive.NameToInfo:
        raise InvalidDocument(f"{what} is {name}, which is not in the book")
    return name


@dataclass
class _Texts:
    """An XML file of the book (the OPF, the NCX) whose elements' texts are segments (as
    escaped text, like the pages'), and the elements and attributes that say its language."""

    name: str
    tree: etree._ElementTree
    elements: list
    languages: list  # elements whose text is a language code (dc:language)
    lang_attrs: list  # elements whose xml:lang is set

    def segments(self) -> list[str]:
        return [html.escape(el.text.strip(), quote=False) for el in self.elements]

    def written(self, translations: list[str], target_lang: str | None) -> bytes:
        for el, text in zip(self.elements, translations, strict=True):
            el.text = replace_stripped(el.text, html.unescape(ANY_TAG_RE.sub("", text)))
        if target_lang:
            for el in self.languages:
                el.text = target_lang
            for el in self.lang_attrs:
                el.set(_XML_LANG, target_lang)
        info = self.tree.docinfo
        return etree.tostring(self.tree, xml_declaration=True, encoding=info.encoding or "UTF-8",
                              standalone=info.standalone)


def _texts(name: str, tree, elements: list, languages: list) -> _Texts:
    elements = [el for el in elements if len(el) == 0 and el.text and has_words(el.text)]
    root = tree.getroot()
    lang_attrs = [el for el in [root, *elements] if el.get(_XML_LANG) is not None]
    return _Texts(name, tree, elements, languages, lang_attrs)


@dataclass
class _Page:
    """An XHTML page, read by html_file; `well_formed`: checked again once translated."""

    name: str
    doc: Document
    well_formed: bool

    def segments(self) -> list[str]:
        return self.doc.segments

    def written(self, translations: list[str], target_lang: str | None) -> bytes:
        if self.well_formed:
            # a translation whose tags cross would make the page an error page in a reader
            translations = [
                t if _fragment_ok(t) or not _fragment_ok(s)
                else html.escape(html.unescape(ANY_TAG_RE.sub("", t)), quote=False)
                for s, t in zip(self.doc.segments, translations, strict=True)]
        return html_file.rebuild(self.doc, translations, target_lang)


def _page(archive: zipfile.ZipFile, name: str, budget: Budget) -> _Page:
    data = archive.read(name)
    return _Page(name, html_file.extract(data, budget=budget), _well_formed(data, name))


@dataclass
class _Package:
    """What the OPF says: its name and tree, the manifest (id -> (entry, media type,
    properties)), the spine's ids in order, the NCX's id (the spine's toc)."""

    name: str
    tree: etree._ElementTree
    items: dict[str, tuple[str, str, list[str]]]
    spine: list[str]
    toc: str | None


def _package(archive: zipfile.ZipFile) -> _Package:
    if _CONTAINER not in archive.NameToInfo:
        raise InvalidDocument(f"not an EPUB book: it has no {_CONTAINER}")
    rootfiles = list(_xml(archive, _CONTAINER).getroot().iter("{*}rootfile"))
    packages = [r for r in rootfiles if r.get("media-type") == "application/oebps-package+xml"]
    if not (packages or rootfiles) or not (packages or rootfiles)[0].get("full-path"):
        raise InvalidDocument(f"{_CONTAINER} names no package document (rootfile full-path)")
    name = _entry(archive, "", (packages or rootfiles)[0].get("full-path"),
                  "the package document")
    tree = _xml(archive, name)
    items = {}
    for item in tree.getroot().iter("{*}item"):
        href = item.get("href")
        if item.get("id") and href:
            items[item.get("id")] = (href, item.get("media-type", ""),
                                     (item.get("properties") or "").split())
    spine = tree.getroot().find("{*}spine")
    if spine is None:
        raise InvalidDocument(f"{name} has no spine")
    return _Package(name, tree, items, [i.get("idref") for i in spine.iter("{*}itemref")],
                    spine.get("toc"))


def _encrypted(archive: zipfile.ZipFile) -> set[str]:
    """The entries META-INF/encryption.xml says are encrypted, fonts obfuscated for embedding
    left out."""
    if _ENCRYPTION not in archive.NameToInfo:
        return set()
    found = set()
    for data in _xml(archive, _ENCRYPTION).getroot().iter("{*}EncryptedData"):
        method = data.find("{*}EncryptionMethod")
        if method is not None and method.get("Algorithm") in _FONT_OBFUSCATION:
            continue
        for ref in data.iter("{*}CipherReference"):
            found.add(posixpath.normpath(unquote(ref.get("URI", ""))))
    return found


def _checked(archive: zipfile.ZipFile) -> None:
    """The archive is an EPUB: mimetype (if any) says so. (That every entry can be read, so that
    the book can be written back, app.documents checks for every zipped file.)"""
    if "mimetype" in archive.NameToInfo:
        said = archive.read("mimetype").strip()
        if said != _MIMETYPE:
            raise InvalidDocument(f"the mimetype entry says {said[:100]!r}, not "
                                  f"{_MIMETYPE.decode()}")


def _parts(archive: zipfile.ZipFile, budget: Budget) -> list[_Texts | _Page]:
    """The book's parts in reading order, each spent from `budget` as it is read (a page
    by html_file), so that a book past a limit is read no further; a book that points outside
    itself is refused as such first."""
    package = _package(archive)
    root = package.tree.getroot()
    read = list(root.iter(f"{_DC}title", f"{_DC}description"))
    languages = list(root.iter(f"{_DC}language"))[:1]
    parts: list[_Texts | _Page] = [_texts(package.name, package.tree, read, languages)]

    def entry(item_id: str, what: str) -> tuple[str, str, list[str]]:
        if item_id not in package.items:
            raise InvalidDocument(f"{package.name}: {what} is {item_id!r}, which the manifest "
                                  "does not list")
        href, media_type, properties = package.items[item_id]
        name = _entry(archive, package.name, href, f"{package.name}: {what}")
        return name, media_type, properties

    ncx_id = package.toc or next((i for i, (_, t, _) in package.items.items() if t == _NCX), None)
    if ncx_id is not None:
        name, _, _ = entry(ncx_id, "the NCX (spine toc)")
        tree = _xml(archive, name)
        labels = [t for el in tree.getroot().iter("{*}docTitle", "{*}navLabel")
                  for t in el.iter("{*}text")]
        parts.append(_texts(name, tree, labels, []))
    spine = [name for name, media_type, _ in
             (entry(i, f"the spine's item {i!r}") for i in package.spine) if media_type == _XHTML]
    # the nav document where the spine does not hold it: the table of contents, read first
    navs = [entry(i, "the nav document")[0] for i, (_, t, properties) in package.items.items()
            if "nav" in properties and t == _XHTML]
    names = list(dict.fromkeys([n for n in navs if n not in spine] + spine))
    locked = _encrypted(archive).intersection(names)
    if locked:
        raise InvalidDocument(f"{min(locked)} is encrypted (DRM): only books without DRM can "
                              "be translated")
    for part in parts:  # once the book's files are known to be in it and readable
        budget.spend(part.segments())
    return parts + [_page(archive, name, budget) for name in names]


def extract(data: bytes, budget: Budget | None = None) -> Document:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        _checked(archive)
        parts = _parts(archive, budget or Budget())
    segments = [s for part in parts for s in part.segments()]
    return Document("epub", segments, (data, parts), markup=True, wraps=always)


def _like(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """A new entry with `info`'s name, time, compression and attributes; mimetype stored and
    without extra fields, as the EPUB container requires."""
    new = zipfile.ZipInfo(info.filename, info.date_time)
    new.compress_type = zipfile.ZIP_STORED if info.filename == "mimetype" else info.compress_type
    new.create_system, new.external_attr, new.comment = (
        info.create_system, info.external_attr, info.comment)
    return new


def rebuild(doc: Document, translations: list[str], target_lang: str | None = None) -> bytes:
    data, parts = doc.state
    written, at = {}, 0
    for part in parts:
        n = len(part.segments())
        written[part.name] = part.written(translations[at : at + n], target_lang)
        at += n
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as archive, zipfile.ZipFile(out, "w") as book:
        infos = archive.infolist()
        # mimetype first: readers find the book's type at a fixed offset
        for info in sorted(infos, key=lambda i: i.filename != "mimetype"):
            # (the media type alone: a line end after it, which _checked accepts, is an error
            # to EPUB checkers)
            content = _MIMETYPE if info.filename == "mimetype" else written.get(info.filename)
            book.writestr(_like(info), archive.read(info) if content is None else content)
        book.comment = archive.comment
    return out.getvalue()
