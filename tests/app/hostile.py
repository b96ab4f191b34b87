"""Hostile documents the document tests share: each is small to send and costly to read,
segment or rebuild when the service is careless. Built as bytes directly (no library call per
run or cue), so making them takes milliseconds."""

from __future__ import annotations

import io
import zipfile

from tests.app.samples import docx_bytes, docx_document, odt_file, pptx_file

_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def docx_of_runs(runs: int, bold: bool = True) -> bytes:
    """A .docx whose body is one paragraph of `runs` one-letter runs and no space; with `bold`
    every second run is bold (so each is an inline tag of its own), else they all look alike
    (one text of `runs` letters)."""
    rpr = "<w:rPr><w:b/></w:rPr>"
    body = "".join(f"<w:r>{rpr if bold and i % 2 else ''}<w:t>{'abcdefghij'[i % 10]}</w:t></w:r>"
                   for i in range(runs))
    xml = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document {_W}>'
           f"<w:body><w:p>{body}</w:p></w:body></w:document>")
    return replace_part(docx_bytes(docx_document()), "word/document.xml", xml.encode())


def replace_part(archive: bytes, name: str, data: bytes) -> bytes:
    """A zipped document (.docx, .odt) with the part `name` replaced by `data`."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(archive)) as src, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, data if info.filename == name else src.read(info))
    return out.getvalue()


def entity_expansion_xliff(levels: int = 9) -> bytes:
    """"Billion laughs": each entity ten of the one before, the last one used in a source."""
    decls = ['<!ENTITY e0 "lol">'] + [
        f'<!ENTITY e{k} "{("&e" + str(k - 1) + ";") * 10}">' for k in range(1, levels + 1)]
    return (f'<?xml version="1.0"?><!DOCTYPE xliff [{"".join(decls)}]>'
            '<xliff version="1.2"><file source-language="en" target-language="de" '
            f'datatype="plaintext" original="x"><body><trans-unit id="1"><source>&e{levels};'
            "</source></trans-unit></body></file></xliff>").encode()


def srt_of_cues(cues: int) -> bytes:
    return "".join(f"{i + 1}\n00:00:{i % 60:02d},000 --> 00:00:{i % 60:02d},500\ncue {i}.\n\n"
                   for i in range(cues)).encode()


def txt_of_lines(lines: int) -> bytes:
    return "".join(f"line {i} of the file\n" for i in range(lines)).encode()


def one_paragraph(words: int) -> bytes:
    """One paragraph of `words` words and no sentence end."""
    return " ".join(["the red car sees a dog and"] * (words // 7)).encode()


def truncated_zip() -> bytes:
    data = docx_bytes(docx_document())
    return data[: len(data) // 2]


def paragraphs(fmt: str, n: int) -> bytes:
    """A document of format `fmt` (.docx, .pptx, .odt, .html, .md, .srt, .xliff) holding `n`
    short paragraphs (cues, units), each its own segment: "Line k has a few words.", with a
    bold word in the formats that have one."""
    lines = [f"Line {k} has a few words." for k in range(n)]
    if fmt == "docx":
        document = docx_document()
        for line in lines:
            document.add_paragraph(line).add_run(" bold").bold = True
        return docx_bytes(document)
    if fmt == "pptx":
        runs = "".join(f'<a:p><a:r><a:t>{line} </a:t></a:r><a:r><a:rPr b="1"/><a:t>bold</a:t>'
                       "</a:r></a:p>" for line in lines)
        with zipfile.ZipFile(io.BytesIO(pptx_file())) as archive:
            slide = archive.read("ppt/slides/slide1.xml").decode()
        return replace_part(pptx_file(), "ppt/slides/slide1.xml",
                            slide.replace("<a:p>", runs + "<a:p>", 1).encode())
    if fmt == "odt":
        with zipfile.ZipFile(io.BytesIO(odt_file())) as archive:
            content = archive.read("content.xml").decode()
        body = "".join(f"<text:p>{line}</text:p>" for line in lines)
        return replace_part(odt_file(), "content.xml",
                            content.replace("</office:text>", body + "</office:text>").encode())
    if fmt == "html":
        return ("<html><body>" + "".join(f"<p>{line} <b>bold</b></p>\n" for line in lines)
                + "</body></html>").encode()
    if fmt == "md":
        return "".join(f"{line} **bold**\n\n" for line in lines).encode()
    if fmt == "srt":
        return "".join(f"{k + 1}\n00:00:{k % 60:02d},000 --> 00:00:{k % 60:02d},500\n{line}\n\n"
                       for k, line in enumerate(lines)).encode()
    if fmt == "xliff":
        units = "".join(f'<trans-unit id="{k}"><source>{line} <g id="b">bold</g></source>'
                        "</trans-unit>" for k, line in enumerate(lines))
        return ('<?xml version="1.0"?><xliff version="1.2"><file source-language="en" '
                'target-language="de" datatype="plaintext" original="x"><body>'
                f"{units}</body></file></xliff>").encode()
    raise ValueError(fmt)
