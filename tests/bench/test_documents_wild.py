"""bench.documents_wild with its fake translator: files of the text formats come through
whole, their shapes read again."""

from __future__ import annotations

import json

from bench import documents_wild


def test_text_formats_come_through_whole(tmp_path):
    # reading a shape back called a decoder the documents package no longer has: every HTML,
    # Markdown, subtitle and text file was a problem
    files = tmp_path / "files"
    files.mkdir()
    (files / "page.html").write_bytes(
        '<html><head><meta charset="windows-1252"></head><body><p>Sign in to <b>Acme</b> '
        'today, caf\xe9 owner.</p></body></html>'.encode("cp1252"))
    (files / "notes.md").write_text("# Notes\n\nRead the `README` first.\n")
    (files / "talk.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nHello there.\n")
    (files / "plain.txt").write_text("One line of text.\n")
    out = tmp_path / "rows.json"
    assert documents_wild.main([str(files), "--json", str(out)]) == 0
    assert {r["file"]: r["status"] for r in json.loads(out.read_text())} == dict.fromkeys(
        ["notes.md", "page.html", "plain.txt", "talk.srt"], "ok")
