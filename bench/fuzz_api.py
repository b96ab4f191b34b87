"""Fuzz the HTTP API: a seeded stream of random, structurally varied requests to every route of a
real server on loopback, each answer checked against the API's rules.

Bodies of wrong types, nulls, nesting, numbers out of range, control characters, lone
surrogates, 100k-character words, unknown languages and formats, options out of range, form and
multipart bodies (broken ones too), files of random bytes under every document extension, HTML
tag soup, query strings, long headers, wrong methods and paths. Per answer:

* no 5xx, except a 503 with Retry-After (queue full, loading) and a 504 (the request timeout);
* the body is JSON (or the documented file, page or metrics text);
* a 400, 413, 415 or 422 names the field, and a limit error names the limit;
* a 200 has the documented shape (translatedText a string, or a list as long as q; ...);
* right after it, a plain /translate is answered within --probe-seconds.

It prints a table (route x status), then every violation, shrunk to a small reproduction (a
Python line). Bounded by --count and --seconds (shrinking included); traffic to loopback only.

    python -m bench.fuzz_api                             # starts a server on bundles/
    python -m bench.fuzz_api --count 2000 --seconds 600 --seed 7 --json /tmp/fuzz.json
    python -m bench.fuzz_api --url http://127.0.0.1:8000 --api-key KEY
"""

from __future__ import annotations

import argparse
import base64
import collections
import io
import json
import random
import string
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "fuzz-key"  # the key a started server accepts
DOCUMENT_EXTENSIONS = ["docx", "pdf", "html", "htm", "srt", "po", "pot", "xlf", "xliff", "md",
                       "txt", "epub", "odt", "odp", "pptx"]
# non-JSON answers the API documents: route -> media types
FILE_ANSWERS = {
    "GET /metrics": ("text/plain",), "GET /": ("text/html",), "GET /docs": ("text/html",),
    "GET /static/{file}": ("text/", "application/javascript", "image/"),
    "GET /download_file/{name}": ("application/octet-stream",),
    "GET /v1/documents/{id}/result": ("application/", "text/"),
}
FIELD_STATUSES = {400, 413, 415, 422}  # a client error in what was sent: which field
LIMIT_CODES = {"too_large", "body_too_large", "document_too_large"}
NO_FIELD_CODES = {"not_found", "method_not_allowed"}  # a path or method, not a field


# ---------------------------------------------------------------- JSON with what json.dumps
# cannot write: literals as they are, objects with a key given twice


@dataclass(frozen=True)
class Raw:
    """A JSON text put in as it is (NaN, 5000-digit numbers, deep nesting, broken JSON)."""

    text: str


@dataclass(frozen=True)
class Dup:
    """A JSON object written from its pairs, so a key may come twice."""

    pairs: tuple[tuple[str, Any], ...]


def encode(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Dup):
        return "{" + ", ".join(f"{json.dumps(k)}: {encode(v)}" for k, v in value.pairs) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(encode(v) for v in value) + "]"
    return json.dumps(value)  # lone surrogates as \ud800 escapes (ensure_ascii)


# ---------------------------------------------------------------- one request


@dataclass
class Part:
    """A multipart part: a form field, or a file where `filename` is set."""

    name: str
    value: bytes
    filename: str | None = None
    content_type: str | None = None


@dataclass
class Case:
    """One request, in a form the shrinker can take apart: a JSON value, form pairs, multipart
    parts or raw bytes (one of them), with the headers and query."""

    route: str  # the summary's row: "POST /translate", "GET /download_file/{name}"
    method: str
    path: str
    note: str  # what is hostile about it
    json: Any = None
    has_json: bool = False
    form: list[tuple[str, str]] | None = None
    parts: list[Part] | None = None
    boundary: str = "fuzzboundary"
    breakage: str = ""  # what is done to the multipart bytes ("" none)
    content: bytes | None = None
    content_type: str | None = None
    params: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> bytes:
        if self.has_json:
            return encode(self.json).encode("utf-8", "surrogatepass")
        if self.form is not None:
            return "&".join(f"{quote(k, safe='', errors='surrogatepass')}="
                            f"{quote(v, safe='', errors='surrogatepass')}"
                            for k, v in self.form).encode()
        if self.parts is not None:
            return break_multipart(multipart(self.parts, self.boundary), self.breakage,
                                   self.boundary)
        return self.content or b""

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.content_type is not None:
            headers["Content-Type"] = self.content_type
        return headers

    def wire_headers(self) -> dict[str, bytes]:
        """The headers as bytes (latin-1 where a value has more: HTTP's own charset)."""
        return {k: v.encode("latin-1", "replace") for k, v in self.request_headers().items()}

    def url(self) -> str:
        query = urlencode(self.params, errors="surrogatepass")
        return self.path + ("?" + query if query else "")

    def texts(self) -> int | None:
        """How many texts a 200 answers: -1 for one string, n for a list of n, None unknown."""
        name = {"POST /translate": "q", "POST /v1/translate": "text"}.get(self.route)
        if name is None:
            return None
        if self.has_json:
            value = self.json.get(name) if isinstance(self.json, dict) else None
            if isinstance(value, str):
                return -1
            return len(value) if isinstance(value, list) else None
        pairs = list(self.params)
        if self.form is not None:
            pairs += self.form
        if self.parts is not None and not self.breakage:
            pairs += [(p.name, "") for p in self.parts if p.filename is None]
        n = sum(1 for k, _ in pairs if k == name)
        return None if n == 0 else (-1 if n == 1 else n)


MULTIPART_BREAKAGES = ["no closing boundary", "truncated", "wrong boundary", "no boundary",
                       "bare LF", "garbage preamble", "part without headers",
                       "header without colon", "CR in name", "base64 part"]


def multipart(parts: list[Part], boundary: str) -> bytes:
    out = io.BytesIO()
    for part in parts:
        out.write(f"--{boundary}\r\n".encode())
        disposition = f'form-data; name="{part.name}"'
        if part.filename is not None:
            disposition += f'; filename="{part.filename}"'
        out.write(f"Content-Disposition: {disposition}\r\n".encode("utf-8", "surrogatepass"))
        if part.content_type is not None:
            out.write(f"Content-Type: {part.content_type}\r\n".encode())
        out.write(b"\r\n" + part.value + b"\r\n")
    out.write(f"--{boundary}--\r\n".encode())
    return out.getvalue()


def break_multipart(body: bytes, breakage: str, boundary: str) -> bytes:
    end = f"--{boundary}--\r\n".encode()
    if breakage == "no closing boundary":
        return body.removesuffix(end)
    if breakage == "truncated":
        return body[: len(body) * 2 // 3]
    if breakage == "wrong boundary":
        return body.replace(boundary.encode(), b"otherboundary")
    if breakage == "bare LF":
        return body.replace(b"\r\n", b"\n")
    if breakage == "garbage preamble":
        return b"\x00\xff garbage \r\n--" + body
    if breakage == "part without headers":
        return f"--{boundary}\r\n\r\nloose\r\n".encode() + body
    if breakage == "header without colon":
        return body.replace(b"Content-Disposition:", b"Content-Disposition", 1)
    if breakage == "CR in name":
        return body.replace(b'name="', b'name="\r\n', 1)
    if breakage == "base64 part":
        return body.replace(b"\r\n\r\n", b"\r\nContent-Transfer-Encoding: base64\r\n\r\n@@", 1)
    return body  # "no boundary" is in the header


# ---------------------------------------------------------------- hostile values

PLAIN = ["Open the file.", "The printer is not connected.", "Save your changes?",
         "Hello world. How are you?"]
STRINGS = [
    "", " ", "\n", "\t\r\n", "\x00", "a\x00b", "\x01\x02\x1b[31m\x7f", "\ud800", "a\udfffb",
    "\ud83d", "\u202eOpen the file.\u202c", "\u200f\u200e\u200b\u2060", "\ufeffOpen the file.",
    "e" + "\u0301" * 300, "\u0300\u0301\u0302", "😀" * 50, "👨‍👩‍👧", "\u2028\u2029",
    "{0} %s %(name)s {{x}} $HOME", "http://example.com/?q=1&x=<b>", "a@b.c",
    "...!!!???", "ﷺ" * 20, "\uffff\ufffe", "١٢٣ مرحبا بالعالم", "日本語のテキスト。",
    "<b>Open</b> the <i>file", "Open the file." * 40, "&amp;&lt;&#0;&#xD800;&#99999999;",
]
LANGUAGES = ["", "xx", "EN", "en-US", "zh-Hans", "auto", "en", "de", " en", "en\x00", "ende",
             "en,de", "*", "e", "zz-ZZ", "\ud800", "AUTO", "..", "de-DE"]
FORMATS = ["text", "html", "HTML", "xml", "", "Text", "markdown", " html"]
HTML_TAGS = ["<b>", "</b>", "<i>", "</i>", "<p>", "</p>", "<br>", "<br/>", "</br>", "<a href='x'>",
             "</a>", "<script>", "</script>", "<style>", "</style>", "<!--", "-->",
             "<![CDATA[", "]]>", "<?xml version='1.0'?>", "<!DOCTYPE html>", "&amp;", "&#0;",
             "&#xD800;", "&nbsp;", "&bogus;", "<table><tr><td>", "</td>", "<svg><text>",
             "<math>", "<template>", "<code>", "</code>", "<pre>", "<span translate='no'>",
             "<img alt='Open the file' src=x>", "<div title=\"a", "<", ">", "</>", "<x y=>",
             "<select><option>", "<textarea>", "<html><body>", "</html>", "<noscript>"]


def hostile_string(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        return rng.choice(STRINGS)
    if kind < 0.6:
        return rng.choice(PLAIN)
    if kind < 0.7:
        return "a" * rng.choice([4999, 5000, 5001, 20_001, 100_000])
    if kind < 0.85:
        return tag_soup(rng)
    return "".join(rng.choice(string.printable + "\u0301\u200b\ud800éß€") for _ in
                   range(rng.randint(1, 200)))


def tag_soup(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 30)):
        pieces.append(rng.choice(HTML_TAGS) if rng.random() < 0.6 else rng.choice(PLAIN))
    return " ".join(pieces) if rng.random() < 0.5 else "".join(pieces)


def hostile_number(rng: random.Random) -> Any:
    return rng.choice([0, -1, 1, 2, 3, 4, 5, 8, 9, 64, 1025, 2**31, 2**63, -(2**63), 10**30,
                       0.5, -0.0, 1.5, 1e308, -1e308, 5e-324, True, False,
                       Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1" * 5000),
                       Raw("-" + "9" * 5000), Raw("1e99999"), Raw("1.0"), Raw("1E2")])


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.random()
    if kind < 0.3:
        return hostile_string(rng)
    if kind < 0.5:
        return hostile_number(rng)
    if kind < 0.6:
        return None
    if kind < 0.8 and depth < 3:
        return [hostile_value(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 7]))]
    if kind < 0.9 and depth < 3:
        return {hostile_string(rng)[:20]: hostile_value(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    return rng.choice([Raw("[" * 5000 + "]" * 5000), Raw("{}"), Raw("[]"), Raw('"\\u0000"'),
                       Raw('"\\udc00\\ud800"'), Raw("[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]")])


def text_list(rng: random.Random) -> list[Any]:
    n = rng.choice([0, 1, 2, 3, 8, 9, 64, 65, 300])
    return [rng.choice(PLAIN) if rng.random() < 0.6 else hostile_value(rng) for _ in range(n)]


def options_value(rng: random.Random) -> Any:
    if rng.random() < 0.15:
        return hostile_value(rng)
    names = ["beam_size", "length_penalty", "max_length", "max_length_ratio", "alternatives",
             "return_scores", "confidence", "beam", "temperature", ""]
    return {rng.choice(names): hostile_value(rng) if rng.random() < 0.3 else hostile_number(rng)
            for _ in range(rng.randint(1, 4))}


def glossary_value(rng: random.Random) -> Any:
    return rng.choice([
        {}, {"": ""}, {"file": "Datei"}, {"file": 1}, {"file": None}, {"a" * 1000: "b"},
        {f"term{i}": f"Wort{i}" for i in range(rng.choice([10, 1001, 5000]))},
        {"\ud800": "x"}, {"<b>": "</b>"}, {" ": "  "}, ["file", "Datei"], "file=Datei",
        Raw('{"file": "a", "file": "b"}'), None, hostile_value(rng),
    ])


# ---------------------------------------------------------------- files


def zip_bytes(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def document_content(rng: random.Random, ext: str) -> bytes:
    """Random bytes, broken or odd documents of the extension (or another's), a few good ones."""
    kind = rng.random()
    if kind < 0.25:
        return rng.randbytes(rng.choice([1, 7, 100, 4096]))
    if kind < 0.4:
        return zip_bytes(rng.choice([
            {}, {"[Content_Types].xml": b"<Types/>"},
            {"word/document.xml": b"<w:document><w:body><w:p>" + rng.randbytes(50)},
            {"mimetype": b"application/epub+zip", "META-INF/container.xml": b"<container"},
            {"content.xml": b"<office:document-content>Open the file.</office:document-content>"},
            {"ppt/slides/slide1.xml": b"\x00" * 10},
        ]))
    if kind < 0.5:
        return b"%PDF-1.4\n" + rng.randbytes(rng.choice([10, 500])) + b"\n%%EOF"
    if kind < 0.75:
        text = rng.choice([
            "1\n00:00:01,000 --> 00:00:02,000\nOpen the file.\n",
            "1\n99:99:99,999 --> \n\n\n2\nx",
            'msgid ""\nmsgstr ""\n\nmsgid "Open the file."\nmsgstr ""\n',
            'msgid "unterminated\nmsgstr "x',
            '<?xml version="1.0"?><xliff version="1.2"><file><body><trans-unit id="1"><source>'
            "Open the file.</source></trans-unit></body></file></xliff>",
            '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><xliff>&a;&a;</xliff',
            "# Title\n\nOpen the file.\n\n```\ncode\n```\n| a | b |\n",
            "---\ntitle: x\n---\nOpen the file.", tag_soup(rng), hostile_string(rng),
        ])
        return text.encode(rng.choice(["utf-8", "utf-16", "latin-1"]), "replace")
    if kind < 0.9:
        return rng.choice(PLAIN).encode()
    return b"\xef\xbb\xbf" + "\n".join(rng.choice(PLAIN) for _ in range(5)).encode()


def file_name(rng: random.Random) -> str:
    ext = rng.choice(DOCUMENT_EXTENSIONS)
    return rng.choice([f"doc.{ext}", f"DOC.{ext.upper()}", f"../../etc/x.{ext}", f".{ext}",
                       "", "noext", "a.exe", "a.tar.gz", f"ü \u202e{ext}.txt", f"a\x00.{ext}",
                       f"{'n' * 300}.{ext}", f"a;b=c.{ext}", f"a\\b.{ext}"])


# ---------------------------------------------------------------- the request generators


@dataclass
class Server:
    """What the generators know about the server: its languages, its key."""

    source: str
    target: str
    languages: list[str]
    api_key: str | None


def key_headers(rng: random.Random, server: Server) -> dict[str, str]:
    if server.api_key is None or rng.random() < 0.08:
        return rng.choice([{}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer"},
                           {"Authorization": "Basic " + base64.b64encode(b"a:b").decode()}])
    return rng.choice([{"X-API-Key": server.api_key},
                       {"Authorization": f"Bearer {server.api_key}"}])


def language(rng: random.Random, server: Server, good: str) -> Any:
    roll = rng.random()
    if roll < 0.75:
        return good
    if roll < 0.95:
        return rng.choice(LANGUAGES + server.languages)
    return hostile_value(rng)


def mutated(rng: random.Random, fields: dict[str, Any],
            hostile: dict[str, Callable[[], Any]]) -> tuple[dict[str, Any], str]:
    """`fields` with one to three of them changed, dropped, or an unknown one added."""
    fields = dict(fields)
    changes = []
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        name = rng.choice([*hostile, "unknown"])
        roll = rng.random()
        if name == "unknown":
            key = rng.choice(["extra", "", "\ud800", "Q", "q ", "api-key", "a" * 300])
            fields[key] = hostile_value(rng)
            changes.append(f"+{key[:10]!r}")
        elif roll < 0.15:
            fields.pop(name, None)
            changes.append(f"-{name}")
        else:
            fields[name] = hostile[name]()
            changes.append(name)
    return fields, ",".join(changes) or "valid"


def libre_fields(rng: random.Random, server: Server) -> tuple[dict[str, Any], str]:
    fields: dict[str, Any] = {"q": rng.choice(PLAIN), "source": server.source,
                              "target": server.target}
    if rng.random() < 0.2:  # markup, often broken
        fields.update(q=tag_soup(rng), format="html")
    elif rng.random() < 0.3:
        fields["format"] = rng.choice(["text", "html"])
    if server.api_key is not None and rng.random() < 0.5:
        fields["api_key"] = server.api_key
    return mutated(rng, fields, {
        "q": lambda: rng.choice([hostile_string(rng), text_list(rng), hostile_value(rng)]),
        "source": lambda: language(rng, server, "auto"),
        "target": lambda: language(rng, server, server.target),
        "format": lambda: rng.choice(FORMATS) if rng.random() < 0.8 else hostile_value(rng),
        "alternatives": lambda: hostile_number(rng),
        "api_key": lambda: rng.choice(["", "wrong", 1, [], None, ["a", "b"],
                                       server.api_key or "x"]),
        "glossary": lambda: glossary_value(rng),
        "confidence": lambda: rng.choice([True, False, "true", "yes", 1, None, "false"]),
    })


def form_pairs(fields: dict[str, Any]) -> list[tuple[str, str]]:
    """Fields as a form sends them: strings, a list as the field repeated."""
    pairs = []
    for key, value in fields.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                pairs.append((key, item))
            elif item is not None:
                pairs.append((key, encode(item)))
    return pairs


def as_form_case(rng: random.Random, case: Case, fields: dict[str, Any]) -> Case:
    """The fields in one of LibreTranslate's other envelopes: form, multipart, query string."""
    pairs = form_pairs(fields)
    roll = rng.random()
    if roll < 0.4:
        return replace(case, form=pairs, content_type="application/x-www-form-urlencoded")
    if roll < 0.8:
        breakage = rng.choice(MULTIPART_BREAKAGES) if rng.random() < 0.3 else ""
        ctype = ("multipart/form-data" if breakage == "no boundary"
                 else f"multipart/form-data; boundary={case.boundary}")
        parts = [Part(k, v.encode("utf-8", "surrogatepass")) for k, v in pairs]
        return replace(case, parts=parts, breakage=breakage, content_type=ctype,
                       note=case.note + (f" [{breakage}]" if breakage else ""))
    return replace(case, params=pairs, content_type=None)


def envelope(rng: random.Random, case: Case, fields: dict[str, Any], forms: bool) -> Case:
    """JSON most of the time; else a form (LibreTranslate), raw bytes or a wrong type."""
    roll = rng.random()
    if roll < 0.6 or (not forms and roll < 0.85):
        ctype = rng.choice(["application/json"] * 8 + [
            "application/json; charset=latin-1", "application/vnd.api+json", "APPLICATION/JSON",
            "application/json; boundary=x", None])
        return replace(case, json=fields, has_json=True, content_type=ctype)
    if forms and roll < 0.85:
        return as_form_case(rng, case, fields)
    raw = rng.choice([
        b"", b"{", b"null", b"[]", b'"q"', b"1", b"\xff\xfe{", b"\x00" * 10, b"{}" * 3,
        encode(fields).encode("utf-16", "surrogatepass"),
        b"\xef\xbb\xbf" + encode(fields).encode("utf-8", "surrogatepass"),
        encode(fields).encode("utf-8", "surrogatepass")[:-1],
        b"q=" + b"%ZZ%00%ff" * 10, b"a" * 1_100_000,
        ("[" * 100_000).encode(),
    ])
    ctype = rng.choice(["application/json", "text/plain", "application/xml", None, "a/b/c",
                        "application/x-www-form-urlencoded", "multipart/form-data",
                        "multipart/form-data; boundary=", "text/html; charset=utf-8",
                        ";;;", "application/json; charset=\u00ff\u00fe"])
    return replace(case, content=raw, content_type=ctype, note=case.note + " [raw body]")


def gen_libre_translate(rng: random.Random, server: Server) -> Case:
    fields, note = libre_fields(rng, server)
    case = Case("POST /translate", "POST", "/translate", note, headers=key_headers(rng, server))
    return envelope(rng, case, fields, forms=True)


def gen_detect(rng: random.Random, server: Server) -> Case:
    fields: dict[str, Any] = {"q": rng.choice(PLAIN)}
    fields, note = mutated(rng, fields, {
        "q": lambda: rng.choice([hostile_string(rng), text_list(rng), hostile_value(rng)]),
        "api_key": lambda: rng.choice(["", "wrong", 1, None, server.api_key or "x"]),
    })
    case = Case("POST /detect", "POST", "/detect", note, headers=key_headers(rng, server))
    return envelope(rng, case, fields, forms=True)


def gen_v1_translate(rng: random.Random, server: Server) -> Case:
    fields: dict[str, Any] = {"text": rng.choice(PLAIN), "source": server.source,
                              "target": server.target}
    if rng.random() < 0.2:  # markup, often broken
        fields.update(text=tag_soup(rng), format="html")
    fields, note = mutated(rng, fields, {
        "text": lambda: rng.choice([hostile_string(rng), text_list(rng), hostile_value(rng)]),
        "source": lambda: language(rng, server, "auto"),
        "target": lambda: language(rng, server, server.target),
        "format": lambda: rng.choice(FORMATS) if rng.random() < 0.8 else hostile_value(rng),
        "options": lambda: options_value(rng),
        "glossary": lambda: glossary_value(rng),
    })
    if rng.random() < 0.05:  # a key given twice
        fields = Dup(tuple(fields.items()) + (("source", "en"),))
        note += ",dup"
    case = Case("POST /v1/translate", "POST", "/v1/translate", note,
                headers=key_headers(rng, server))
    return envelope(rng, case, fields, forms=False)


def upload_case(rng: random.Random, server: Server, route: str, path: str) -> Case:
    ext_name = file_name(rng)
    ext = ext_name.rsplit(".", 1)[-1]
    fields: dict[str, Any] = {"source": server.source, "target": server.target}
    if server.api_key is not None and route == "POST /translate_file" and rng.random() < 0.5:
        fields["api_key"] = server.api_key
    fields, note = mutated(rng, fields, {
        "source": lambda: language(rng, server, "auto"),
        "target": lambda: language(rng, server, server.target),
        "glossary": lambda: glossary_value(rng),
        "api_key": lambda: rng.choice(["", "wrong", server.api_key or "x"]),
    })
    parts = [Part(k, v.encode("utf-8", "surrogatepass")) for k, v in form_pairs(fields)]
    if rng.random() < 0.92:
        content = document_content(rng, ext)
        ctype = rng.choice([None, "application/octet-stream", "text/plain", "image/png"])
        parts.insert(rng.randint(0, len(parts)), Part(rng.choice(["file"] * 9 + ["files"]),
                                                       content, ext_name, ctype))
    if rng.random() < 0.1:  # the glossary as a file part
        parts.append(Part("glossary", rng.choice([b'{"file": "Datei"}', b"\xff\xfe", b"[]"]),
                          "g.json"))
    breakage = rng.choice(MULTIPART_BREAKAGES) if rng.random() < 0.2 else ""
    roll = rng.random()
    ctype = ("multipart/form-data" if breakage == "no boundary" else
             "multipart/form-data; boundary=fuzzboundary")
    if roll < 0.08:
        ctype = rng.choice(["application/json", "application/x-www-form-urlencoded", None,
                            'multipart/form-data; boundary="fuzzboundary"; charset=x'])
    note = f"{ext_name[:30]!r} {note}" + (f" [{breakage}]" if breakage else "")
    return Case(route, "POST", path, note, parts=parts, breakage=breakage, content_type=ctype,
                headers=key_headers(rng, server))


def gen_translate_file(rng: random.Random, server: Server) -> Case:
    return upload_case(rng, server, "POST /translate_file", "/translate_file")


def gen_documents(rng: random.Random, server: Server) -> Case:
    return upload_case(rng, server, "POST /v1/documents", "/v1/documents")


def job_id(rng: random.Random) -> str:
    return rng.choice(["0" * 32, "f" * 32, "x", "", "..%2F..", "%00", "a" * 33, "A" * 32,
                       rng.randbytes(16).hex(), "%ff%fe", "\u00e9" * 32])


def gen_job_reads(rng: random.Random, server: Server) -> Case:
    jid = job_id(rng)
    method, suffix, route = rng.choice([("GET", "", "GET /v1/documents/{id}"),
                                        ("GET", "/result", "GET /v1/documents/{id}/result"),
                                        ("DELETE", "", "DELETE /v1/documents/{id}")])
    return Case(route, method, f"/v1/documents/{jid}{suffix}", f"id {jid[:12]!r}",
                headers=key_headers(rng, server))


def gen_download(rng: random.Random, server: Server) -> Case:
    name = rng.choice([job_id(rng), "x.txt", "..%2F..%2Fetc%2Fpasswd", "%2e%2e", "a" * 300,
                       "0" * 32 + ".report.docx", "0" * 32 + "." + "x" * 255])
    return Case("GET /download_file/{name}", "GET", f"/download_file/{name}",
                f"name {name[:12]!r}")


GETS = ["/languages", "/frontend/settings", "/v1/models", "/health/live", "/health/ready",
        "/metrics", "/", "/docs", "/openapi.json", "/static/app.js", "/static/style.css"]


def gen_gets(rng: random.Random, server: Server) -> Case:
    path = rng.choice(GETS)
    route = "GET /static/{file}" if path.startswith("/static/") else f"GET {path}"
    params = [(hostile_string(rng)[:50], hostile_string(rng)[:50])
              for _ in range(rng.choice([0, 1, 3]))]
    return Case(route, "GET", path, f"{len(params)} params", params=params,
                headers=key_headers(rng, server))


def gen_suggest(rng: random.Random, server: Server) -> Case:
    fields, note = mutated(rng, {"q": "a", "s": "b", "source": "en", "target": "de"},
                           {"q": lambda: hostile_value(rng), "s": lambda: hostile_value(rng)})
    case = Case("POST /suggest", "POST", "/suggest", note)
    return envelope(rng, case, fields, forms=True)


ALL_ROUTES = [("POST", "/translate"), ("POST", "/v1/translate"), ("POST", "/detect"),
              ("POST", "/translate_file"), ("POST", "/v1/documents"), ("POST", "/suggest"),
              *(("GET", p) for p in GETS)]


def gen_wrong_method(rng: random.Random, server: Server) -> Case:
    method, path = rng.choice(ALL_ROUTES)
    other = rng.choice([m for m in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD")
                        if m != method])
    return Case("wrong method", other, path, f"{other} {path}",
                content=b"{}" if other in ("PUT", "PATCH") else None)


def gen_wrong_path(rng: random.Random, server: Server) -> Case:
    path = rng.choice(["/TRANSLATE", "/translate/", "/translate//", "/v1", "/v1/", "/v2/translate",
                       "/static/../app/config.py", "/static/%2e%2e/%2e%2e/README.md",
                       "/static/", "/static/nope.js", "/%ff", "/translate%00",
                       "/" + "a" * 8000, "/v1/documents/", "/download_file/",
                       "/health", "/detect/x"])
    return Case("unknown path", rng.choice(["GET", "POST"]), path, path[:30])


def gen_huge_headers(rng: random.Random, server: Server) -> Case:
    case = gen_libre_translate(rng, server) if rng.random() < 0.5 else gen_v1_translate(rng,
                                                                                      server)
    size = rng.choice([100, 4000, 12_000, 70_000])
    headers = dict(case.headers)
    roll = rng.random()
    if roll < 0.3:
        headers["X-Fuzz"] = "a" * size
    elif roll < 0.5:
        headers.update({f"X-Fuzz-{i}": "b" for i in range(size // 100)})
    elif roll < 0.7:
        headers["X-API-Key"] = "k" * size
    elif roll < 0.85:
        headers["Content-Length-Fuzz"] = "1"
        headers["Accept-Language"] = "en-US," * (size // 6)
    else:
        headers["Authorization"] = "Bearer " + "t" * size
    return replace(case, headers=headers, note=case.note + f" [headers {size}]")


GENERATORS: list[tuple[Callable[[random.Random, Server], Case], float]] = [
    (gen_libre_translate, 24), (gen_v1_translate, 22), (gen_detect, 8),
    (gen_translate_file, 12), (gen_documents, 8), (gen_job_reads, 4), (gen_download, 2),
    (gen_gets, 8), (gen_suggest, 2), (gen_wrong_method, 4), (gen_wrong_path, 3),
    (gen_huge_headers, 3),
]


def cases(rng: random.Random, server: Server) -> Iterator[Case]:
    makers, weights = zip(*GENERATORS, strict=True)
    while True:
        yield rng.choices(makers, weights)[0](rng, server)


# ---------------------------------------------------------------- the rules


def json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def check(case: Case, response: httpx.Response) -> list[str]:
    """The rules an answer breaks (an empty list: none)."""
    status, kind = response.status_code, response.headers.get("content-type", "")
    problems = []
    documented_file = (status == 200 and case.method in ("GET", "HEAD")
                       and kind.startswith(FILE_ANSWERS.get(case.route, ("\0",))))
    if 300 <= status < 400 and response.headers.get("location"):
        return []  # the framework's redirect of a path with a trailing slash: no body
    body = json_body(response)
    if case.method != "HEAD" and not documented_file and (
            not kind.startswith("application/json") or body is None):
        problems.append(f"not JSON ({kind or 'no Content-Type'})")
    if status >= 500:
        code = body.get("code") if isinstance(body, dict) else None
        if status == 503 and response.headers.get("retry-after") and code in (
                "unavailable", "overloaded"):
            pass  # documented: queue full, loading, shutting down
        elif status == 504 and code == "timeout":
            pass  # documented: the request's or the file's timeout
        else:
            problems.append(f"{status}")
    if 400 <= status < 500 and isinstance(body, dict):
        problems += error_problems(status, body)
    elif 400 <= status < 500 and case.method != "HEAD" and body is not None:
        problems.append("error body is not an object")
    if status in (200, 202) and body is not None:
        problems += shape_problems(case, body)
    return problems


def error_problems(status: int, body: dict[str, Any]) -> list[str]:
    problems = []
    if not isinstance(body.get("error"), str) or not body["error"]:
        problems.append("error without a message")
    code = body.get("code")
    if status in FIELD_STATUSES and code not in NO_FIELD_CODES and not body.get("field"):
        problems.append(f"{status} {code} names no field")
    if code in LIMIT_CODES and body.get("limit") is None:
        problems.append(f"{status} {code} names no limit")
    return problems


def _texts_shape(value: Any, texts: int) -> bool:
    if texts == -1:
        return isinstance(value, str)
    return isinstance(value, list) and len(value) == texts and all(
        isinstance(v, str) for v in value)


def shape_problems(case: Case, body: Any) -> list[str]:
    route, texts = case.route, case.texts()
    if route == "POST /translate":
        if not isinstance(body, dict) or "translatedText" not in body:
            return ["200 without translatedText"]
        if texts is not None and not _texts_shape(body["translatedText"], texts):
            return [f"translatedText does not match q ({texts})"]
    elif route == "POST /v1/translate":
        if not isinstance(body, dict) or not isinstance(body.get("translations"), list):
            return ["200 without translations"]
        n = len(body["translations"])
        if texts is not None and n != (1 if texts == -1 else texts):
            return [f"{n} translations for {texts} texts"]
        if not all(isinstance(t, dict) and isinstance(t.get("text"), str)
                   for t in body["translations"]):
            return ["a translation without text"]
        if not all(isinstance(body.get(k), str) for k in ("model", "source", "target")):
            return ["model, source or target missing"]
    elif route == "POST /detect":
        if not isinstance(body, list) or not all(
                isinstance(d, dict) and isinstance(d.get("language"), str)
                and isinstance(d.get("confidence"), (int, float)) for d in body):
            return ["/detect: not a list of {language, confidence}"]
    elif route == "POST /translate_file":
        if not isinstance(body, dict) or not isinstance(body.get("translatedFileUrl"), str):
            return ["200 without translatedFileUrl"]
    elif route == "POST /v1/documents":
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            return ["202 without id"]
    elif route == "GET /languages" and (not isinstance(body, list) or not all(
            isinstance(x, dict) and {"code", "name", "targets"} <= set(x) for x in body)):
        return ["/languages: not a list of {code, name, targets}"]
    return []


# ---------------------------------------------------------------- the run


@dataclass
class Violation:
    case: Case
    problems: list[str]
    status: int | None
    excerpt: str

    @property
    def signature(self) -> tuple[str, str]:
        return self.case.route, "; ".join(sorted(self.problems))


@dataclass
class Report:
    requests: int = 0
    seconds: float = 0.0
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    violations: list[Violation] = field(default_factory=list)
    slowest: dict[str, tuple[float, str]] = field(default_factory=dict)  # seconds, note
    probe_max_s: float = 0.0

    def table(self) -> str:
        routes = sorted({r for r, _ in self.outcomes})
        columns = sorted({o for _, o in self.outcomes}, key=lambda o: (not o.isdigit(), o))
        width = max([len(r) for r in routes] + [5])
        lines = [f"{'route':<{width}} " + " ".join(f"{c:>6}" for c in columns) + "  slowest"]
        for r in routes:
            cells = " ".join(f"{self.outcomes.get((r, c), 0) or '.':>6}" for c in columns)
            lines.append(f"{r:<{width}} {cells}  {self.slowest[r][0]:.2f}s")
        return "\n".join(lines)

    def as_dict(self, url: str) -> dict[str, Any]:
        return {"requests": self.requests, "seconds": round(self.seconds, 1),
                "probe_max_s": round(self.probe_max_s, 2),
                "slowest": {r: {"s": round(t, 2), "case": note}
                            for r, (t, note) in sorted(self.slowest.items())},
                "outcomes": {f"{r} {o}": n for (r, o), n in sorted(self.outcomes.items())},
                "violations": [{"route": v.case.route, "problems": v.problems,
                                "status": v.status, "answer": v.excerpt,
                                "reproduction": reproduction(v.case, url)}
                               for v in self.violations]}


class Fuzzer:
    """Sends cases to one server and checks each answer, then that the server still answers a
    plain translation."""

    def __init__(self, url: str, server: Server, timeout: float = 45.0,
                 probe_seconds: float = 5.0, alive: Callable[[], bool] = lambda: True,
                 log: Callable[[], str] = str,
                 transport: httpx.BaseTransport | None = None) -> None:
        """`alive`: whether the server process runs; `log`: what the server has logged since
        the last call (a started server's), searched for tracebacks; `transport`: tests'."""
        self.url, self.server = url, server
        self.client = httpx.Client(base_url=url, timeout=timeout, transport=transport)
        self.probe_seconds = probe_seconds
        self.alive, self.log = alive, log

    def close(self) -> None:
        self.client.close()

    def send(self, case: Case) -> tuple[httpx.Response | None, str, float]:
        started = time.monotonic()
        try:
            request = self.client.build_request(case.method, case.url(),
                                                headers=case.wire_headers(),
                                                content=case.body() or None)
            response = self.client.send(request)
            return response, "", time.monotonic() - started
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return None, f"{type(exc).__name__}: {exc}"[:200], time.monotonic() - started

    def key(self) -> dict[str, str]:
        return {"X-API-Key": self.server.api_key} if self.server.api_key else {}

    def follow_up(self, case: Case, response: httpx.Response) -> list[str]:
        """A translated file downloads; a job created is deleted again (it would take the
        server's time from the requests that follow)."""
        body = json_body(response)
        if case.route == "POST /translate_file" and response.status_code == 200 and isinstance(
                body, dict) and isinstance(body.get("translatedFileUrl"), str):
            r = self.client.get(urlsplit(body["translatedFileUrl"]).path)
            if r.status_code != 200 or not r.content:
                return [f"its translatedFileUrl answers {r.status_code} ({len(r.content)} bytes)"]
        if case.route == "POST /v1/documents" and response.status_code == 202 and isinstance(
                body, dict) and isinstance(body.get("id"), str):
            r = self.client.delete(f"/v1/documents/{body['id']}", headers=self.key())
            if r.status_code >= 300:
                return [f"deleting the job it created answers {r.status_code}"]
        return []

    def probe(self) -> str:
        """'' when a plain /translate is answered 200 in time; else what went wrong."""
        started = time.monotonic()
        headers = self.key()
        try:
            r = self.client.post("/translate", json={"q": PLAIN[0], "source": self.server.source,
                                                     "target": self.server.target},
                                 headers=headers, timeout=self.probe_seconds)
        except httpx.HTTPError as exc:
            return f"plain /translate after it: {type(exc).__name__}"
        if r.status_code != 200:
            return f"plain /translate after it: {r.status_code}"
        self.probe_s = time.monotonic() - started
        return ""

    def problems(self, case: Case) -> tuple[list[str], int | None, str, float]:
        response, error, seconds = self.send(case)
        if response is None:
            unsent = error.startswith(("LocalProtocolError", "InvalidURL"))  # httpx won't
            problems = [] if unsent or expected_drop(case) else [
                f"no answer ({error.split(':')[0]})"]
            status, text = None, error
        else:
            problems = check(case, response) + self.follow_up(case, response)
            status, text = response.status_code, response.text[:300]
        if not self.alive():
            problems.append("the server process died")
        elif probe := self.probe():
            problems.append(probe)
        problems += [f"the server logged {exception_name(t)}" for t in tracebacks(self.log())]
        return problems, status, text, seconds

    def run(self, rng: random.Random, count: int, seconds: float, shrink: int = 40,
            on_progress: Callable[[int], None] | None = None) -> Report:
        report = Report()
        started = time.monotonic()
        deadline = started + seconds
        first: dict[tuple[str, str], Violation] = {}
        self.probe_s = 0.0
        for case in cases(rng, self.server):
            if report.requests >= count or time.monotonic() >= deadline:
                break
            problems, status, text, took = self.problems(case)
            report.requests += 1
            report.probe_max_s = max(report.probe_max_s, self.probe_s)
            if took >= report.slowest.get(case.route, (0.0, ""))[0]:
                report.slowest[case.route] = (took, case.note[:80])
            report.outcomes[case.route, str(status) if status else "error"] += 1
            if problems:
                report.outcomes[case.route, "VIOL"] += 1
                violation = Violation(case, problems, status, text)
                first.setdefault(violation.signature, violation)
            if on_progress is not None:
                on_progress(report.requests)
        for violation in first.values():  # each kind of violation once, shrunk
            if time.monotonic() < deadline:
                violation.case = self.shrink(violation, shrink, deadline)
            report.violations.append(violation)
        report.seconds = time.monotonic() - started
        return report

    def shrink(self, violation: Violation, budget: int, deadline: float) -> Case:
        """The smallest case found (by trying smaller ones) that breaks the same rules."""
        best = violation.case
        tries = 0
        improved = True
        while improved and tries < budget and time.monotonic() < deadline:
            improved = False
            for smaller in smaller_cases(best):
                if tries >= budget or time.monotonic() >= deadline:
                    break
                tries += 1
                problems, _, _, _ = self.problems(smaller)
                if sorted(problems) == sorted(violation.problems):
                    best, improved = smaller, True
                    break
        return best


def expected_drop(case: Case) -> bool:
    """Requests an HTTP server may answer by closing the connection: header blocks past what
    the HTTP parser reads at all, request lines too long."""
    head = sum(len(k) + len(v) + 4 for k, v in case.request_headers().items())
    return head > 60_000 or len(case.url()) > 60_000


def smaller_value(value: Any) -> Iterator[Any]:
    if isinstance(value, str) and len(value) > 1:
        yield value[: len(value) // 2]
        yield value[:1]
    elif isinstance(value, list) and value:
        yield value[: len(value) // 2]
        yield value[:1]
        for i, item in enumerate(value):
            for small in smaller_value(item):
                yield value[:i] + [small] + value[i + 1:]
    elif isinstance(value, dict) and value:
        for key in value:
            yield {k: v for k, v in value.items() if k != key}
        for key, item in value.items():
            for small in smaller_value(item):
                yield {**value, key: small}


def smaller_cases(case: Case) -> Iterator[Case]:
    for name in list(case.headers):
        yield replace(case, headers={k: v for k, v in case.headers.items() if k != name})
    for name, value in case.headers.items():
        if len(value) > 100:
            yield replace(case, headers={**case.headers, name: value[: len(value) // 2]})
    if case.has_json:
        for small in smaller_value(case.json):
            yield replace(case, json=small)
    for attr in ("form", "params"):
        pairs = getattr(case, attr)
        for i in range(len(pairs or [])):
            yield replace(case, **{attr: pairs[:i] + pairs[i + 1:]})
            key, value = pairs[i]
            if len(value) > 1:
                yield replace(case, **{attr: [*pairs[:i], (key, value[: len(value) // 2]),
                                              *pairs[i + 1:]]})
    if case.parts:
        for i, part in enumerate(case.parts):
            yield replace(case, parts=case.parts[:i] + case.parts[i + 1:])
            if len(part.value) > 1:
                yield replace(case, parts=[*case.parts[:i],
                                           replace(part, value=part.value[: len(part.value) // 2]),
                                           *case.parts[i + 1:]])
    if case.content and len(case.content) > 1:
        yield replace(case, content=case.content[: len(case.content) // 2])


def short_repr(value: bytes | str, limit: int = 600) -> str:
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...  ({len(value)} {'bytes' if isinstance(value, bytes) else 'chars'})"


def reproduction(case: Case, url: str) -> str:
    """One line of Python that sends the request again."""
    args = [repr(case.method), repr(url + case.url())]
    headers = case.request_headers()
    if headers:
        args.append("headers={" + ", ".join(f"{k!r}: {short_repr(v, 200)}"
                                            for k, v in headers.items()) + "}")
    body = case.body()
    if body:
        args.append(f"content={short_repr(body)}")
    return f"httpx.request({', '.join(args)})"


# ---------------------------------------------------------------- the command


def server_facts(url: str, api_key: str | None) -> Server:
    """The languages to use (from /languages): the first pair the server translates."""
    langs = httpx.get(f"{url}/languages", timeout=10).json()
    codes = [x["code"] for x in langs]
    for lang in langs:
        targets = [t for t in lang["targets"] if t != lang["code"]]
        if targets:
            return Server(lang["code"], targets[0], codes, api_key)
    raise RuntimeError(f"{url} translates no pair: {codes}")


def loopback(url: str) -> str:
    if urlsplit(url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"--url must be on loopback, got {url}")
    return url.rstrip("/")


def tracebacks(log: str) -> list[str]:
    """The tracebacks in a server's log, each with the line before it (what it was doing) and
    the exception's line."""
    lines, found = log.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = i + 1
            while end < len(lines) and lines[end].startswith((" ", "\t")):
                end += 1
            found.append("\n".join(lines[max(0, i - 1): end + 1]))
    return found


def exception_name(traceback: str) -> str:
    """A traceback's exception, without its message (which names files, ids)."""
    return traceback.rsplit("\n", 1)[-1].split(":", 1)[0]


class LogTail:
    """What a file has gained since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def __call__(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        return data.decode("utf-8", "replace")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--models-dir", default=None, help="start a server on these bundles "
                       "(default: bundles/)")
    where.add_argument("--url", help="a running server on loopback")
    ap.add_argument("--api-key", default=None, help="the --url server's API key, if it has keys "
                    f"(a started server accepts {API_KEY!r})")
    ap.add_argument("--count", type=int, default=500, help="requests at most")
    ap.add_argument("--seconds", type=float, default=120.0, help="seconds at most (shrinking "
                    "included)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe-seconds", type=float, default=5.0,
                    help="a plain /translate after each request must answer this fast")
    ap.add_argument("--shrink", type=int, default=40, help="requests to shrink each violation")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads (started)")
    ap.add_argument("--json", type=Path, help="also write the report here")
    args = ap.parse_args(argv)

    from bench.service import start_server, stop_server

    proc, log = None, str
    workdir = tempfile.TemporaryDirectory(prefix="fuzz-api-")
    if args.url:
        url, api_key = loopback(args.url), args.api_key
    else:
        api_key = API_KEY
        log_path = Path(workdir.name) / "server.log"
        with open(log_path, "w") as output:
            proc, url = start_server(args.models_dir or str(ROOT / "bundles"),
                                     ["--files-dir", workdir.name, "--api-keys", api_key],
                                     args.threads, output=output)
        log = LogTail(log_path)
        log()  # what loading logged
    try:
        server = server_facts(url, api_key)
        fuzzer = Fuzzer(url, server, probe_seconds=args.probe_seconds,
                        alive=lambda: proc is None or proc.poll() is None, log=log)
        print(f"fuzz: {url}, seed {args.seed}, at most {args.count} requests / "
              f"{args.seconds:g} s ({server.source}->{server.target})", flush=True)
        report = fuzzer.run(random.Random(args.seed), args.count, args.seconds, args.shrink,
                            on_progress=lambda n: n % 100 or print(f"  {n} sent", flush=True))
        fuzzer.close()
    finally:
        if proc is not None:
            stop_server(proc)
    print(f"\n{report.requests} requests in {report.seconds:.1f} s; slowest plain /translate "
          f"after one: {report.probe_max_s:.2f} s\n")
    print(report.table())
    for v in report.violations:
        print(f"\nVIOLATION {v.case.route} ({v.case.note[:80]}): {'; '.join(v.problems)}\n"
              f"  answer {v.status}: {v.excerpt[:300]!r}\n  {reproduction(v.case, url)}")
    if proc is not None:  # the tracebacks themselves, once each
        logged = {exception_name(t): t for t in tracebacks(log_path.read_text("utf-8", "replace"))}
        for text in logged.values():
            print(f"\nthe server logged:\n{text}")
    if args.json:
        args.json.write_text(json.dumps(report.as_dict(url), indent=2) + "\n")
    workdir.cleanup()
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
