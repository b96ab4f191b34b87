"""`nmt translate-file` (app.documents.cli) with the shipped en-de bundle: real ONNX Runtime."""

import io
from pathlib import Path

import docx
import polib
import pytest

from app.documents.cli import main, output_path
from app.engine import Translator
from app.text.segment import segment

BUNDLES = Path(__file__).resolve().parents[2] / "bundles"
ARGS = ["--bundles", str(BUNDLES), "--threads", "1", "--no-progress"]


def test_translates_a_catalog_keeping_placeholders_and_metadata(tmp_path):
    catalog = polib.POFile()
    catalog.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    catalog.append(polib.POEntry(msgid="Could not open file %s: %s", flags=["c-format"],
                                 occurrences=[("main.c", "10")]))
    catalog.append(polib.POEntry(msgid="Save the document", msgctxt="menu"))
    src = tmp_path / "app.po"
    catalog.save(str(src))
    assert main([str(src), "-t", "de", *ARGS]) == 0
    out = polib.pofile(str(output_path(src, "de")))
    first, second = out
    assert first.msgstr.count("%s") == 2 and first.msgstr != first.msgid
    assert first.flags == ["c-format"] and first.occurrences == [("main.c", "10")]
    assert second.msgctxt == "menu" and second.msgstr and second.msgstr != second.msgid


def test_translates_a_docx_keeping_runs(tmp_path):
    document = docx.Document()
    p = document.add_paragraph("Click ")
    p.add_run("Save").bold = True
    p.add_run(" to keep your changes.")
    src, out = tmp_path / "help.docx", tmp_path / "hilfe.docx"
    document.save(str(src))
    assert main([str(src), "-t", "de", "-o", str(out), *ARGS]) == 0
    para = docx.Document(io.BytesIO(out.read_bytes())).paragraphs[0]
    assert [bool(r.bold) for r in para.runs].count(True) == 1
    assert para.text != "Click Save to keep your changes." and para.text.strip()


def test_bad_input_exits_2_with_a_message(tmp_path, capsys):
    src = tmp_path / "notes.txt"
    src.write_text("Hello")
    assert main([str(src), "-t", "fr", *ARGS]) == 2
    assert "no bundle translates *->fr" in capsys.readouterr().err
    assert main([str(tmp_path / "setup.exe"), "-t", "de", *ARGS]) == 2
    assert "unsupported file format .exe" in capsys.readouterr().err


def test_nmt_has_the_translate_file_command(tmp_path):
    from app.cli import main as nmt

    src = tmp_path / "notes.txt"
    src.write_text("Open the file.\n\nClose the window.\n")
    assert nmt(["translate-file", str(src), "-t", "de", *ARGS]) == 0
    out = output_path(src, "de").read_text()
    assert out.count("\n\n") == 1 and out != src.read_text()


def test_a_sentence_longer_than_the_encoder_is_cut_not_truncated(tmp_path, tiny_bundle):
    translator = Translator.from_dir(tiny_bundle, intra_threads=1)
    words = " ".join(["the red car sees a dog and"] * 12)  # no sentence end, > 63 tokens
    assert translator.count_tokens(words) > translator.max_source_tokens
    src = tmp_path / "long.txt"
    src.write_text(words)
    assert main([str(src), "-t", "de", "--bundle", str(tiny_bundle), *ARGS]) == 0
    seg = segment(words)
    seg.refine(lambda s: translator.count_tokens(s) <= translator.max_source_tokens)
    assert len(seg.sentences) >= 2
    pieces = [r.text for r in translator.translate_batch(seg.sentences)]
    assert output_path(src, "de").read_text() == seg.rejoin(pieces)


def test_the_help_names_every_format_the_command_reads(capsys):
    from app.cli import main as nmt
    from app.documents import FORMATS

    for args in (["--help"], ["translate-file", "--help"]):
        with pytest.raises(SystemExit):
            nmt(args)
        words = capsys.readouterr().out.replace("(", " ").replace(")", " ").split()
        assert sorted(w for w in words if w[1:] in FORMATS) == sorted(f".{x}" for x in FORMATS)
