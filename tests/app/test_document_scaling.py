"""Each step of reading, translating and writing a document costs time linear in its input (or
n log n): a step that cost the square of a paragraph's runs, links or line breaks held its
thread, and in pure Python the GIL, for minutes on a hostile or merely large upload
(`python -m bench.scaling` measures every reader and writer). Each test counts the work of
such a step, or, where the work is copying strings, gives it an input the square of whose size
takes the old code hours, under a deadline that linear code meets a hundred times over."""

from __future__ import annotations

import pytest

from app.documents import html_file

# seconds for a test whose step the old code took hours over (the whole test, linear, takes one)
DEADLINE = 60


@pytest.mark.timeout(DEADLINE)
def test_many_attribute_values_are_written_back_in_one_pass():
    """Each translated alt (title ...) value was written into its part by copying the whole
    part again (a gallery of 100,000 pictures: the square of its size), or, in a translated
    block, by searching the whole block again for its tag."""
    n = 100_000
    tags = [f'<img src="p{k}.png" alt="Picture {k}">' for k in range(n)]
    gallery = "".join(tags)  # markup only: the part stays as it was in the source
    block = " ".join(f"word {t}" for t in tags)  # a translated block, its tags put back
    source = [gallery, "<p>", block, "</p>"]
    parts = [gallery, "<p>", block.replace("word", "drow"), "</p>"]
    values, offset = [], 0  # each tag's value, where the tag is in the source
    for chunk in source:
        pos = 0
        for tag in tags if chunk in (gallery, block) else ():
            pos = chunk.index(tag, pos)
            value = tag.index("Picture")
            values.append(html_file.Value(tag, offset + pos, (value, len(tag) - 2), '"'))
            pos += len(tag)
        offset += len(chunk)
    out = html_file.written(source, parts, values, [f"Bild {k}" for k in range(2 * n)])
    assert out[0] == "".join(f'<img src="p{k}.png" alt="Bild {k}">' for k in range(n))
    assert out[2] == " ".join(f'drow <img src="p{k}.png" alt="Bild {n + k}">'
                              for k in range(n))
    assert out[1::2] == ["<p>", "</p>"]


@pytest.mark.timeout(DEADLINE)
def test_a_page_is_cut_into_runs_each_joined_once():
    """A run of markup (a minified page's empty elements, an inline drawing's paths) grew by
    one copy of itself per tag; so did one made of inline tags alone moved out of a text
    between block tags."""
    n = 500_000
    source = '<div class="icon"></div>' * n
    events = [(k * 12, False) for k in range(2 * n)]  # a start or end tag each 12 characters
    assert html_file._runs(source, [(0, False), *events, (len(source), False)]) == [
        (source, False)]
    parts = [("<div>", False), ("</b>", True)] * n  # texts that are closing tags only
    assert html_file._outside(parts) == [("<div></b>" * n, False)]
    assert html_file.blocks("") == ([], []) and html_file.blocks("<p></p>") == (
        [("<p></p>", False)], [])


@pytest.mark.timeout(DEADLINE)
def test_text_without_letters_is_kept_as_one_part_joined_once():
    """Lines without letters (a table of numbers in a text file, an HTML table's numbers
    between its tags) are kept verbatim, each merged into the part before it by copying that
    part again."""
    from app.text.segment import segment_html, segment_text

    row = " ".join(f"{k:>9}" for k in range(10))
    text = "Numbers:\n" + f"{row}\n" * 100_000
    seg = segment_text(text)
    assert seg.parts == ["Numbers:", text[len("Numbers:"):]] and seg.targets == [0]
    page = "<p>Numbers</p><table>" + "<tr><td>1</td><td>2</td></tr>" * 200_000 + "</table>"
    seg = segment_html(page)
    assert seg.parts == ["<p>", "Numbers", page[len("<p>Numbers"):]] and seg.targets == [1]


def test_a_markdown_row_is_cut_into_cells_once(monkeypatch):
    """Each cell of a table row cut the whole row at its pipes again, to read the cell's text
    and to write its translation: a row of thousands of cells cost the square of its size."""
    from app.documents import markdown_file, translate_document

    read = []
    pieces = markdown_file._pieces
    monkeypatch.setattr(markdown_file, "_pieces",
                        lambda line, *args: read.append(len(line)) or pieces(line, *args))
    n = 2000
    row = "|" + "|".join(f" cell {c} " for c in range(n)) + "|\n"
    table = row + "|" + "---|" * n + "\n" + row
    out = translate_document(table.encode(), "md", lambda texts: [t.upper() for t in texts])
    assert out.decode() == row.upper() + "|" + "---|" * n + "\n" + row.upper()
    assert sum(read) <= 4 * len(table), sum(read)  # each row cut once to read, once to write


@pytest.mark.timeout(DEADLINE)
def test_emphasis_is_checked_against_the_links_of_its_paragraph_in_one_sweep():
    """Each emphasis pair was compared with every link of its paragraph (emphasis that crosses
    a link stays text): a paragraph of thousands of both cost their product."""
    from app.documents import markdown_file

    n = 40_000
    text = " ".join(f"See [page {k}](p{k}.md) and **bold {k}** words." for k in range(n))
    crossing = "a *b [c* d](x.md) e"  # the emphasis crosses the link: it stays text
    tagged, markers = markdown_file._emphasis(f"{text} {crossing}")
    assert len(markers) == 2 * n + 1 and tagged.count("<g id=") == 2 * n + 1
    assert tagged.endswith(f' a *b <g id="{2 * n + 1}">c* d</g> e')


@pytest.mark.timeout(DEADLINE)
def test_a_docx_paragraph_of_many_links_is_written_in_time_linear_in_it():
    """Writing each piece of a link's text asked its paragraph how many children it had so
    far (lxml counts them one by one): a paragraph of thousands of links cost their square."""
    from app.documents import extract, rebuild
    from tests.app.hostile import replace_part
    from tests.app.samples import docx_bytes, docx_document

    n = 80_000
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    r = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    body = "".join(f'<w:r><w:t xml:space="preserve">see </w:t></w:r><w:hyperlink r:id="rId{k}">'
                   f"<w:r><w:t>link {k}</w:t></w:r></w:hyperlink>" for k in range(n))
    xml = (f'<w:document xmlns:w="{w}" xmlns:r="{r}"><w:body><w:p>{body}</w:p></w:body>'
           "</w:document>")
    data = replace_part(docx_bytes(docx_document()), "word/document.xml", xml.encode())
    doc = extract(data, "docx")
    translated = [s.replace("link", "Verweis") for s in doc.segments]
    assert extract(rebuild(doc, translated), "docx").segments == translated
    assert translated[0].count("<g id=") == n


def test_note_marks_opening_a_docx_paragraph_are_set_aside_at_once(monkeypatch):
    """A note's own number at the start of its paragraph stays there; each such mark was taken
    off the front of the paragraph's list of children, moving all the others: counted here
    (the children the paragraph's list moved), the square of the marks."""
    from docx.oxml.parser import parse_xml

    from app.documents import docx_file

    moved = []

    class Children(list):
        def pop(self, index=-1):
            moved.append(len(self) - 1 if index == 0 else 0)
            return super().pop(index)

    fields = docx_file._fields
    monkeypatch.setattr(docx_file, "_fields", lambda children: Children(fields(children)))
    n = 20_000
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    p = parse_xml(f'<w:p xmlns:w="{w}">' + "<w:r><w:footnoteRef/></w:r>" * n
                  + "<w:r><w:t>The note.</w:t></w:r></w:p>")
    markup, (children, nodes, base) = docx_file._encode(p)
    assert markup == "The note." and len(children) == 1 and base is children[0]
    assert sum(moved) <= n, sum(moved)


@pytest.mark.timeout(DEADLINE)
def test_xliff_native_code_goes_back_to_its_target_in_one_pass():
    """Each code element of a target took its native code from the first of the source's
    elements of its name and id not used yet, taken off the front of their list (moving all
    the others): a unit of many placeholders without ids (or with the same one) cost their
    square. Here the elements are stand-ins with what the step reads of them."""
    from app.documents import xliff_file

    PH = f"{{{xliff_file._NS12}}}ph"

    class Code:
        __slots__ = ("tag", "text", "id", "children")

        def __init__(self, text: str | None) -> None:
            self.tag, self.text, self.id, self.children = PH, text, None, ()

        def get(self, name: str) -> None:
            return self.id

        def __iter__(self):
            return iter(self.children)

        def extend(self, more) -> None:
            self.children = (*self.children, *more)

    class Unit:
        def __init__(self, codes: list[Code]) -> None:
            self.codes = codes

        def iter(self, *tags):
            return iter(self.codes)

    n = 2_000_000
    source = Unit([Code(f"&lt;br{k}/&gt;") for k in range(n)])
    target = Unit([Code(None) for _ in range(n)])
    xliff_file._with_code(target, source)
    assert [c.text for c in target.codes[:3]] == ["&lt;br0/&gt;", "&lt;br1/&gt;", "&lt;br2/&gt;"]
    assert target.codes[-1].text == f"&lt;br{n - 1}/&gt;"


@pytest.mark.timeout(DEADLINE)
def test_end_tags_find_their_start_tags_without_going_through_the_others():
    """An end tag looked for its start tag through every tag left open before it, most recent
    first: a paragraph of many tags never closed (<img>, <br>) and end tags without a start
    (stray </b>) cost their product."""
    from app.text import protect

    n = 200_000
    tags = ['<img src="a.png">'] * n + ["</b>"] * n + ["<i>", "</i>"]
    spans, at = [], 0
    for tag in tags:
        spans.append(protect.Span(at, at + len(tag), "tag"))
        at += len(tag) + 1
    assert protect._tag_pairs(spans, tuple(tags)) == ((2 * n, 2 * n + 1),)


@pytest.mark.timeout(DEADLINE)
def test_runs_that_look_alike_are_joined_once():
    """Runs after each other that look alike (not the paragraph's base) are one group; each
    was added to the group's text by copying the text so far."""
    from app.documents.inline import Runs, encode

    n = 2_000_000
    runs = Runs([("x" * 3 * n, "plain"), ("ab" * n, "italic")])
    runs.run("p", "x" * 3 * n, "plain")
    for _ in range(n):
        runs.run("r", "ab", "italic")
    assert encode(runs.items) == "x" * 3 * n + '<g id="1">' + "ab" * n + "</g>"
    assert len(runs.nodes) == n + 1 and runs.base_run == "p"


def test_a_markdown_table_is_read_for_its_rows_once():
    """Each separator line in a table (a table whose every other line reads as one) read the
    rest of the table again for its rows: counted here, the lines looked at."""
    from app.documents import markdown_file
    from app.documents.txt_file import split_lines

    looked = []

    class Lines(list):
        def __getitem__(self, i):
            looked.append(i)
            return super().__getitem__(i)

    n = 2000
    lines, _ = split_lines("| a | b |\n|---|---|\n" * n)
    rows = markdown_file._rows(Lines(lines))
    assert set(rows) == set(range(0, 4 * n, 2)) - {2} and set(rows.values()) == {"row"}
    assert len(looked) <= 8 * len(lines), len(looked)


@pytest.mark.timeout(DEADLINE)
def test_a_sentence_runs_on_over_many_line_breaks_in_time_linear_in_them():
    """Whether a sentence runs on over a <br> was read from all the text before it since the
    block's last break that ended one: a block of thousands of lines that one sentence runs
    on over (a poem, a text file put into a page with a <br> per line) read its text again
    for each, the square of its size."""
    from app.text.protect import join_breaks

    n = 100_000
    for lines in ([f"the line {k} of the poem &amp; its words goes on" for k in range(n)],
                  ["`make` runs"] + [f"the line {k} goes on" for k in range(n)],  # code first
                  ["words"] * n):  # no space at all
        pieces = [piece for line in lines for piece in (line, "<br>")][:-1]
        parts = [(piece, k % 2 == 0) for k, piece in enumerate(pieces)]
        assert join_breaks(parts) == [("<br>".join(lines), True)]


def test_lines_join_exactly_where_the_text_before_each_break_read_whole_says():
    """join_breaks keeps what it reads of the text before a break as the text grows; it joins
    exactly where joins_at_break, reading that text whole, says (random texts of words,
    blanks, character references cut anywhere, spans and what starts them, punctuation)."""
    import random

    from app.text.protect import LINE_BREAK_RE, join_breaks, joins_at_break

    def whole(parts):
        out = []
        for chunk, kind in parts:
            if (kind and len(out) >= 2 and out[-2][1] and not out[-1][1]
                    and LINE_BREAK_RE.fullmatch(out[-1][0])
                    and joins_at_break(out[-2][0], chunk)):
                brk = out.pop()[0]
                out[-1] = (out[-1][0] + brk + chunk, True)
            else:
                out.append((chunk, kind))
        return out

    words = ["a", "word", "X", " ", " ", "\n", ".", ":", ",", "&", "&am", "p;", "&amp;", "&nbsp;",
             "&#", "&#x", "4", "1f", ";", "&#96;", "&lt;", "<", "`", "]", "[", "(", ")", "%",
             "%(n) d", "{x}", "http://", "x.org", "a@b.org", "🎉", "<b>", "</b>", "é"]
    rng = random.Random(5)
    for _ in range(3000):
        texts = ["".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
                 for _ in range(rng.randint(1, 12))]
        parts = [(p, k % 2 == 0) for k, p in enumerate(
            [x for t in texts for x in (rng.choice(["", "a"]) + t, "<br>")][:-1])]
        assert join_breaks(parts) == whole(parts), parts


def test_a_catalog_message_written_over_many_lines_is_read_in_time_linear_in_them(monkeypatch):
    """polib adds each line of a message written over several to the message read so far, by
    copying it: a message of thousands of lines cost their square. Counted here: the
    characters of the message copied to add a line."""
    import polib

    from app.documents import extract, rebuild

    copied = []
    handle = polib._POFileParser.handle_mc

    def counted(parser):
        entry = parser.current_entry
        copied.append(len(entry.msgid) + len(entry.msgstr) + len(entry.msgctxt or ""))
        return handle(parser)

    monkeypatch.setattr(polib._POFileParser, "handle_mc", counted)
    n = 20_000
    lines = "".join(f'"line {k} of the message. "\n' for k in range(n))
    po = ('msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
          f'#: a.c:1\nmsgid ""\n{lines}msgstr ""\n').encode()
    doc = extract(po, "po")
    assert doc.segments == ["".join(f"line {k} of the message. " for k in range(n))]
    assert sum(copied) <= 10 * len(po), sum(copied)
    out = rebuild(doc, ["Übersetzt."]).decode()
    assert out.endswith('line 19999 of the message. "\nmsgstr "Übersetzt."\n')


@pytest.mark.timeout(DEADLINE)
def test_spaces_a_translation_put_inside_many_tag_pairs_go_in_one_pass():
    """A space the model put just inside a tag pair that hugged its words in the source goes
    ("<b> word </b>" -> "<b>word</b>"); each went by copying the whole translation and moving
    every mask's place after it: a paragraph of many such pairs cost their square."""
    import re

    from app.text.protect import mask, unmask

    n = 100_000
    text = " ".join(f"the <b>word{k % 10}</b> here" for k in range(n))
    masked = mask(text)
    spaced = re.sub(r"(\{\d+\})(\w+)(\{\d+\})", r"\1 \2 \3", masked.text)
    assert spaced.count(" ") == masked.text.count(" ") + 2 * n
    assert unmask(masked, spaced) == text


def test_heads_read_whole_to_join_lines_are_bounded(monkeypatch):
    """A head whose first word comes after thousands of spans (URLs) is read whole at each
    break to know whether a sentence runs on: thousands of short lines after it cost the
    product (hours for a large upload). What join_breaks reads of heads whole is bounded;
    past it the lines are kept apart, each a run of its own, none lost."""
    from app.text import protect

    read = []
    has_words = protect.has_words
    monkeypatch.setattr(protect, "has_words", lambda text, *a: read.append(len(text))
                        or has_words(text, *a))
    head = " ".join(f"http://x{k}.org" for k in range(1500)) + " word"
    lines = [head] + [f"see www.example{k}.org and more" for k in range(2000)]
    pieces = [piece for line in lines for piece in (line, "<br>")][:-1]
    parts = [(piece, k % 2 == 0) for k, piece in enumerate(pieces)]
    bound = max(protect._JOIN_WORK_FLOOR,
                protect._JOIN_WORK_PER_CHARACTER * sum(map(len, pieces)))
    out = protect.join_breaks(parts)
    assert sum(read) <= bound + len("<br>".join(lines)), sum(read)
    assert "".join(chunk for chunk, _ in out) == "".join(pieces)
    assert 1 < len(out) < len(parts)  # joined while the bound lasted, then kept apart


@pytest.mark.timeout(DEADLINE)
def test_words_of_software_are_found_in_time_linear_in_a_word():
    """A word of many "_" (or dots, slashes) is read once: the identifier's pattern went back
    over every "_" of it for the letter or digit it must end with, the square of its size
    (400,000 characters: minutes)."""
    from app.text.protect import find_spans

    n = 200_000
    whole = ["a_" * n + "b", "/a" * n + "/", "x" + "-." * n + "py"]  # one span each
    none = ["a_" * n, "a." * n + "x", "A" + "a" * n + "_" + "a" * n, ".json" * n]
    for text in whole + none:
        found = [text[s.start : s.end] for s in find_spans(text)]
        assert found == ([text] if text in whole else [])
    # quantities and command lines: amounts that never reach a unit, a command of many words
    for text in ["1," * n + "000 g", "1." * n + " kg", "1 " * n + "x", "1/1" * n, "1-" * n]:
        assert [s.kind for s in find_spans(text)] == []
    commands = find_spans("sudo " * n)
    assert commands and {s.kind for s in commands} == {"command"}
