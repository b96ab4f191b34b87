"""app.documents: each format round-trips through a fake translator with its structure intact.

The fake reverses every run of two or more letters, so a test can tell translated text from
copied text, and leaves everything else (masks, placeholders, punctuation) alone. Documents are
built here with the same libraries that read them (the documents extra, which dev installs);
the tests compare structure, not wording."""

import copy
import functools
import io
import random
import re
import zipfile
from pathlib import Path

import docx
import polib
import pytest
import srt
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.packuri import PackURI
from docx.opc.part import Part, XmlPart
from docx.oxml.ns import nsmap, qn
from docx.shared import Pt
from lxml import etree
from odf import draw, opendocument, teletype
from odf import text as odftext

from app.documents import (
    DocumentTooLarge,
    InvalidDocument,
    Limits,
    UnsupportedFormat,
    docx_file,
    extract,
    format_of,
    front_matter,
    html_file,
    markdown_file,
    srt_file,
    translate_document,
    translate_segments,
    xliff_file,
)
from app.documents import odt_file as odt_reader
from app.documents import pptx_file as pptx_reader
from app.errors import InvalidInput, TooLarge, UnsupportedMediaType
from bench.fuzz_documents import run_case
from tests.app import hostile
from tests.app.hostile import entity_expansion_xliff, replace_part
from tests.app.samples import (
    docx_bytes,
    docx_document,
    epub_bytes,
    epub_parts,
    odp_file,
    odt_file,
    pptx_file,
)

SHIPPED = Path(__file__).resolve().parents[2] / "bundles" / "en-de"

CALLS: list[list[str]] = []


def fake(texts: list[str]) -> list[str]:
    CALLS.append(list(texts))
    return [re.sub(r"[^\W\d_]{2,}", lambda m: m.group()[::-1], t) for t in texts]


def run(data: bytes, fmt: str) -> bytes:
    return translate_document(data, fmt, fake)


def test_txt_keeps_lines_indentation_and_line_endings():
    src = "Hello world.\r\n\r\n    Indented line here\nOpen %s now.  Then close it\n"
    out = run(src.encode(), "txt").decode()
    assert out == "olleH dlrow.\r\n\r\n    detnednI enil ereh\nnepO %s won.  nehT esolc ti\n"
    assert CALLS[-1] == ["Hello world.", "Indented line here", "Open %s now.", "Then close it"]


def test_txt_with_windows_line_breaks_keeps_wrapped_sentences_whole():
    # the paragraph-break pattern read one \r\n as \r and \n, two line breaks: every line of a
    # Windows file was a paragraph of its own, and a wrapped sentence went out in halves
    src = "This sentence is wrapped at a width and it\r\ncontinues on the next line.\r\n\r\nNext."
    assert extract(src.encode(), "txt").segments == [
        "This sentence is wrapped at a width and it\r\ncontinues on the next line.", "Next."]
    run(src.encode(), "txt")
    assert CALLS[-1] == ["This sentence is wrapped at a width and it continues on the next line.",
                         "Next."]
    assert extract(b"A line\r\rB line\r", "txt").segments == ["A line", "B line"]


def test_translate_segments_reports_progress_and_escapes_markup():
    seen = []
    out = translate_segments(
        ["Fish &amp; chips are <b>good</b>.", "Tom said so. Ann agreed."],
        fake, markup=True, batch_size=2, progress=lambda done, total: seen.append((done, total)),
    )
    assert out == ["hsiF &amp; spihc era <b>doog</b>.", "moT dias os. nnA deerga."]
    assert seen == [(0, 3), (2, 3), (3, 3)]


def test_sentences_the_model_cannot_take_whole_are_cut_into_runs_that_fit():
    words = "one two three four five six seven eight"
    out = translate_segments([f"{words}.  Short one.", "tiny"], fake,
                             fits=lambda s: len(s.split()) <= 3)
    assert CALLS[-1] == ["one two three", "four five six", "seven eight.", "Short one.", "tiny"]
    assert out == ["eno owt eerht ruof evif xis neves thgie.  trohS eno.", "ynit"]


def test_html_keeps_inline_tags_inside_sentences_and_skips_code():
    src = (
        '<!DOCTYPE html><html><head><title>My page</title><style>p {color: red}</style></head>'
        '<body><h1 class="x">Main title</h1><p>Click <a href="/go">this link</a> to go.</p>'
        '<pre>keep this code</pre><p translate="no">Brand name</p><ul><li>One item</li></ul>'
        '</body></html>'
    )
    doc = extract(src.encode(), "html")
    assert doc.segments == ["My page", "Main title", 'Click <a href="/go">this link</a> to go.',
                            "One item"]
    out = run(src.encode(), "html").decode()
    assert '<p>kcilC <a href="/go">siht knil</a> ot og.</p>' in out
    assert "<pre>keep this code</pre>" in out and "<style>p {color: red}</style>" in out
    assert '<p translate="no">Brand name</p>' in out
    assert '<h1 class="x">niaM eltit</h1>' in out


def test_html_inline_code_stays_in_its_sentence_as_one_mask():
    # code, kbd, samp, tt and var cut the text they stood in: "Run" and "to build the program."
    # went to the model apart, and came back as two broken pieces (verb place, capitals)
    src = ("<p>Run <code>make install</code> to build the <tt>nmt</tt> program, then press "
           "<kbd>Enter</kbd>.</p>")
    assert extract(src.encode(), "html").segments == [src[3:-4]]
    out = run(src.encode(), "html").decode()
    assert CALLS[-1] == ["Run {1} to build the {2} program, then press {3}."]
    assert out == ("<p>nuR <code>make install</code> ot dliub eht <tt>nmt</tt> margorp, neht "
                   "sserp <kbd>Enter</kbd>.</p>")


def test_html_inline_code_of_sphinx_comes_back_byte_for_byte():
    # Sphinx writes code words in <span class="pre"> inside <code>, a link around it, and a
    # compound keystroke as <kbd> in <kbd>; a character reference in code stays as written
    code = ('<code class="docutils literal notranslate"><span class="pre">None</span> '
            '<span class="pre">&quot;x&#39;&gt;</span></code>')
    link = ('<a class="reference internal" href="#f"><code class="xref py py-func docutils '
            'literal notranslate"><span class="pre">f()</span></code></a>')
    keys = ('<kbd class="kbd compound docutils literal notranslate"><kbd class="kbd docutils '
            'literal notranslate">C</kbd>-<kbd class="kbd docutils literal notranslate">d</kbd>'
            '</kbd>')
    src = f"<p>It returns {code} when {link} fails; press {keys} to quit.</p>"
    assert extract(src.encode(), "html").segments == [src[3:-4]]
    # the words around the code are one sentence, each code element one mask (the link's pair
    # is carried over: app.text.tags)
    out = run(src.encode(), "html").decode()
    assert CALLS[-1][0] == "It returns {1} when {3} fails; press {5} to quit."
    assert out == f"<p>tI snruter {code} nehw {link} sliaf; sserp {keys} ot tiuq.</p>"


def test_html_anchors_next_to_inline_code_stay_next_to_it():
    # Sphinx's index targets (empty spans) before code in a sentence were put back by the
    # relative place of the code's word: each moved over "or" to the other one's place
    src = ('<p>the variables <span class="target" id="i5"></span><code>IDLE</code> or <span '
           'class="target" id="i6"></span><a href="x"><code>PY</code></a>.</p>')
    out = run(src.encode(), "html").decode()
    assert out == src.replace("the variables", "eht selbairav").replace(" or ", " ro ")


def test_html_api_signatures_of_sphinx_are_copied():
    # a signature is code in <span class="pre">, not <code>: it went to the model as text
    # ("None" came back "Kein", the spans on other words); its description is translated
    sig = ('<dt class="sig sig-object py" id="json.dump">\n<span class="sig-prename '
           'descclassname"><span class="pre">json.</span></span><span class="sig-name descname">'
           '<span class="pre">dump</span></span><span class="sig-paren">(</span><em class="sig-'
           'param"><span class="n"><span class="pre">obj</span></span></em>, <em class="sig-param">'
           '<span class="n"><span class="pre">cls</span></span><span class="o"><span class="pre">='
           '</span></span><span class="default_value"><span class="pre">None</span></span></em>'
           '<span class="sig-paren">)</span><a class="headerlink" href="#json.dump" title="Link '
           'to this definition">¶</a></dt>')
    src = f'<dl class="py function">{sig}<dd><p>Write the object to a file.</p></dd></dl>'
    assert extract(src.encode(), "html").segments == ["Write the object to a file."]
    assert run(src.encode(), "html").decode() == src.replace(
        "Write the object to a file.", "etirW eht tcejbo ot a elif.")


def test_html_code_that_is_a_blocks_whole_text_or_in_pre_is_copied():
    # a code element alone in its block (an option in a table, a name in a list) has no words
    # to send; code in <pre>, in translate="no", and one never closed stay verbatim as before
    src = ("<ul><li><code>--help</code></li><li> <kbd>q</kbd>, <kbd>Esc</kbd> </li></ul>"
           "<pre><code>make install</code></pre><p translate=\"no\">Use <code>x</code> now</p>"
           "<table><tr><td><var>n</var></td><td>Lines <em>to</em> show</td></tr></table>"
           "<p>Then <code>never closed</p><p>and the rest</p>")
    assert extract(src.encode(), "html").segments == ["Lines <em>to</em> show", "Then"]
    out = run(src.encode(), "html").decode()
    assert out == src.replace("Lines <em>to</em> show", "seniL <em>ot</em> wohs").replace(
        "Then", "nehT")


def test_html_inline_elements_not_to_translate_stay_in_their_sentence_as_one_mask():
    # translate="no" and class notranslate on an inline element (a brand or product name)
    # cut the text it stood in: "Sign in to" and "with your account." went to the model apart
    acme = '<span translate="no">Acme <b>Cloud</b></span>'
    box = "<a href='/box' class='brand notranslate' title='Our mail'>Mail Box</a>"
    src = f'<p>Sign in to {acme} with your account.</p><p>Each <B Translate=NO>Box</b> sends.</p>'
    src += f'<p>Open {box} now.</p>'
    assert extract(src.encode(), "html").segments == [
        f"Sign in to {acme} with your account.", "Each <B Translate=NO>Box</b> sends.",
        f"Open {box} now."]  # the title in the kept link is no segment
    out = run(src.encode(), "html").decode()
    assert CALLS[-1] == ["Sign in to {1} with your account.", "Each {1} sends.", "Open {1} now."]
    assert out == (f"<p>ngiS ni ot {acme} htiw ruoy tnuocca.</p><p>hcaE <B Translate=NO>Box</b> "
                   f"sdnes.</p><p>nepO {box} won.</p>")


def test_html_kept_inline_elements_alone_nested_or_translate_yes_inside_are_copied():
    # alone in its block it has no words to send; translate="yes" inside one is kept with it;
    # one nested in its own name deeper than protect reads stays verbatim (it cuts the text);
    # the title of a tag in it stays as written where the same tag outside is translated
    src = ('<ul><li><span class="notranslate">Acme</span></li><li>Use <span translate="no">'
           'Acme <span translate="yes">Cloud</span></span> daily.</li><li>Try <i translate="no">'
           '<i><i><i>Deep</i></i></i></i> here.</li></ul><p>The <abbr title="Cloud Service">CS'
           '</abbr> and <b translate="no"><abbr title="Cloud Service">CS</abbr></b> differ.</p>')
    assert extract(src.encode(), "html").segments == [
        'Use <span translate="no">Acme <span translate="yes">Cloud</span></span> daily.',
        "Try", "here.", src[src.index("The <abbr") : -4], "Cloud Service"]
    out = run(src.encode(), "html").decode()
    assert out == src.replace("Use <", "esU <").replace(" daily", " yliad").replace(
        "Try", "yrT").replace("here.", "ereh.").replace("The <abbr title=\"Cloud Service\">CS",
        "ehT <abbr title=\"duolC ecivreS\">SC").replace("and <b", "dna <b").replace(
        "differ", "reffid")


def test_html_text_around_code_keeps_its_tags():
    # code cut a sentence's text (Sphinx: "The <a><code>range()</code></a> function"): the
    # tags closed after it went to the model at the next text's start, or those opened before
    # it at the text's end, and came back on the other side of words, which went into the code
    src = '<h2>The <a href="x"><code>range()</code></a> function</h2>'
    assert extract(src.encode(), "html").segments == [src[4:-5]]
    backwards = translate_document(src.encode(), "html", lambda texts: [
        " ".join(reversed(t.split())) for t in texts]).decode()
    assert backwards == '<h2>function <a href="x"><code>range()</code></a> The</h2>'


def test_html_blocks_of_only_whitespace_references_are_not_segments():
    # a table cell or a paragraph holding only &nbsp; (a spacer) was a segment: its escaped
    # form has letters ("nbsp"); it counted against the limits and came back empty (the
    # no-break space stripped as the space around a sentence), so the spacer was gone
    src = ("<table><tr><td>&nbsp;</td><td>&nbsp;&nbsp;</td><td>&#xA0;&ensp;&thinsp;</td>"
           "<td>&copy; 2024</td><td>Open&nbsp;files</td></tr></table><p> &nbsp; </p>")
    assert extract(src.encode(), "html").segments == ["Open&nbsp;files"]
    assert run(src.encode(), "html").decode() == src.replace("Open&nbsp;files", "nepO\xa0selif")


def test_html_a_percent_sign_before_a_tag_leaves_the_tag_whole():
    """GCC's quote %< took the "<" of "50%</b>": the tag came back as escaped text, <b> open."""
    out = run(b"<p>Prices rose <b>by 50%</b>, 5%<a href='#n'>[1]</a>.</p>", "html").decode()
    assert out == "<p>secirP esor <b>yb 50%</b>, 5%<a href='#n'>[1]</a>.</p>"


def test_html_math_is_kept_and_inline_math_stays_in_its_sentence():
    """MathML's tokens (<mi>A</mi>, <mi>sin</mi>) were each a text of their own for the model,
    and the sentence around a formula was cut at it."""
    inline = '<math><mi>A</mi><mo>=</mo><mi>sin</mi><mi>x</mi></math>'
    block = '<math display="block"><mi>rank</mi><mi>A</mi></math>'
    page = f"<p>The matrix {inline} has full rank.</p><p>{block}</p>".encode()
    CALLS.clear()
    out = run(page, "html").decode()
    assert out == f"<p>ehT xirtam {inline} sah lluf knar.</p><p>{block}</p>"
    assert [t for batch in CALLS for t in batch] == ["The matrix {1} has full rank."]


def test_html_addresses_written_as_character_references_are_kept():
    # Markdown writes an e-mail address as character references (&#121;&#117;...): the model
    # read it as an address that was not in the masked source, which deleted it as made up
    src = ('<p>Mail <a href="&#109;&#97;&#105;&#108;&#116;&#111;&#58;yu&#64;x.org">&#121;&#117;'
           '&#64;&#120;&#46;&#111;&#114;&#103;</a> or see&#160;www&#46;x.org today.</p>')
    out = run(src.encode(), "html").decode()
    assert out == ('<p>liaM <a href="&#109;&#97;&#105;&#108;&#116;&#111;&#58;yu&#64;x.org">'
                   'yu@x.org</a> ro ees\xa0www.x.org yadot.</p>')


def test_markdown_keeps_markers_code_tables_and_link_targets():
    src = (
        "# Getting started\n\n"
        "- Install the [server](docs/setup.md) first\n"
        "1. Run `nmt serve` now\n\n"
        "```bash\nnmt serve --port 8000\n```\n\n"
        "| Name | Meaning |\n|------|---------|\n| port | the port |\n\n"
        "[docs]: https://example.org/docs\n"
    )
    out = run(src.encode(), "md").decode()
    assert out == (
        "# gnitteG detrats\n\n"
        "- llatsnI eht [revres](docs/setup.md) tsrif\n"
        "1. nuR `nmt serve` won\n\n"
        "```bash\nnmt serve --port 8000\n```\n\n"
        "| emaN | gninaeM |\n|------|---------|\n| trop | eht trop |\n\n"
        "[docs]: https://example.org/docs\n"
    )


def test_markdown_items_nested_four_spaces_deep_are_items():
    # Python-Markdown nests a list four spaces deep: the nested items went on as their
    # parent's text, and the model's translation put their line breaks (and markers) anywhere
    src = "- Top item\n    - Nested one\n    * [ ] Nested two\n\nText\n    - goes on here\n"
    assert extract(src.encode(), "md").segments == [
        "Top item", "Nested one", "Nested two", "Text\n    - goes on here"]
    assert run(src.encode(), "md").decode() == (
        "- poT meti\n    - detseN eno\n    * [ ] detseN owt\n\ntxeT\n    - seog no ereh\n")


def test_markdown_table_rows_without_outer_pipes_are_rows():
    # GitHub's tables need no pipe at a row's ends: the rows went on as one paragraph, whose
    # line breaks came back anywhere (Python-Markdown's extension list: the table was gone)
    src = ("Name | Meaning\n---- | -------\n[Extra] | `extra` text\nport | the port\n\n"
           "Then text\ngoes on.\n")
    assert extract(src.encode(), "md").segments == [
        "Name", "Meaning", "[Extra]", "`extra` text", "port", "the port", "Then text\ngoes on."]
    out = run(src.encode(), "md").decode()
    assert out == ("emaN | gninaeM\n---- | -------\n[artxE] | `extra` txet\ntrop | eht trop\n\n"
                   "nehT txet\nseog no.\n")


def test_markdown_lines_that_continue_a_paragraph_or_item_are_one_segment():
    src = ("Open the file\nand save it.\n    Then close it.\n"
           "- an item that\n  goes on\n- next\n## Title\ntext under it\n")
    doc = extract(src.encode(), "md")
    assert doc.segments == ["Open the file\nand save it.\n    Then close it.",
                            "an item that\n  goes on", "next", "Title", "text under it"]
    out = run(src.encode(), "md").decode()
    # each sentence goes to the engine whole, on one line; the breaks come back in place
    assert CALLS[-1] == ["Open the file and save it.", "Then close it.", "an item that goes on",
                         "next", "Title", "text under it"]
    assert out == ("nepO eht elif\ndna evas ti.\n    nehT esolc ti.\n"
                   "- na meti taht\n  seog no\n- txen\n## eltiT\ntxet rednu ti\n")


def test_markdown_keeps_front_matter_underlines_html_blocks_and_titled_link_targets():
    """Each of these was translated: the front matter's keys (its title is, in its place), a
    setext heading's underline (as words of the heading), an HTML comment and the attributes
    of an HTML block; a link with a title had its target translated (and its closing
    parenthesis lost by the model)."""
    src = (
        "---\ntitle: Getting started\ntags: [install]\n---\n\n"
        "Main title\n==========\n\n"
        "Read the [guide](docs/install.md \"The guide\") first.\n\n"
        "<!-- a comment\nover two lines -->\n"
        '<div align="center">Centered text</div>\n\n'
        "Last words.\n"
    )
    assert extract(src.encode(), "md").segments == [
        "Getting started", "Main title", 'Read the <g id="1">guide</g> first.', "Last words."]
    assert run(src.encode(), "md").decode() == (
        "---\ntitle: gnitteG detrats\ntags: [install]\n---\n\n"
        "niaM eltit\n==========\n\n"
        "daeR eht [ediug](docs/install.md \"The guide\") tsrif.\n\n"
        "<!-- a comment\nover two lines -->\n"
        '<div align="center">Centered text</div>\n\n'
        "tsaL sdrow.\n"
    )
    # a rule at the top, with a blank line under it, is no front matter
    assert extract(b"---\n\nSome text.\n\n---\n", "md").segments == ["Some text."]


def test_markdown_emphasis_goes_around_the_translation_of_its_words():
    """Emphasis markers went to the model as characters, and it lost or moved them ("Click
    **Save** to ..." came back with one "**" and "*"): now each pair travels as an inline tag
    pair, the model gets the plain sentence and the wrapped words, and the markers come back
    around the translation of those words."""
    src = ("Click **Save** to keep your changes.\n\n"
           "*Italic* and _also italic_ words.\n\n"
           "**Bold with *italic* inside** and ***both*** here.\n\n"
           "The ~~old way~~ is gone.\n\n"
           "Read the guide **first**\n\n"
           "See **[the guide](docs/guide.md)** now.\n")
    first = extract(src.encode(), "md").segments[0]
    assert first == 'Click <g id="1">Save</g> to keep your changes.'
    assert run(src.encode(), "md").decode() == (
        "kcilC **evaS** ot peek ruoy segnahc.\n\n"
        "*cilatI* dna _osla cilati_ sdrow.\n\n"
        "**dloB htiw *cilati* edisni** dna ***htob*** ereh.\n\n"
        "ehT ~~dlo yaw~~ si enog.\n\n"
        "daeR eht ediug **tsrif**\n\n"
        "eeS **[eht ediug](docs/guide.md)** won.\n")
    sent = CALLS[-1]  # the model never sees a marker: the plain sentence, then the words
    assert sent[:2] == ["Click Save to keep your changes.", "Save"]
    assert not any(c in t for t in sent for c in "*_~")


def test_markdown_emphasis_stays_balanced_where_the_words_move():
    """A model that turns the sentence around: the pair still wraps the wrapped words'
    translation, once, and nested pairs stay nested."""
    def backwards(texts: list[str]) -> list[str]:
        return [" ".join(reversed(t.split())) for t in texts]

    src = b"Click **Save** to keep *your* changes.\n\n**Bold with _italic_ inside** here.\n"
    out = translate_document(src, "md", backwards).decode()
    assert out == ("changes. *your* keep to **Save** Click\n\n"
                   "here. **inside _italic_ with Bold**\n")


def test_markdown_reference_links_keep_their_labels():
    # a label is the key of its definition: translated, it matched none and the link broke
    # ("[markdown/__meta__.py]" even lent its underscores to another word as emphasis)
    src = ("See the [user guide], [the API][api] or [Setup][], not [this].\n\n"
           "[user guide]: guide.md\n[api]: api.md\n[setup]: setup.md\n")
    out = run(src.encode(), "md").decode()
    assert out == ("eeS eht [resu ediug][user guide], [eht IPA][api] ro [puteS][Setup], ton "
                   "[siht].\n\n[user guide]: guide.md\n[api]: api.md\n[setup]: setup.md\n")
    out = run(b"Update [`a/__init__.py`][a/__init__.py] now.\n\n[a/__init__.py]: x\n", "md")
    assert out.decode().startswith("etadpU [`a/__init__.py`][a/__init__.py] won.")


def test_markdown_a_reference_label_over_two_lines_stays_as_written():
    # a label wrapped over two lines went to the model: translated, it matched no definition
    src = ("See the [user\nguide] and [the *API*][api\nreference] or [Setup\nnotes][] now.\n\n"
           "[user guide]: guide.md\n[api reference]: api.md\n[setup notes]: setup.md\n")
    assert run(src.encode(), "md").decode() == (
        "eeS eht [resu\nediug][user guide] dna [eht *IPA*][api\nreference] ro [puteS\nseton]"
        "[Setup notes] won.\n\n"
        "[user guide]: guide.md\n[api reference]: api.md\n[setup notes]: setup.md\n")
    quoted = "> See the [user\n> guide] now.\n\n[user guide]: guide.md\n"
    assert run(quoted.encode(), "md").decode() == (
        "> eeS eht [resu\n> ediug][user guide] won.\n\n[user guide]: guide.md\n")


def test_markdown_a_translation_that_starts_a_line_like_a_block_marker_is_escaped():
    # "Jul 7, 2017: Version 2.6.10" came back as "7. 2017: Version 2.6.10", a list item
    # now; a wrapped line beginning with "- " or "# " starts a list or a heading too
    src = "Jul 7, 2017: a fix\nand more.\n\n# Title\n\n- Item\n"
    answers = {"Jul 7, 2017: a fix and more.": "7. 2017: eine Korrektur - und # mehr.",
               "Title": "Titel", "Item": "Punkt"}
    out = translate_document(src.encode(), "md", lambda texts: [answers[t] for t in texts])
    assert out.decode() == ("7\\. 2017: eine Korrektur\n\\- und # mehr.\n\n# Titel\n\n"
                            "- Punkt\n")


def test_markdown_links_go_to_the_model_as_tag_pairs():
    # the model saw a link's brackets as characters and moved or lost them: a badge line
    # ("[![CI tests](badge.svg)](actions)") came back as brackets and targets in a heap
    src = ("See [![CI tests](https://x.org/b.svg)](https://x.org/ci) and [the *guide*][g] or "
           "[this](a.md \"A title\").\n\n[g]: guide.md\n")
    assert extract(src.encode(), "md").segments == [
        'See <g id="1"><g id="2">CI tests</g></g> and <g id="3">the <g id="4">guide</g></g> '
        'or <g id="5">this</g>.']
    unbracketed = translate_document(src.encode(), "md", lambda texts: [
        t.replace("[", "").replace("]", "").replace("!", "") for t in texts]).decode()
    assert unbracketed == src


def test_markdown_leaves_what_is_not_emphasis_alone():
    src = ("* A bullet with 2 * 3 and 4*5 inside\n\n"
           "Set max_batch_size or __init__ in snake_case_names.\n\n"
           "Open https://example.org/a_b_c_d or mail first_last@example.org now.\n\n"
           "Run `a **b** c` and read [this](docs/a__b__c.md) now.\n\n"
           "Escaped \\*stars\\* and \\_lines\\_ stay.\n\n"
           "A lone ** pair of * and _ and ~~ marks.\n\n"
           'A tag <g id="1">of its own</g> keeps its **stars**.\n')
    segments = extract(src.encode(), "md").segments
    # __init__ is strong emphasis to Markdown (underscores flank a word from outside)
    assert segments == ["A bullet with 2 * 3 and 4*5 inside",
                        'Set max_batch_size or <g id="1">init</g> in snake_case_names.',
                        src.split("\n\n")[2],
                        'Run `a **b** c` and read <g id="1">this</g> now.',
                        *src.split("\n\n")[4:-1],
                        'A tag <g id="1">of its own</g> keeps its **stars**.']
    out = run(src.encode(), "md").decode()
    # identifiers are protected spans: they come back as they are (app.text.protect)
    assert out.startswith("* A tellub htiw 2 * 3 dna 4*5 edisni\n\n"
                          "teS max_batch_size ro __tini__ ni snake_case_names.\n\n")
    assert "https://example.org/a_b_c_d" in out and "first_last@example.org" in out
    assert "`a **b** c`" in out and "(docs/a__b__c.md)" in out
    assert "depacsE \\*srats\\* dna \\_senil\\_ yats." in out
    assert "A enol ** riap fo * dna _ dna ~~ skram." in out
    assert 'A gat <g id="1">fo sti nwo</g> speek sti **srats**.' in out


def test_markdown_code_and_paragraphs_inside_list_items():
    """A list item holds blocks indented to its text: a fence four spaces deep (Node.js's API
    docs, under a numbered step) was read as text and its code translated, and an item's second
    paragraph as indented code (left untranslated); code indented four more is code."""
    src = ("1. Install it:\n\n"
           "    ```bash\n    pip install thing\n    ```\n\n"
           "    Then run it once.\n\n"
           "        indented code stays\n\n"
           "- `options` {Object}\n"
           "  ```js\n  const x = require('x');\n  ```\n"
           "- Next item\n\n"
           "      code under it\n"
           "  * `nested` item\n"
           "    ```mjs\n    import x from 'x';\n    ```\n")
    assert extract(src.encode(), "md").segments == [
        "Install it:", "Then run it once.", "`options` {Object}", "Next item", "`nested` item"]
    out = run(src.encode(), "md").decode()
    assert out == src.replace("Install it", "llatsnI ti").replace(
        "Then run it once", "nehT nur ti ecno").replace("Next item", "txeN meti").replace(
        "` item", "` meti")


def test_markdown_a_quoted_paragraph_over_several_lines_is_one_segment():
    """Each line of a block quote was a segment of its own, so a wrapped sentence went to the
    model in halves; its lines go on now, and each gets its quote markers back."""
    src = ("> A quoted sentence that is\n> wrapped over two lines.\n>\n"
           "> - an item\n>   that goes on\n>> Deeper quote\n")
    assert extract(src.encode(), "md").segments == [
        "A quoted sentence that is\nwrapped over two lines.", "an item\n  that goes on",
        "Deeper quote"]
    out = run(src.encode(), "md").decode()
    assert CALLS[-1][:2] == ["A quoted sentence that is wrapped over two lines.",
                             "an item that goes on"]
    assert out == ("> A detouq ecnetnes taht si\n> depparw revo owt senil.\n>\n"
                   "> - na meti\n>   taht seog no\n>> repeeD etouq\n")


def test_markdown_admonitions_keep_their_keyword_and_translate_title_and_body():
    """MkDocs' and Python-Markdown's notes (`!!! note "Title"`, pymdownx's collapsible `???`
    and `???+`, tabs `=== "Title"`): the keyword was translated (no note any more) and the
    body's second paragraph read as indented code, left untranslated."""
    src = ('!!! note "An optional title"\n    The body of the note,\n    over two lines.\n\n'
           "    A second paragraph.\n\n"
           "        code in the note\n\n"
           "??? warning\n    Collapsed by default.\n\n"
           '???+ tip "Open one"\n    Open by default.\n\n'
           '!!! danger highlight ""\n    No title bar.\n\n'
           '=== "Tab one"\n    Text in a tab.\n\n'
           "Back at the top.\n")
    assert extract(src.encode(), "md").segments == [
        "An optional title", "The body of the note,\n    over two lines.", "A second paragraph.",
        "Collapsed by default.", "Open one", "Open by default.", "No title bar.", "Tab one",
        "Text in a tab.", "Back at the top."]
    assert run(src.encode(), "md").decode() == (
        '!!! note "nA lanoitpo eltit"\n    ehT ydob fo eht eton,\n    revo owt senil.\n\n'
        "    A dnoces hpargarap.\n\n"
        "        code in the note\n\n"
        "??? warning\n    despalloC yb tluafed.\n\n"
        '???+ tip "nepO eno"\n    nepO yb tluafed.\n\n'
        '!!! danger highlight ""\n    oN eltit rab.\n\n'
        '=== "baT eno"\n    txeT ni a bat.\n\n'
        "kcaB ta eht pot.\n")


def test_a_heading_and_a_title_end_where_the_patterns_ended_them():
    # a heading's closing hashes and attributes, an admonition title's closing quote: the
    # patterns took the text one character at a time and tried the end from each, reading a
    # long run of spaces again every time; they are read from the line's end now
    ended = re.compile(r"(.*?)((?:[ \t]+#+)?(?:[ \t]*\{[:#.][^{}]*\})?[ \t]*)$")
    titled = re.compile(r'(.*?)("?[ \t]*)$')
    rng = random.Random(13)
    pieces = [" ", "\t", "#", "##", "{", "}", "{#id}", "{.c}", "{:x}", ".", ":", "a", "b c", '"']
    for _ in range(20000):
        rest = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert markdown_file._heading_end(rest) == ended.match(rest).groups(), repr(rest)
        assert markdown_file._title_end(rest) == titled.match(rest).groups(), repr(rest)


def test_a_heading_with_a_long_run_of_spaces_is_read_in_linear_time():
    data = b"# Quart" + b" " * 200_000 + b"erly plan\n\n!!! note \"Mind" + b" " * 200_000 + \
        b'the gap"\n    Text.\n'
    assert run_case(data, "md", timeout=30, checks=False).kind == "ok"


def test_table_separators_and_json_front_matter_ends_are_matched_as_before():
    # two runs of spaces side by side in each pattern: a long run not followed by what the
    # pattern needs was shared between them in every way before the match failed
    separator = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
    json_rest = re.compile(r"[ \t]*,?[ \t]*$")
    rng = random.Random(17)
    pieces = [" ", "\t", "|", "-", "---", ":", ",", "a", "\n"]
    for _ in range(20000):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert bool(markdown_file._SEPARATOR.match(line)) == bool(separator.match(line)), line
        assert ((m := front_matter._JSON_REST.match(line)) and m.span()) == (
            (m := json_rest.match(line)) and m.span()), repr(line)


def test_a_table_row_and_json_front_matter_with_long_runs_of_spaces_are_read_in_linear_time():
    table = b"| a | b |\n" + b" " * 200_000 + b"x |\n| c | d |\n"
    front = b'{\n  "title": "The plan"' + b" " * 200_000 + b', "draft": false\n}\n\nText.\n'
    for data in (table, front):
        assert run_case(data, "md", timeout=30, checks=False).kind == "ok"


@pytest.mark.parametrize(("fmt", "part"), [("docx", "word/document.xml"),
                                         ("pptx", "ppt/slides/slide2.xml")])
def test_an_office_part_that_declares_a_dtd_is_refused(fmt, part):
    # its entities were kept as references and the declarations dropped when the part was
    # written back: the file translated opened nowhere ("Entity 'e' not defined"). Office Open
    # XML parts declare no DTD (Word refuses them too)
    data = docx_bytes(docx_document()) if fmt == "docx" else pptx_file()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        xml = archive.read(part).decode()
    head, root = xml.split("?>", 1)
    name = root.lstrip()[1:].split(" ", 1)[0]
    declared = f'{head}?><!DOCTYPE {name} [<!ENTITY e "lol">]>{root}'
    with pytest.raises(InvalidDocument, match=f"{part}.*DTD"):
        extract(replace_part(data, part, declared.encode()), fmt)


def test_markdown_footnotes_keep_their_labels_and_translate_their_text():
    """A footnote reference (`[^1]`) was read as a reference link to the definition `[^1]:`,
    and came back as `[and][^1]`, a link on the next word; the definitions were kept as link
    definitions, their text untranslated."""
    src = ("Text with a footnote[^1] and another[^my_note].\n\n"
           "[^1]: The footnote text.\n[^my_note]: A longer note\n    with a second line.\n\n"
           "    Its second paragraph.\n")
    assert extract(src.encode(), "md").segments == [
        'Text with a footnote<x id="1"/> and another<x id="2"/>.', "The footnote text.",
        "A longer note\n    with a second line.", "Its second paragraph."]
    assert run(src.encode(), "md").decode() == (
        "txeT htiw a etontoof[^1] dna rehtona[^my_note].\n\n"
        "[^1]: ehT etontoof txet.\n[^my_note]: A regnol eton\n    htiw a dnoces enil.\n\n"
        "    stI dnoces hpargarap.\n")


def test_markdown_shortcodes_and_liquid_tags_come_back_as_written():
    """Hugo's shortcodes and Jekyll's Liquid tags are template code: the model translated
    their names and parameters (`{{< erugif crs="x.gnp" >}}`, `{% edulcni redaeh.lmth %}`),
    so the site no longer built. They never reach it now: a line of them (a tag left open
    over several lines up to its closing braces, a highlight, raw or comment block up to its
    end tag) stays as written, one inside a sentence stands alone in it."""
    src = ('{{< figure src="x.png" caption="A nice figure" >}}\n\n'
           "{{% note %}}\nThis is a note.\n{{% /note %}}\n\n"
           '{{< figure src="y.png"\n    caption="Another figure" >}}\n\n'
           "{% include header.html %}\n\n"
           "{% highlight ruby %}\ndef show\n  puts 'it'\nend\n{% endhighlight %}\n\n"
           "{{< highlight go >}}\nfunc main() {}\n{{< /highlight >}}\n\n"
           "{% comment %}\nNot for readers.\n{% endcomment %}\n\n"
           "The page {{ page.title }} links {{< ref \"other.md\" >}} and "
           "{%- if site.beta -%}beta{% endif %} here.\n\n"
           "> {{% warning %}}\n> Be careful.\n\n"
           "- An item {{ site.name | escape }} here\n"
           "- Code `{{ x }}` is code\n\n"
           "{{ never closed\n\n[a link]: a.md\nText after it.\n")
    CALLS.clear()
    assert extract(src.encode(), "md").segments == [
        "This is a note.",
        'The page <x id="1"/> links <x id="2"/> and <x id="3"/>beta<x id="4"/> here.',
        "Be careful.", 'An item <x id="1"/> here', "Code `{{ x }}` is code", "Text after it."]
    out = run(src.encode(), "md").decode()
    assert out == (src.replace("This is a note", "sihT si a eton")
                   .replace("The page", "ehT egap").replace("links", "sknil")
                   .replace(" and {", " dna {")
                   .replace("beta{% endif %} here", "ateb{% endif %} ereh")
                   .replace("Be careful", "eB luferac")
                   .replace("An item", "nA meti").replace("} here", "} ereh")
                   .replace("Code `{{ x }}` is code", "edoC `{{ x }}` si edoc")
                   .replace("Text after it", "txeT retfa ti"))
    assert not any(m in t for batch in CALLS for t in batch for m in ("{{", "{%", "%}", "}}"))


def test_markdown_a_comment_or_raw_tag_on_one_line_is_template_code_whole():
    """`{% comment %} x {% endcomment %}` on one line sent "x" to the model: a note to the
    site's editors, never shown, came back translated (and cost the engine a sentence)."""
    src = ("{% comment %} Editors: check the prices {% endcomment %}\n\n"
           "Open the shop {%- comment -%}until May{%- endcomment -%} every day.\n\n"
           "Write {% raw %}{{ name }} and {{ date }}{% endraw %} in the form.\n")
    CALLS.clear()
    assert extract(src.encode(), "md").segments == [
        'Open the shop <x id="1"/> every day.', 'Write <x id="1"/> in the form.']
    out = run(src.encode(), "md").decode()
    assert "{% comment %} Editors: check the prices {% endcomment %}" in out
    assert "{%- comment -%}until May{%- endcomment -%}" in out
    assert "{% raw %}{{ name }} and {{ date }}{% endraw %}" in out


def test_markdown_a_link_target_with_template_code_is_the_links_target():
    """Bootstrap's docs link through shortcodes (`[the utilities]({{< docsref "/x" >}})`): the
    target, with spaces in it, was no target, and the shortcode, standing alone, moved out of
    its parentheses (`[the utilities](){{< docsref "/x" >}}`); the link broke."""
    src = ('Use [the border utilities]({{< docsref "/utilities/borders" >}}) now, see '
           "![a logo]({{ site.baseurl }}/logo.png \"Logo\") and "
           '[**the guide**]({{< ref "guide.md" >}} "Guide").\n')
    assert extract(src.encode(), "md").segments == [
        'Use <g id="1">the border utilities</g> now, see <g id="2">a logo</g> and '
        '<g id="3"><g id="4">the guide</g></g>.']
    assert run(src.encode(), "md").decode() == (
        'esU [eht redrob seitilitu]({{< docsref "/utilities/borders" >}}) won, ees '
        "![a ogol]({{ site.baseurl }}/logo.png \"Logo\") dna "
        '[**eht ediug**]({{< ref "guide.md" >}} "Guide").\n')


def test_markdown_an_html_block_runs_to_a_blank_line():
    """An HTML block (a table in Node.js's API docs) is HTML up to the next blank line, as
    CommonMark reads it: only its first line was kept, the rest went to the model as a
    paragraph and `<tr>` came back translated; Markdown after a blank line is text again."""
    src = ("<table>\n  <tr>\n    <td>Sent to indicate a hangup</td>\n  </tr>\n</table>\n\n"
           "<details>\n<summary>Show more</summary>\n\nThe hidden text.\n\n</details>\n")
    assert extract(src.encode(), "md").segments == ["The hidden text."]
    assert run(src.encode(), "md").decode() == src.replace("The hidden text", "ehT neddih txet")


def test_markdown_attribute_lists_and_closing_hashes_stay():
    """A heading's id (`{#install}`, Python-Markdown's attr_list, Pandoc, kramdown) went to the
    model and came back translated, so links to it broke; so did a heading's closing hashes
    and an attribute list on a line of its own under a paragraph."""
    src = "## Install it {#install}\n\n# Title #\n\nA paragraph.\n{: .lead }\n"
    assert extract(src.encode(), "md").segments == ["Install it", "Title", "A paragraph."]
    assert run(src.encode(), "md").decode() == (
        "## llatsnI ti {#install}\n\n# eltiT #\n\nA hpargarap.\n{: .lead }\n")


def test_markdown_definition_lists_keep_their_marker():
    """A definition (`:   text` under its term, Python-Markdown's def_list, Pandoc) went on as
    its term's text, one sentence with its colon, and its second paragraph was read as code."""
    src = "Term\n:   The definition of the term,\n    wrapped here.\n\n    Its second one.\n"
    assert extract(src.encode(), "md").segments == [
        "Term", "The definition of the term,\n    wrapped here.", "Its second one."]
    assert run(src.encode(), "md").decode() == (
        "mreT\n:   ehT noitinifed fo eht mret,\n    depparw ereh.\n\n    stI dnoces eno.\n")


def test_markdown_a_backslash_hard_break_stays_at_a_line_end():
    """A backslash at a line's end is a hard line break; it went to the model as a character
    of the word before it and came back after another word, mid-line, where it is no break
    ("aus der\\nDatei\\ und" from the shipped model). It goes back with its line break now."""
    def backwards(texts: list[str]) -> list[str]:
        return [" ".join(reversed(t.split())) for t in texts]

    src = ("The server reads its settings\\\nand starts the workers.\n\n"
           "> A quoted line\\\n> and more \\\\\n> here.\n")
    assert extract(src.encode(), "md").segments == [
        "The server reads its settings\nand starts the workers.",
        "A quoted line\nand more \\\\\nhere."]
    out = translate_document(src.encode(), "md", backwards).decode()
    assert out == ("workers. the starts and settings\\\nits reads server The\n\n"
                   "> here. \\\\ more\\\n> and line\n> quoted A\n")


@pytest.mark.skipif(not SHIPPED.exists(), reason="the shipped bundle is not here")
def test_markdown_bold_survives_the_shipped_model():
    """The sentence whose "**" the shipped model broke, through the model itself."""
    from app.engine import Translator

    translator = Translator.from_dir(SHIPPED, intra_threads=1)

    def translate(texts: list[str]) -> list[str]:
        return [r.text for r in translator.translate_batch(texts)]

    out = translate_document(b"Click **Save** to keep your changes.\n", "md", translate).decode()
    # what the document sends: the plain sentence and the wrapped word, in one batch
    sentence, save = translate(["Click Save to keep your changes.", "Save"])
    assert out.count("**") == 2 and "*" not in out.replace("**", "")
    assert re.search(r"\*\*(.+?)\*\*", out).group(1) == save
    assert out.replace("**", "").strip() == sentence


def test_srt_keeps_numbering_timings_and_line_breaks():
    src = (
        "1\n00:00:01,000 --> 00:00:02,500\nHello there\nGeneral Kenobi\n\n"
        "7\n00:01:00,000 --> 00:01:03,000\n<i>Whispering</i> now\n\n"
    )
    out = list(srt.parse(run(src.encode(), "srt").decode()))
    before = list(srt.parse(src))
    assert [(s.index, s.start, s.end) for s in out] == [(s.index, s.start, s.end) for s in before]
    assert [s.content for s in out] == ["olleH ereht\nlareneG iboneK", "<i>gnirepsihW</i> won"]
    # Windows line breaks stay (they came back as \n)
    out = run(src.replace("\n", "\r\n").encode(), "srt").decode()
    assert out.count("\r\n") == src.count("\n") and "\n" not in out.replace("\r\n", "")


def test_srt_without_numbers_is_numbered_from_one():
    # every cue of a file without numbers came back numbered 0
    src = "00:00:01,000 --> 00:00:02,500\nHello there\n\n00:00:03,000 --> 00:00:04,000\nBye now\n"
    out = run(src.encode(), "srt").decode()
    assert [(s.index, s.content) for s in srt.parse(out)] == [(1, "olleH ereht"), (2, "eyB won")]


def test_po_fills_msgstr_and_keeps_catalog_metadata():
    catalog = polib.POFile()
    catalog.metadata = {
        "Project-Id-Version": "demo 1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Plural-Forms": "nplurals=2; plural=(n != 1);",
    }
    catalog.append(polib.POEntry(msgid="Open file", msgctxt="menu", comment="File menu",
                                 tcomment="keep short", occurrences=[("main.c", "12")]))
    catalog.append(polib.POEntry(msgid="Copy %s to %d places", flags=["c-format"]))
    catalog.append(polib.POEntry(msgid="one file", msgid_plural="%d files",
                                 msgstr_plural={0: "", 1: ""}))
    catalog.append(polib.POEntry(msgid="Old text", msgstr="Alter Text", obsolete=True))
    # a translator's msgstr stays; a fuzzy one is translated again (and stays fuzzy)
    catalog.append(polib.POEntry(msgid="Cancel", msgstr="Abbrechen"))
    catalog.append(polib.POEntry(msgid="Save", msgstr="Sichern", flags=["fuzzy"]))
    out = polib.pofile(run(str(catalog).encode(), "po").decode())
    assert "Cancel" not in CALLS[-1]
    assert out.metadata == catalog.metadata
    first, second, plural, done, fuzzy, old = out  # obsolete entries come last
    assert done.msgstr == "Abbrechen"
    assert fuzzy.msgstr == "evaS" and fuzzy.flags == ["fuzzy"]
    assert (first.msgctxt, first.comment, first.tcomment, first.occurrences) == (
        "menu", "File menu", "keep short", [("main.c", "12")])
    assert first.msgstr == "nepO elif"
    assert second.flags == ["c-format"] and second.msgstr == "ypoC %s ot %d secalp"
    assert plural.msgstr_plural == {0: "eno elif", 1: "%d selif"}
    assert old.obsolete and old.msgstr == "Alter Text"


def _po(charset: str, entry: str, forms: str = "") -> str:
    """A catalog of one entry, its header declaring the charset (and the plural forms)."""
    header = f'"Content-Type: text/plain; charset={charset}\\n"\n' + (
        f'"Plural-Forms: {forms}\\n"\n' if forms else "")
    return f'msgid ""\nmsgstr ""\n{header}\n{entry}'


def test_a_text_file_not_in_utf8_is_read_in_the_code_page_of_its_language():
    """Subtitles and text saved by Windows tools are in a code page, not UTF-8: they were
    refused (400); they are read in the source language's code page, and written back in it
    where it holds the translation, else in UTF-8 with a BOM."""
    german = functools.partial(translate_document, translate=lambda texts: [
        t.replace("Don’t", "„Nicht“").replace("cafe", "Café") for t in texts])
    cue = "1\r\n00:00:01,000 --> 00:00:02,000\r\nDon’t go to the cafe.\r\n\r\n"
    out = german(cue.encode("cp1252"), "srt")
    assert out == cue.replace("Don’t", "„Nicht“").replace("cafe", "Café").encode("cp1252")
    # a character windows-1252 lacks: the whole file in UTF-8 with a BOM, nothing lost
    arrow = translate_document("Don’t stop.".encode("cp1252"), "txt",
                               lambda texts: ["Nicht → anhalten."] * len(texts))
    assert arrow == "\ufeffNicht → anhalten.".encode()
    # the source language says which code page: windows-1250 for Polish
    polish = "Zażółć gęślą jaźń."
    assert translate_document(polish.encode("cp1250"), "md", lambda texts: texts,
                              source_lang="pl") == polish.encode("cp1250")
    assert extract("Привет, мир.".encode("cp1251"), "txt", source_lang="ru").segments == [
        "Привет, мир."]
    # UTF-8 stays UTF-8 (its bytes read in a code page would be other characters)
    assert extract("Don’t.".encode(), "txt", source_lang="en").segments == ["Don’t."]


@pytest.mark.parametrize(("page", "lines"), [
    ("cp1251", ["Привет! Как дела?", "Я не знаю, что сказать."]),
    ("cp1250", ["Dzień dobry, jak się masz?", "Nie wiem, co powiedzieć."]),
    ("cp1253", ["Καλημέρα, τι κάνεις;", "Δεν ξέρω τι να πω."]),
    ("cp1252", ["Guten Morgen, wie geht's?", "Ich weiß nicht, was ich sagen soll. Schöne Grüße."]),
    ("cp1252", ["Bonjour, ça va ?", "Je ne sais pas quoi dire, c'est déjà l'été."]),
])
def test_subtitles_in_a_code_page_with_the_source_auto_are_read_in_the_page_of_their_letters(
        page, lines):
    """With source "auto" every file not in UTF-8 was read as windows-1252: Russian came out as
    "Ïðèâåò" and was translated so; the code page is guessed from the bytes (app.documents.
    charset.guess), and the translation is written back in it."""
    cues = "".join(f"{i}\r\n00:00:0{i},000 --> 00:00:0{i},900\r\n{line}\r\n\r\n"
                   for i, line in enumerate(lines, 1))
    data = cues.encode(page)
    assert extract(data, "srt", source_lang="auto").segments == lines
    assert translate_document(data, "srt", lambda texts: texts, source_lang="auto") == data
    # a named source language still says which code page, as before
    assert extract(data, "srt", source_lang="de").segments == [
        line.encode(page).decode("cp1252") for line in lines]


def test_the_words_a_code_page_is_guessed_from_are_found_as_the_pattern_found_them():
    # the words with a byte past ASCII: the pattern, tried from every letter of a long run of
    # ASCII letters to its end, cost the square of the run; each run is looked at once now
    from app.documents import charset

    searched = re.compile(rb"[A-Za-z\x80-\xff]*[\x80-\xff][A-Za-z\x80-\xff]*")
    rng = random.Random(5)
    pieces = [b"a", b"Z", b"\xe9", b"\xff", b"\x80", b" ", b"1", b".", b"\n", b"ab\xfc"]
    for _ in range(20000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert charset._sample(data) == [m.group() for m in searched.finditer(data)], data


def test_a_file_of_one_long_ascii_word_and_a_byte_past_ascii_is_read_in_linear_time():
    # 400,000 letters and one byte that is not UTF-8: the code page's guess took a quarter of
    # an hour of CPU holding the GIL; a deadline, in a child process
    data = b"a" * 400_000 + b" caf\xe9\n"
    assert run_case(data, "txt", timeout=30, checks=False).kind == "ok"


@pytest.mark.parametrize(("page", "lines"), [
    ("cp949", ["파일을 열 수 없습니다", "설정을 저장했습니다."]),
    ("cp936", ["无法打开文件", "设置已保存。"]),
    ("cp874", ["ไม่สามารถเปิดแฟ้มได้", "บันทึกการตั้งค่าแล้ว"]),
])
def test_korean_and_chinese_subtitles_are_not_taken_for_thai(page, lines):
    """Thai's code page reads the bytes of Korean and Chinese text as Thai letters, every one
    of them in Thai's alphabet: such a file was read as Thai and translated so."""
    cues = "".join(f"{i}\r\n00:00:0{i},000 --> 00:00:0{i},900\r\n{line}\r\n\r\n"
                   for i, line in enumerate(lines, 1))
    assert extract(cues.encode(page), "srt", source_lang="auto").segments == lines


@pytest.mark.parametrize(("page", "lines"), [
    # windows-1255's Hebrew letters are windows-1251's small Cyrillic letters, all Russian's
    ("cp1255", ["שלום, מה שלומך היום?", "הקובץ נשמר בהצלחה."]),
    # Latvian "ē ā ū" are French "ç â û" in windows-1252
    ("cp1257", ["Nevarēja atvērt datni", "Pārlūkot mapes"]),
    # Romanian "ă" is Portuguese "ã" in windows-1252
    ("cp1250", ["Salvează modificările?"]),
    ("cp1250", ["Setări avansate"]),
])
def test_subtitles_whose_letters_read_as_another_language_are_read_by_their_letter_pairs(
        page, lines):
    """Each of these files reads in windows-1251 or 1252 as letters that all belong to one
    language of that page (Hebrew as Russian, Latvian as French, Romanian as Portuguese), as
    well as in its own page: letters alone do not tell, nor did the commonest words (none in
    these lines); which letters stand next to which does ("щм", "çj" and "zã" are rare)."""
    cues = "".join(f"{i}\r\n00:00:0{i},000 --> 00:00:0{i},900\r\n{line}\r\n\r\n"
                   for i, line in enumerate(lines, 1))
    assert extract(cues.encode(page), "srt", source_lang="auto").segments == lines


def test_a_short_file_that_two_code_pages_read_equally_well_is_read_in_the_first():
    """Byte E8 is "č" in windows-1250 and "è" in windows-1252: a word with nothing else to tell
    (no language writes "wè" or "wč" often) is read in windows-1252, the first of the pages in
    the documented order; a file no page reads as letters of one language is read as
    windows-1252, as before, or refused."""
    assert extract(b"w\xe8w", "txt", source_lang="auto").segments == ["wèw"]
    assert extract(b"Veli\xe8ina", "txt", source_lang="auto").segments == [
        "Veličina"]  # Croatian writes "ič" and "či", the languages of windows-1252 seldom "iè"
    assert extract(b"Veli\xe8ina je za", "txt", source_lang="auto").segments == [
        "Veličina je za"]  # two of Croatian's commonest words tell
    assert extract(b"(\xa9)", "txt", source_lang="auto").segments == ["(©)"]
    with pytest.raises(InvalidDocument, match="neither UTF-8 nor windows-1252"):
        extract(b"caf\x81", "txt", source_lang="auto")


def test_html_is_read_in_the_charset_it_declares_and_written_back_in_it():
    page = '<html><head><meta charset="windows-1251"></head><body><p>Привет, мир.</p></body></html>'
    assert extract(page.encode("cp1251"), "html", source_lang="en").segments == ["Привет, мир."]
    # ISO-8859-1 is read as windows-1252 (as browsers do); a pure ASCII page keeps its charset:
    # an umlaut written in UTF-8 under it reads as two wrong characters in a browser; a
    # character the charset lacks becomes a character reference
    page = ('<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1">'
            '<p>Next page</p>')
    out = translate_document(page.encode(), "html", lambda texts: ["Nächste Seite →"] * len(texts))
    assert out == page.replace("Next page", "Nächste Seite &#8594;").encode("cp1252")


def test_po_in_the_charset_it_declares_or_in_utf8_where_that_cannot_hold_the_translation():
    umlauts = functools.partial(translate_document, translate=lambda texts: [
        t.replace("a", "ä") for t in texts])
    # ASCII declared: a translation with an umlaut failed to encode (UnicodeEncodeError, a 500)
    out = umlauts(_po("ASCII", 'msgid "Save all"\nmsgstr ""\n').encode(), "po")
    catalog = polib.pofile(out.decode())
    assert catalog.metadata["Content-Type"] == "text/plain; charset=UTF-8"
    assert catalog[0].msgstr == "Säve äll"
    # ISO-8859-15 declared and used (é): refused as not UTF-8; read, and written in it again
    src = _po("ISO-8859-15", 'msgid "Café menu"\nmsgstr ""\n').encode("iso-8859-15")
    out = umlauts(src, "po")
    assert b"charset=ISO-8859-15" in out and "Cäfé menu" in out.decode("iso-8859-15")
    # a template's placeholders (xgettext writes them): the catalog says what it is now
    src = _po("CHARSET", 'msgid "one file"\nmsgid_plural "%d files"\nmsgstr[0] ""\n'
              'msgstr[1] ""\n', "nplurals=INTEGER; plural=EXPRESSION;")
    catalog = polib.pofile(umlauts(src.encode(), "pot").decode())
    assert catalog.metadata["Content-Type"] == "text/plain; charset=UTF-8"
    assert catalog.metadata["Plural-Forms"] == "nplurals=2; plural=(n != 1);"
    assert catalog[0].msgstr_plural == {0: "one file", 1: "%d files"}
    # none declared: gettext reads the catalog as ASCII, and Python's gettext fails on an umlaut
    src = 'msgid ""\nmsgstr ""\n"Project-Id-Version: x 1\\n"\n\nmsgid "Save"\nmsgstr ""\n'
    catalog = polib.pofile(umlauts(src.encode(), "po").decode())
    assert catalog.metadata == {"Project-Id-Version": "x 1",
                                "Content-Type": "text/plain; charset=UTF-8"}


XLIFF12 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="app">
    <body>
      <trans-unit id="greeting">
        <source>Hello <g id="1">dear</g> friend<x id="2"/></source></trans-unit>
      <trans-unit id="save"><source>Save file</source><target state="new">old</target>
        <note>A button</note></trans-unit>
      <trans-unit id="done"><source>Close</source><target state="final">Schliessen</target>
        </trans-unit>
    </body>
  </file>
</xliff>"""

XLIFF20 = b"""<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en">
  <file id="f1"><unit id="u1"><segment><source>Press <pc id="1">Enter</pc> now</source></segment>
  </unit></file></xliff>"""


def test_xliff_writes_targets_with_inline_elements():
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    root = etree.fromstring(run(XLIFF12, "xliff"))
    greeting, save, done = root.findall(".//x:trans-unit", ns)
    assert done.find("x:target", ns).text == "Schliessen"  # a finished translation stays
    target = greeting.find("x:target", ns)
    assert etree.tostring(target, encoding="unicode").split(">", 1)[1] == (
        'olleH <g id="1">raed</g> dneirf<x id="2"/></target>')
    assert greeting.find("x:source", ns).text == "Hello "  # the source is untouched
    assert save.find("x:target", ns).get("state") == "new"
    assert save.find("x:target", ns).text == "evaS elif"
    assert save.find("x:note", ns).text == "A button"
    root = etree.fromstring(run(XLIFF20, "xlf"))
    target = root.find(".//{urn:oasis:names:tc:xliff:document:2.0}target")
    assert target.text == "sserP " and target[0].text == "retnE" and target[0].tail == " won"


def test_html_attributes_people_read_are_translated_and_the_others_kept():
    page = ('<p><img src="car.png" alt="A red car" class="photo"> <a href="/setup" '
            'title="Open the settings">setup page</a> here.</p>\n'
            '<input placeholder=\'Your name\' aria-label="Name field" value="keep me">\n'
            '<div translate="no"><img alt="Brand logo"></div>\n'
            '<script>var s = \'<img alt="in a script">\';</script><img alt="" title="42">')
    segments = extract(page.encode(), "html").segments
    assert segments[1:] == ["A red car", "Open the settings", "Your name", "Name field"]
    out = run(page.encode(), "html").decode()
    assert '<img src="car.png" alt="A der rac" class="photo">' in out
    assert '<a href="/setup" title="nepO eht sgnittes">' in out
    assert "<input placeholder='ruoY eman' aria-label=\"emaN dleif\" value=\"keep me\">" in out
    assert '<img alt="Brand logo">' in out and '<img alt="in a script">' in out  # kept
    assert out.endswith('<img alt="" title="42">')
    # a quote in a translation is written as a character reference, the attribute whole
    quoted = translate_document(b'<img alt="A car">', "html", lambda ts: ['Ein "Auto"'] * len(ts))
    assert quoted == b'<img alt="Ein &quot;Auto&quot;">'


def test_html_a_tag_whose_quoted_value_holds_a_closing_bracket_stays_a_tag():
    # read up to that ">", the rest of the tag went to the model as text: href="x" came back
    # as HREF="X"&gt; and the link was broken
    page = b'<p>Open <a title="a > b" href="x">the file</a> now.</p>'
    out = translate_document(page, "html", lambda ts: [t.upper() for t in ts])
    assert out == b'<p>OPEN <a title="A &gt; B" href="x">THE FILE</a> NOW.</p>'


def test_an_element_without_content_marked_translate_no_keeps_only_itself():
    """A void element (img, input, br) marked translate="no" or notranslate has no end tag: it
    used to keep the rest of the page from the model; and its own readable attributes stay."""
    page = ('<p>First here.</p><img translate="no" alt="Brand logo" src="a.png">'
            '<input class="notranslate" placeholder="Code name"/>'
            '<p>Second <img src="b.png" alt="A red car"> sentence.</p>')
    segments = extract(page.encode(), "html").segments
    assert segments == ["First here.", 'Second <img src="b.png" alt="A red car"> sentence.',
                        "A red car"]


def test_html_and_xliff_declare_the_language_they_are_translated_into():
    page = (b'<!DOCTYPE html>\n<HTML Lang=en class="doc"><body><p>Hello <q lang="fr">salut'
            b'</q> world.</p></body></HTML>')
    out = translate_document(page, "html", fake, target_lang="de").decode()
    assert out.startswith('<!DOCTYPE html>\n<HTML Lang="de" class="doc"><body>')
    assert '<q lang="fr">' in out  # another element's language stays as written
    assert translate_document(page, "html", fake).startswith(page[:30])  # none given: as it was
    x = "{urn:oasis:names:tc:xliff:document:1.2}"
    root = etree.fromstring(translate_document(XLIFF12, "xliff", fake, target_lang="fr"))
    assert [f.get("target-language") for f in root.iter(f"{x}file")] == ["fr"]  # was "de"
    root = etree.fromstring(translate_document(XLIFF20, "xliff", fake, target_lang="de"))
    assert root.get("trgLang") == "de" and root.get("srcLang") == "en"


def test_xliff_keeps_native_code_and_units_not_to_translate():
    """The native code inside XLIFF 1.2's <bpt>, <ept>, <ph> and <it> used to go to the model
    as text: it came back translated, or with the sentence's words moved into it. A unit with
    translate="no" was translated all the same."""
    src = b"""<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" datatype="html" original="a.html"><body>
    <trans-unit id="1"><source>Click <bpt id="1">&lt;a href="x"&gt;</bpt>here<ept id="1">&lt;/a&gt;</ept> to go</source></trans-unit>
    <trans-unit id="2"><source>Copy <ph id="1">%s</ph> now</source></trans-unit>
    <trans-unit id="3" translate="no"><source>Brand name</source></trans-unit>
    <group translate="no"><trans-unit id="4"><source>Other brand</source></trans-unit></group>
  </body></file></xliff>"""  # noqa: E501
    assert extract(src, "xlf").segments == [
        'Click <bpt id="1"/>here<ept id="1"/> to go', 'Copy <ph id="1"/> now']
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    root = etree.fromstring(run(src, "xlf"))
    click, copy_, brand, other = root.findall(".//x:trans-unit", ns)
    target = click.find("x:target", ns)
    assert [(e.tag.split("}")[1], e.text) for e in target] == [
        ("bpt", '<a href="x">'), ("ept", "</a>")]
    assert "".join(target.itertext()).replace('<a href="x">', "").replace("</a>", "").split() \
        == ["kcilC", "ereh", "ot", "og"]
    assert copy_.find("x:target/x:ph", ns).text == "%s"
    assert brand.find("x:target", ns) is None and other.find("x:target", ns) is None
    src20 = XLIFF20.replace(b'<unit id="u1">', b'<unit id="u1" translate="no">')
    assert extract(src20, "xlf").segments == []
    src20 = XLIFF20.replace(b"<segment>", b'<segment state="final">').replace(
        b"</source>", b"</source><target>Jetzt <pc id=\"1\">Enter</pc></target>")
    assert extract(src20, "xlf").segments == []


def test_docx_keeps_paragraphs_runs_styles_tables_and_headers():

    document = docx_document()
    document.sections[0].header.paragraphs[0].text = "Company report"
    big = document.add_paragraph().add_run("Large red words")
    big.font.size = Pt(20)
    linked = document.add_paragraph("Read the ")
    link = docx.oxml.OxmlElement("w:hyperlink")
    link.set(qn("r:id"), linked.part.relate_to(
        "https://example.org", docx.opc.constants.RELATIONSHIP_TYPE.HYPERLINK, is_external=True))
    link.append(copy.deepcopy(linked.add_run("user guide")._r))
    linked._p.append(link)
    linked._p.remove(linked.runs[-1]._r)
    linked.add_run(" first.")
    out = docx.Document(io.BytesIO(run(docx_bytes(document), "docx")))
    assert [(q.style.name, q.text) for q in out.paragraphs] == [
        ("Heading 1", "launnA stluser"),
        ("List Bullet", "selaS werg yrev ylgnorts siht raey."),
        ("Normal", "egraL der sdrow"),
        ("Normal", "daeR eht resu ediug tsrif."),
    ]
    link = out.paragraphs[3]._p.find(qn("w:hyperlink"))
    assert "".join(t.text for t in link.iter(qn("w:t"))) == "resu ediug"
    assert out.part.rels[link.get(qn("r:id"))].target_ref == "https://example.org"
    runs = out.paragraphs[1].runs
    assert [(r.text, bool(r.bold)) for r in runs] == [
        ("selaS werg ", False), ("yrev ylgnorts", True), (" siht raey.", False)]
    assert out.paragraphs[2].runs[0].font.size == Pt(20)
    assert [c.text for c in out.tables[0].rows[0].cells] == ["tfeL llec", "thgiR llec"]
    assert out.sections[0].header.paragraphs[0].text == "ynapmoC troper"


def test_docx_a_link_of_several_runs_stays_one_link():
    # each piece of the translation inside a link got a link of its own: one link of a word in
    # bold and a word not became two links (three with the space between)
    document = docx.Document()
    p = document.add_paragraph("Read the ")
    link = docx.oxml.OxmlElement("w:hyperlink")
    link.set(qn("r:id"), p.part.relate_to(
        "https://example.org", docx.opc.constants.RELATIONSHIP_TYPE.HYPERLINK, is_external=True))
    for text, bold in (("user", False), (" guide", True)):
        r = p.add_run(text)
        r.bold = bold
        link.append(r._r)  # moved into the link
    p._p.append(link)
    p.add_run(" first.")
    out = docx.Document(io.BytesIO(run(docx_bytes(document), "docx")))
    links = out.paragraphs[0]._p.findall(qn("w:hyperlink"))
    assert len(links) == 1
    assert "".join(t.text for t in links[0].iter(qn("w:t"))) == "resu ediug"
    assert out.paragraphs[0].text == "daeR eht resu ediug tsrif."


def test_docx_runs_that_look_alike_are_one_group():
    # Word splits runs for spell checking and editing sessions, often inside a word: each was
    # a group of its own, and the model was asked for "impor" and "tant" apart
    document = docx.Document()
    p = document.add_paragraph("This is ")
    for text, bold, italic in (("impor", True, False), ("tant", True, False),
                               (" now", False, True)):
        r = p.add_run(text)
        r.bold, r.italic = bold, italic
    p.add_run(" for the users.")
    assert extract(docx_bytes(document), "docx").segments == [
        'This is <g id="1">important</g><g id="3"> now</g> for the users.']
    out = translate_document(docx_bytes(document), "docx",
                             lambda texts: [t.upper() for t in texts])
    assert [(r.text, r.bold, r.italic) for r in docx.Document(io.BytesIO(out)).paragraphs[0].runs
            ] == [("THIS IS ", None, None), ("IMPORTANT", True, False), (" ", None, None),
                  ("NOW", False, True), (" FOR THE USERS.", None, None)]


def _field_runs(paragraph, instruction: str, shown: str) -> None:
    """A complex field (as Word writes a page number) appended to a python-docx paragraph."""
    for kind, text in (("begin", None), ("instr", instruction), ("separate", None),
                       ("text", shown), ("end", None)):
        r = paragraph.add_run()._r
        if kind == "text":
            r.append(docx.oxml.OxmlElement("w:t"))
            r[-1].text = text
        elif kind == "instr":
            r.append(docx.oxml.OxmlElement("w:instrText"))
            r[-1].text = text
        else:
            r.append(docx.oxml.OxmlElement("w:fldChar"))
            r[-1].set(qn("w:fldCharType"), kind)


def test_docx_translates_text_in_runs_with_breaks_and_tabs_and_keeps_fields_whole():
    """Word puts a line break or tab in the same run as text (`<w:r><w:br/><w:t>`), and a
    w:lastRenderedPageBreak before the text of many runs: such a run used to be one atom, its
    text never translated. A field's runs (begin, instruction, separate, shown result, end)
    used to be separate atoms, and the end went back after the next words, which a field
    update then replaced by the page number."""
    document = docx.Document()
    p = document.add_paragraph()
    r = p.add_run("The first line ends here")
    r.add_break()
    r.add_text("and the second line follows.")
    document.add_paragraph("Name:\tJohn Smith is the owner")
    r = document.add_paragraph().add_run()
    r._r.append(docx.oxml.OxmlElement("w:lastRenderedPageBreak"))
    r.add_text("Text after a page break.")
    p = document.add_paragraph("Page ")
    _field_runs(p, " PAGE ", "1")
    p.add_run(" of the document")
    out = docx.Document(io.BytesIO(run(docx_bytes(document), "docx")))
    assert [q.text for q in out.paragraphs] == [
        "ehT tsrif enil sdne ereh\ndna eht dnoces enil swollof.",
        "emaN:\tnhoJ htimS si eht renwo",
        "txeT retfa a egap kaerb.",
        "egaP 1 fo eht tnemucod",
    ]
    assert not out.element.body.findall(".//" + qn("w:lastRenderedPageBreak"))
    footer = out.paragraphs[3]._p
    kinds = [c.get(qn("w:fldCharType")) or c.text for c in footer.iter(
        qn("w:fldChar"), qn("w:instrText"), qn("w:t"))]
    assert kinds == ["egaP ", "begin", " PAGE ", "separate", "1", "end", " fo eht tnemucod"]


W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
NOTES = {  # each part's reltype, content type, name and XML (python-docx writes no notes)
    "footnote": (RT.FOOTNOTES, CT.WML_FOOTNOTES, "/word/footnotes.xml", (
        f'<w:footnotes {W}>'
        '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p>'
        '</w:footnote>'
        '<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r>'
        '<w:continuationSeparator/></w:r></w:p></w:footnote>'
        '<w:footnote w:type="continuationNotice" w:id="1"><w:p><w:r><w:t>Continued below</w:t>'
        '</w:r></w:p></w:footnote>'
        '<w:footnote w:id="2"><w:p><w:pPr><w:pStyle w:val="FootnoteText"/></w:pPr><w:r><w:rPr>'
        '<w:vertAlign w:val="superscript"/></w:rPr><w:footnoteRef/></w:r><w:r>'
        '<w:t xml:space="preserve"> See the </w:t></w:r><w:r><w:rPr><w:b/></w:rPr>'
        '<w:t>annual</w:t></w:r><w:r><w:t xml:space="preserve"> report.</w:t></w:r></w:p>'
        '<w:p><w:r><w:t>Second note paragraph.</w:t></w:r></w:p></w:footnote></w:footnotes>')),
    "endnote": (RT.ENDNOTES, CT.WML_ENDNOTES, "/word/endnotes.xml", (
        f'<w:endnotes {W}>'
        '<w:endnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p>'
        '</w:endnote>'
        '<w:endnote w:type="continuationSeparator" w:id="0"><w:p><w:r>'
        '<w:continuationSeparator/></w:r></w:p></w:endnote>'
        '<w:endnote w:id="1"><w:p><w:r><w:rPr><w:vertAlign w:val="superscript"/></w:rPr>'
        '<w:endnoteRef/><w:t xml:space="preserve"> Figures are rounded.</w:t></w:r></w:p>'
        '</w:endnote></w:endnotes>')),
    "comment": (RT.COMMENTS, CT.WML_COMMENTS, "/word/comments.xml", (
        f'<w:comments {W}><w:comment w:id="0" w:author="Ann" w:initials="A"><w:p><w:r>'
        '<w:annotationRef/></w:r><w:r><w:t>Check this number.</w:t></w:r></w:p></w:comment>'
        '</w:comments>')),
}


def _with_notes(document) -> bytes:
    """The document with a footnote, an endnote and a comment on its last paragraph, the parts
    holding them written as Word writes them (separator notes first, the note's own number as
    the first run of its paragraph), except that the endnote's number shares a run with its
    text, which the reader cuts in two."""
    p = document.add_paragraph("Revenue rose")
    for tag, ref in (("footnoteReference", "2"), ("endnoteReference", "1")):
        r = p.add_run()._r
        r.append(docx.oxml.OxmlElement(f"w:{tag}"))
        r[-1].set(qn("w:id"), ref)
    p.add_run(" in the spring.")
    start, end = (docx.oxml.OxmlElement(t) for t in ("w:commentRangeStart", "w:commentRangeEnd"))
    start.set(qn("w:id"), "0")
    end.set(qn("w:id"), "0")
    p.runs[0]._r.addprevious(start)
    p.runs[0]._r.addnext(end)
    r = p.add_run()._r
    r.append(docx.oxml.OxmlElement("w:commentReference"))
    r[-1].set(qn("w:id"), "0")
    for reltype, content_type, name, xml in NOTES.values():
        part = Part(PackURI(name), content_type, xml.encode(), document.part.package)
        document.part.relate_to(part, reltype)
    return docx_bytes(document)


def _notes_part(document, kind: str):
    """The root of a notes part of an opened document, whichever way python-docx loaded it."""
    part = document.part.part_related_by(NOTES[kind][0])
    return part.element if isinstance(part, XmlPart) else etree.fromstring(part.blob)


def _note_texts(root, kind: str) -> list[tuple[str | None, str | None, list[str]]]:
    """(type, id, [the text and marks of each paragraph]) for each note or comment."""
    marks = {qn(f"w:{m}"): f"[{m}]" for m in (
        "separator", "continuationSeparator", "footnoteRef", "endnoteRef", "annotationRef")}
    return [(note.get(qn("w:type")), note.get(qn("w:id")), [
        "".join(marks.get(el.tag) or el.text or "" for el in p.iter(qn("w:t"), *marks))
        for p in note.iter(qn("w:p"))]) for note in root.iterchildren(qn(f"w:{kind}"))]


def test_docx_translates_footnotes_endnotes_and_comments_and_keeps_their_marks():
    """The footnotes, endnotes and comments parts were left in the source language. Their
    separator notes stay as they are, each note's own number stays its paragraph's first run
    (it never goes to the model), and the body's references still name the same notes."""
    data = _with_notes(docx_document())
    assert extract(data, "docx").segments[4:] == [
        '<x id="0"/>Revenue rose<x id="2"/><x id="3"/><x id="4"/> in the spring.<x id="6"/>',
        ' See the <g id="1">annual</g> report.', "Second note paragraph.",
        " Figures are rounded.", "Check this number."]
    out = docx.Document(io.BytesIO(run(data, "docx")))
    assert _note_texts(_notes_part(out, "footnote"), "footnote") == [
        ("separator", "-1", ["[separator]"]),
        ("continuationSeparator", "0", ["[continuationSeparator]"]),
        ("continuationNotice", "1", ["Continued below"]),
        (None, "2", ["[footnoteRef] eeS eht launna troper.", "dnoceS eton hpargarap."]),
    ]
    assert _note_texts(_notes_part(out, "endnote"), "endnote") == [
        ("separator", "-1", ["[separator]"]),
        ("continuationSeparator", "0", ["[continuationSeparator]"]),
        (None, "1", ["[endnoteRef] serugiF era dednuor."]),
    ]
    assert _note_texts(_notes_part(out, "comment"), "comment") == [
        (None, "0", ["[annotationRef]kcehC siht rebmun."])]
    assert [(c.comment_id, c.author, c.text) for c in out.comments] == [
        (0, "Ann", "kcehC siht rebmun.")]
    ref, *runs = _notes_part(out, "footnote").findall("w:footnote[@w:id='2']/w:p[1]/w:r", nsmap)
    assert ref.find("w:footnoteRef", nsmap) is not None
    assert ref.find("w:rPr/w:vertAlign", nsmap).get(qn("w:val")) == "superscript"
    assert [(r.findtext("w:t", namespaces=nsmap), r.find("w:rPr/w:b", nsmap) is not None)
            for r in runs] == [
        (" eeS eht ", False), ("launna", True), (" troper.", False)]
    body = out.paragraphs[-1]._p
    assert [(el.tag.split("}")[1], el.get(qn("w:id"))) for el in body.iter(
        qn("w:commentRangeStart"), qn("w:commentRangeEnd"), qn("w:footnoteReference"),
        qn("w:endnoteReference"), qn("w:commentReference"))] == [
        ("commentRangeStart", "0"), ("commentRangeEnd", "0"), ("footnoteReference", "2"),
        ("endnoteReference", "1"), ("commentReference", "0")]
    assert out.paragraphs[-1].text.split() == ["euneveR", "esor", "ni", "eht", "gnirps."]


def test_docx_footnote_reference_stays_after_its_word():
    """A footnote reference run glued to a word ("manual¹ for details") came back in front of
    that word, spaced: the translation's words are longer, and a tag standing alone went to
    the word start nearest its relative place. It follows the same word's translation."""
    document = docx.Document()
    p = document.add_paragraph("See the manual")
    r = p.add_run()._r
    r.append(docx.oxml.OxmlElement("w:footnoteReference"))
    r[-1].set(qn("w:id"), "2")
    p.add_run(" for details.")
    words = {"See": "Siehe", "the": "das", "manual": "Handbuch", "for": "für",
             "details.": "Details."}

    def german(texts: list[str]) -> list[str]:
        return [" ".join(words.get(w, w) for w in t.split()) for t in texts]

    out = docx.Document(io.BytesIO(translate_document(docx_bytes(document), "docx", german)))
    body = out.paragraphs[-1]._p
    pieces = ["[ref]" if el.tag == qn("w:footnoteReference") else el.text
              for el in body.iter(qn("w:t"), qn("w:footnoteReference"))]
    assert "".join(pieces) == "Siehe das Handbuch[ref] für Details."


def test_docx_without_notes_is_read_and_written_as_before():
    data = docx_bytes(docx_document())
    assert extract(data, "docx").segments == [
        "Annual results", 'Sales grew <g id="1">very strongly</g> this year.',
        "Left cell", "Right cell"]
    with zipfile.ZipFile(io.BytesIO(data)) as before, \
            zipfile.ZipFile(io.BytesIO(run(data, "docx"))) as after:
        assert after.namelist() == before.namelist()
        for name in before.namelist():
            if name != "word/document.xml":
                assert after.read(name) == before.read(name), name


def test_odt_keeps_headings_spans_styles_and_spaces():
    data = odt_file(" and   relax.")  # the run of spaces becomes text:s
    out = opendocument.load(io.BytesIO(run(data, "odt")))
    heading, para = out.getElementsByType(odftext.H) + out.getElementsByType(odftext.P)
    assert teletype.extractText(heading) == "ylretrauQ nalp"
    assert heading.getAttribute("outlinelevel") == "1"
    spans = para.getElementsByType(odftext.Span)
    assert [(s.getAttribute("stylename"), teletype.extractText(s)) for s in spans] == [
        ("Strong", "txen keew")]
    assert len(para.getElementsByType(odftext.S)) == 1
    assert teletype.extractText(para).startswith("eW pihs txen keew dna")


def _odt_translated(*paragraphs):
    """odt_file() with these paragraphs (or headings) added, through the fake, read back."""
    document = opendocument.load(io.BytesIO(odt_file()))
    for p in paragraphs:
        document.text.addElement(p)
    buf = io.BytesIO()
    document.write(buf)
    return opendocument.load(io.BytesIO(run(buf.getvalue(), "odt")))


def test_odt_line_breaks_and_tabs_get_no_spaces_around_them():
    # put back in the sentence, they got a space on each side: the next line began with one
    p = odftext.P(text="First line")
    p.addElement(odftext.LineBreak())
    teletype.addTextToElement(p, "second line\tafter a tab.")
    para = _odt_translated(p).getElementsByType(odftext.P)[-1]
    assert teletype.extractText(para) == "tsriF enil\ndnoces enil\tretfa a bat."
    assert len(para.getElementsByType(odftext.LineBreak)) == 1


def test_odt_a_link_with_a_span_in_it_stays_one_link():
    p = odftext.P(text="Read the ")
    link = odftext.A(href="https://example.org", type="simple")
    link.addElement(odftext.Span(stylename="Strong", text="user"))
    teletype.addTextToElement(link, " guide")
    p.addElement(link)
    teletype.addTextToElement(p, " first.")
    para = _odt_translated(p).getElementsByType(odftext.P)[-1]
    links = para.getElementsByType(odftext.A)
    assert [teletype.extractText(a) for a in links] == ["resu ediug"]
    assert [teletype.extractText(s) for s in links[0].getElementsByType(odftext.Span)] == ["resu"]


def test_odt_a_field_in_a_span_stays_in_it():
    # a span holding only a field (a page number in bold): the field came back bare, its
    # format lost
    p = odftext.P(text="Total pages: ")
    span = odftext.Span(stylename="Strong")
    span.addElement(odftext.PageCount(text="3"))
    p.addElement(span)
    para = _odt_translated(p).getElementsByType(odftext.P)[-1]
    spans = para.getElementsByType(odftext.Span)
    assert [(s.getAttribute("stylename"), len(s.getElementsByType(odftext.PageCount)))
            for s in spans] == [("Strong", 1)]
    assert teletype.extractText(para) == "latoT segap: 3"


def test_odt_paragraphs_inside_a_frame_in_a_paragraph_are_translated_too():
    # an image's caption (a paragraph in a frame's text box, in a paragraph or heading): the
    # outer paragraph's rebuild took the frame out of odfpy's element caches, and the inner
    # paragraph's then failed on it (ValueError: list.remove(x): x not in list)
    outers = (odftext.P(text="See the plan "), odftext.H(outlinelevel=2, text="Plan "))
    for outer in outers:
        frame = draw.Frame(width="5cm", height="3cm", anchortype="as-char")
        box = draw.TextBox()
        caption = odftext.P(text="Figure ")
        caption.addElement(odftext.Span(text="one"))
        teletype.addTextToElement(caption, " shows it")
        box.addElement(caption)
        frame.addElement(box)
        outer.addElement(frame)
        teletype.addTextToElement(outer, " below.")
    out = _odt_translated(*outers)
    outer = [out.getElementsByType(odftext.P)[-3], out.getElementsByType(odftext.H)[-1]]
    assert [teletype.extractText(p) for p in outer] == [
        "eeS eht nalp erugiF eno swohs ti woleb.", "nalP erugiF eno swohs ti woleb."]
    captions = [frame.getElementsByType(odftext.P)[0] for frame in out.getElementsByType(
        draw.Frame)]
    assert [teletype.extractText(p) for p in captions] == ["erugiF eno swohs ti"] * 2
    assert [len(p.getElementsByType(odftext.Span)) for p in captions] == [1, 1]


def test_odt_a_frame_in_a_span_whose_caption_has_a_space_in_a_span_is_written():
    """An element inside a span (a frame, two spaces: text:s) was moved into the rebuilt
    paragraph by odfpy's removeChild, which also took it, and all inside it, out of the
    document's element caches: the frame's caption paragraph, rebuilt next, then failed on
    its own space element (ValueError: list.remove(x): x not in list). Each removeChild also
    searched the document's whole list of elements of its kind."""
    outer = odftext.P(text="See ")
    span = odftext.Span(text="the plan ")
    frame = draw.Frame(width="5cm", height="3cm", anchortype="as-char")
    box = draw.TextBox()
    caption = odftext.P(text="Figure ")
    inner = odftext.Span()
    teletype.addTextToElement(inner, "one  wide")  # two spaces: a text:s element
    caption.addElement(inner)
    box.addElement(caption)
    frame.addElement(box)
    span.addElement(frame)
    outer.addElement(span)
    teletype.addTextToElement(outer, " below.")
    out = _odt_translated(outer)
    caption = out.getElementsByType(draw.Frame)[0].getElementsByType(odftext.P)[0]
    assert teletype.extractText(caption) == "erugiF eno  ediw"
    assert len(out.getElementsByType(odftext.S)) == 1


def test_odt_with_a_pretty_printed_meta_part_is_written():
    # whitespace between the elements of <office:meta> (a meta.xml written by another tool than
    # LibreOffice): odfpy's write took every child for an element and failed on the text
    # (AttributeError: 'Text' object has no attribute 'qname')
    data = odt_file()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        meta = archive.read("meta.xml").decode()
    meta = meta.replace("<office:meta>", "<office:meta>\n  ").replace("</office:meta>",
                                                                       "\n</office:meta>")
    out = opendocument.load(io.BytesIO(run(replace_part(data, "meta.xml", meta.encode()),
                                           "odt")))
    assert teletype.extractText(out.getElementsByType(odftext.H)[0]) == "ylretrauQ nalp"



def _with_namespaces(data: bytes, uris: list[str]) -> bytes:
    """data's first paragraph with an attribute in each of these namespaces."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        content = archive.read("content.xml").decode()
    marks = "".join(f' xmlns:u{k}="{uri}" u{k}:mark="v"' for k, uri in enumerate(uris))
    content = content.replace("<text:p", "<text:p" + marks, 1)
    return replace_part(data, "content.xml", content.encode())


def test_odt_namespaces_of_one_file_stay_out_of_the_next():
    # odfpy keeps the namespaces it has read in registries shared by the whole process, and a
    # written file declared all of them: one user's namespace URIs came out in every later
    # user's file, and the registries grew with every new URI uploaded
    from odf import element

    clean = run(odt_file(), "odt")
    before = len(element.nsdict), len(element.Element.namespaces)
    private = [f"urn:private-of-user-a:{k}" for k in range(300)]
    theirs = run(_with_namespaces(odt_file(), private), "odt")
    with zipfile.ZipFile(io.BytesIO(theirs)) as archive:
        root = etree.fromstring(archive.read("content.xml"))  # their prefixes are declared
    assert len([v for v in root.iter() if "{urn:private-of-user-a:7}mark" in v.attrib]) == 1
    again = run(odt_file(), "odt")
    with zipfile.ZipFile(io.BytesIO(again)) as a, zipfile.ZipFile(io.BytesIO(clean)) as b:
        assert a.namelist() == b.namelist()
        for name in a.namelist():
            assert b"private-of-user-a" not in a.read(name), name
            assert a.read(name) == b.read(name), name
    assert (len(element.nsdict), len(element.Element.namespaces)) == before


A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"


def _pptx_paragraphs(archive, name: str) -> list:
    return [p for p in etree.fromstring(archive.read(name)).iter(f"{A}p")
            if "".join(p.itertext()).strip()]


def test_pptx_slides_in_order_then_their_notes_with_runs_as_tags():
    # slides, shapes, groups, tables, then the slide's speaker notes; the layout's prompt and
    # a paragraph holding only a slide number are not content
    assert extract(pptx_file(), "pptx").segments == [
        "Quarterly plan",
        'We ship <g id="1">important</g> news<x id="4"/>on slide <x id="6"/> of ten.',
        "Grouped words", "Left cell", "Right cell", "Say hello first.", "Thank you."]


def test_pptx_keeps_run_formats_breaks_fields_and_every_other_part():
    data = pptx_file()
    with zipfile.ZipFile(io.BytesIO(data)) as before, \
            zipfile.ZipFile(io.BytesIO(run(data, "pptx"))) as after:
        assert [(i.filename, i.compress_type) for i in after.infolist()] == [
            (i.filename, i.compress_type) for i in before.infolist()]
        translated = {"ppt/slides/slide1.xml", "ppt/slides/slide2.xml",
                      "ppt/notesSlides/notesSlide1.xml"}
        for name in set(before.namelist()) - translated:
            assert after.read(name) == before.read(name), name
        title, body, *rest = _pptx_paragraphs(after, "ppt/slides/slide2.xml")
        notes = _pptx_paragraphs(after, "ppt/notesSlides/notesSlide1.xml")
        thanks = _pptx_paragraphs(after, "ppt/slides/slide1.xml")
    assert ["".join(p.itertext()) for p in [title, *rest, *notes, *thanks]] == [
        "ylretrauQ nalp", "depuorG sdrow", "tfeL llec", "thgiR llec", "yaS olleh tsrif.",
        "1", "knahT uoy."]
    assert [etree.QName(c).localname for c in body] == [
        "pPr", "r", "r", "r", "br", "r", "fld", "r", "endParaRPr"]
    assert [(c.findtext(f"{A}t"), c.find(f"{A}rPr").get("b")) for c in body.iter(f"{A}r")] == [
        ("eW pihs ", None), ("tnatropmi", "1"), (" swen", None), ("no edils ", None),
        (" fo net.", None)]
    field = body.find(f"{A}fld")
    assert (field.get("type"), field.findtext(f"{A}t")) == ("slidenum", "1")


def test_pptx_broken_or_hostile_is_refused_naming_the_format():
    data = pptx_file()
    with pytest.raises(InvalidDocument, match=r"\.pptx: File is not a zip file"):
        extract(data[: len(data) // 2], "pptx")
    with pytest.raises(InvalidDocument, match="no presentation part"):
        extract(replace_part(data, "_rels/.rels", b"<Relationships/>"), "pptx")
    with pytest.raises(InvalidDocument, match=r"\.pptx: .*amplification"):  # billion laughs
        extract(replace_part(data, "ppt/slides/slide1.xml", entity_expansion_xliff()), "pptx")
    secret = (f'<!DOCTYPE p:sld [<!ENTITY x SYSTEM "file://{__file__}">]><p:sld '
              'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:p="http://'
              'schemas.openxmlformats.org/presentationml/2006/main"><a:p><a:r><a:t>Hi &x;'
              "</a:t></a:r></a:p></p:sld>")
    with pytest.raises(InvalidDocument, match="declares a DTD") as refused:  # never read
        extract(replace_part(data, "ppt/slides/slide1.xml", secret.encode()), "pptx")
    assert "Hi" not in str(refused.value) and "pytest" not in str(refused.value)


def test_odp_pages_and_their_notes_are_read_as_odt_and_the_master_pages_left_alone():
    assert extract(odp_file(), "odp").segments == [
        'Quarterly <g id="0">plan</g>', "Say hello first.", "Thank you."]
    out = opendocument.load(io.BytesIO(run(odp_file(), "odp")))
    assert out.mimetype == "application/vnd.oasis.opendocument.presentation"
    pages = out.presentation.getElementsByType(draw.Page)
    assert [[teletype.extractText(p) for p in page.getElementsByType(odftext.P)]
            for page in pages] == [["ylretrauQ nalp", "yaS olleh tsrif."], ["knahT uoy."]]
    assert [(s.getAttribute("stylename"), teletype.extractText(s))
            for s in pages[0].getElementsByType(odftext.Span)] == [("Strong", "nalp")]
    assert [teletype.extractText(p) for p in out.masterstyles.getElementsByType(odftext.P)] == [
        "Click to add Title"]


def test_utf32_text_is_read_and_a_reader_error_is_told_briefly():
    # a UTF-32 file was read as UTF-16 (its BOM starts like one): a subtitle file came back
    # refused with 1,700 characters of what the srt library could not match, NULs and all
    for encoding in ("utf-32-le", "utf-32-be"):
        data = "\ufeff1\n00:00:01,000 --> 00:00:02,000\nHello there\n".encode(encoding)
        assert extract(data, "srt").segments == ["Hello there"]
        assert run(data, "srt").decode("utf-32").endswith("olleH ereht\n\n")
    with pytest.raises(InvalidDocument) as err:
        extract(b"no cue here " * 500 + b"\n\n1\n00:00:01,000 --> 00:00:02,000\nHi\n", "srt")
    assert err.value.message.startswith("cannot read the file as .srt: ")
    assert len(err.value.message) < 300


@pytest.mark.parametrize(("fmt", "module", "reads_one"), [
    ("docx", docx_file, "_encode"),
    ("pptx", pptx_reader, "_encode"),
    ("md", markdown_file, "_emphasis"),
    ("xliff", xliff_file, "_inner"),
])
def test_a_document_over_a_limit_is_read_no_further(monkeypatch, fmt, module, reads_one):
    """Forty paragraphs and a limit of five: the document is refused at the sixth, naming
    the limit, and the paragraphs after it are never read (`reads_one` reads one)."""
    calls = []
    real = getattr(module, reads_one)
    monkeypatch.setattr(module, reads_one, lambda *args: calls.append(1) or real(*args))
    with pytest.raises(DocumentTooLarge, match="segments; the limit is 5") as err:
        extract(hostile.paragraphs(fmt, 40), fmt, Limits(max_segments=5))
    assert err.value.limit == 5 and len(calls) == 6


# every kind of run a page has: inline tags and code, a sentence over a line break, kept
# elements, verbatim blocks, attributes people read, references, a comment
MIXED = ("<h2 title='Part {k}'>Part {k}</h2><p>Run <code>make all</code> to <b>build</b> it"
         "<br>and then <a href='x'>open</a> the file.</p><pre>kept {k}</pre>\n"
         "<p>Open &amp; <span translate='no'>Acme</span> close.<br/>Next line.</p>"
         "<script>var a = '<p>no</p>';</script><!-- a <p>comment</p> -->"
         "<p><img src='a.png' alt='A red house'/>&nbsp;</p><p>&#160;</p><ul><li>Item {k}"
         "</li></ul>\n")


@pytest.mark.parametrize("step", [7, 97, 1000])
def test_a_page_parsed_a_step_at_a_time_has_the_same_segments(monkeypatch, step):
    page = "".join(MIXED.format(k=k) for k in range(40)).encode()
    whole = extract(page, "html")
    monkeypatch.setattr(html_file, "_STEP", step)
    assert extract(page, "html").segments == whole.segments
    assert len(whole.segments) == 40 * 7


def test_a_page_over_a_limit_is_parsed_no_further(monkeypatch):
    """A page of 400 paragraphs and a limit of five: refused, naming the limit, after its
    first step is parsed."""
    monkeypatch.setattr(html_file, "_STEP", 1000, raising=False)
    fed = []
    real = html_file._BlockSplitter.feed
    monkeypatch.setattr(html_file._BlockSplitter, "feed",
                        lambda self, data: fed.append(len(data)) or real(self, data))
    page = hostile.paragraphs("html", 400)
    with pytest.raises(DocumentTooLarge, match="segments; the limit is 5"):
        extract(page, "html", Limits(max_segments=5))
    assert sum(fed) == 1000 < len(page)


def test_an_odt_over_a_limit_is_refused_before_odfpy_reads_it(monkeypatch):
    loads = []
    real = odt_reader.opendocument.load
    monkeypatch.setattr(odt_reader.opendocument, "load", lambda f: loads.append(1) or real(f))
    data = hostile.paragraphs("odt", 40)
    with pytest.raises(DocumentTooLarge, match="segments; the limit is 5"):
        extract(data, "odt", Limits(max_segments=5))
    with pytest.raises(DocumentTooLarge, match="characters to translate; the limit is 100"):
        extract(data, "odt", Limits(max_chars=100))
    assert loads == []


@pytest.mark.parametrize("data", [odt_file("  and   later\tthat day"), odp_file()])
def test_an_odf_file_just_at_its_limits_is_read(data):
    """What the probe before odfpy counts is never more than the segments hold."""
    doc = extract(data, "odt")
    at = Limits(max_segments=len(doc.segments), max_chars=sum(map(len, doc.segments)))
    assert extract(data, "odt", at).segments == doc.segments


def test_subtitles_over_a_limit_are_read_no_further():
    """A file with a broken cue (its times) is unreadable, once the reading gets there; over
    the limit before it, it is refused before."""
    data = hostile.paragraphs("srt", 40).replace(b"00:00:30,000 -->", b"00:00:30.000 ->")
    with pytest.raises(InvalidDocument, match="cannot read the file as .srt"):
        extract(data, "srt")
    with pytest.raises(DocumentTooLarge, match="characters to translate; the limit is 100"):
        extract(data, "srt", Limits(max_chars=100))


@pytest.mark.parametrize("fmt", ["pptx", "docx", "odt", "epub"])
@pytest.mark.parametrize("damage", ["header", "data"])
def test_a_zipped_file_with_a_part_that_cannot_be_unpacked_is_refused_naming_it(fmt, damage):
    """The zip's directory is whole but one part's own header or its data is damaged: a
    presentation's reader left the parts it does not translate to its writer, which copied
    them and failed there (a 500). Each format's last part (a master page, a picture ...)."""
    data = {"pptx": pptx_file, "docx": lambda: docx_bytes(docx_document()), "odt": odt_file,
            "epub": lambda: epub_bytes(epub_parts())}[fmt]()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.infolist()[-1]
    at = info.header_offset if damage == "header" else (
        info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) + 2)
    broken = data[:at] + bytes([data[at] ^ 0x5A]) + data[at + 1 :]
    # the reason in the service's words, not the library's ("negative seek value -8")
    reason = ("its header is damaged" if damage == "header" else
              "(its compressed data is damaged|its data does not match its checksum)")
    message = re.escape(f"the entry {info.filename} cannot be unpacked: ") + reason + "$"
    with pytest.raises(InvalidDocument, match=message):
        run(broken, fmt)


@pytest.mark.parametrize(("bits", "method", "reason"), [
    (1, None, "it is encrypted"),
    (0, 99, "it is compressed with a method this service does not read (99)"),
])
def test_an_encrypted_or_unknown_compressed_part_is_refused_saying_so(bits, method, reason):
    data = docx_bytes(docx_document())
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.infolist()[-1]
    # its entry in the zip's directory: the flags at byte 8, the method at byte 10
    at = data.rindex(b"PK\x01\x02", 0, data.rindex(info.filename.encode()))
    assert data[at + 46 : at + 46 + len(info.filename)] == info.filename.encode()
    entry = bytearray(data[at : at + 12])
    entry[8] |= bits
    if method is not None:
        entry[10:12] = method.to_bytes(2, "little")
    broken = data[:at] + bytes(entry) + data[at + 12 :]
    with pytest.raises(InvalidDocument, match=re.escape(
            f"the entry {info.filename} cannot be unpacked: {reason}") + "$"):
        run(broken, "docx")


@pytest.mark.parametrize("part", ["content.xml", "styles.xml"])
def test_an_odf_file_nested_too_deep_to_write_back_is_refused(part):
    """odfpy reads elements nested thousands deep (its parser is expat's) and writes them back
    one call per level: RecursionError after the translation, a 500."""
    data = odt_file()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        xml = archive.read(part).decode()
    end = "</office:text>" if part == "content.xml" else "</office:automatic-styles>"
    deep = "<text:section>" * 3000 + "<text:p>Deep words</text:p>" + "</text:section>" * 3000
    assert end in xml
    broken = replace_part(data, part, xml.replace(end, deep + end).encode())
    with pytest.raises(InvalidDocument, match="nests elements more than 200 deep"):
        run(broken, "odt")


@pytest.mark.parametrize(("part", "old", "new"), [
    ("content.xml", "<text:h ", '<text:h style="x" '),  # an attribute in no namespace
    ("meta.xml", "<office:meta>", "<office:meta><generator>x</generator>"),  # an element
])
def test_an_odf_file_with_names_in_no_namespace_is_refused(part, old, new):
    """odfpy gives the empty namespace a prefix and declares it (xmlns:ns42=""), which XML
    forbids: the file written back opened nowhere, odfpy included."""
    data = odt_file()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        xml = archive.read(part).decode()
    assert old in xml
    broken = replace_part(data, part, xml.replace(old, new, 1).encode())
    with pytest.raises(InvalidDocument, match="in no namespace"):
        run(broken, "odt")


def test_a_zip_whose_directory_needs_a_newer_zip_version_is_refused():
    """zipfile refuses to open an archive whose directory says an entry needs a zip version past
    the ones it knows (NotImplementedError, not BadZipFile): the zip check before the reader
    let it through as an error of the service."""
    data = odt_file()
    at = data.index(b"PK\x01\x02") + 6  # the first directory entry's version needed
    broken = data[:at] + (148).to_bytes(2, "little") + data[at + 2 :]
    with pytest.raises(InvalidDocument, match="zip file version 14.8"):
        run(broken, "odt")


def test_an_xliff_source_with_a_long_run_of_spaces_is_read_in_linear_time():
    """The pattern that takes namespace declarations out of a source's markup began with \\s+
    and was tried from every space of a run, each time to the run's end: the square of the
    run (an attribute of 300,000 spaces: hours). In a child given half a minute."""
    unit = f'<g id="b" note="{" " * 300_000}">next week</g>'
    data = XLIFF12.replace(b"<source>Hello", f"<source>{unit} Hello".encode())
    assert run_case(data, "xliff", timeout=30, checks=False).kind == "ok"
    assert xliff_file._inner(etree.fromstring(
        '<s xmlns="urn:x"><g xmlns:a="urn:a" id="1">a</g>\t <b xmlns="urn:x"/></s>')) == (
        '<g id="1">a</g>\t <b/>')


def html_file_page(body: str) -> bytes:
    return f"<html><head><title>A page</title></head><body>{body}</body></html>".encode()


def _docx_with(part: str, old: str, new: str) -> bytes:
    data = docx_bytes(docx_document())
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        xml = archive.read(part).decode()
    assert old in xml
    return replace_part(data, part, xml.replace(old, new, 1).encode())


@pytest.mark.parametrize(("part", "old", "new", "message"), [
    ("word/_rels/document.xml.rels", 'Id="rId3" ', "",
     "/word/document.xml has a relationship without an Id"),
    ("customXml/_rels/item1.xml.rels", 'Type="http', 'Kind="http',
     "/customXml/item1.xml has a relationship without a Type"),
    ("[Content_Types].xml", 'ContentType="application/vnd.openxmlformats-officedocument.theme',
     'Kind="x', "/word/theme/theme1.xml has no content type"),
])
def test_a_docx_package_python_docx_could_not_write_back_is_refused(part, old, new, message):
    """python-docx reads a relationship without an Id or a Type, and a part without a content
    type, and fails only when it writes the package again (TypeError: a 500)."""
    with pytest.raises(InvalidDocument, match=re.escape(message)):
        extract(_docx_with(part, old, new), "docx")


def test_a_text_after_thousands_of_unclosed_tags_is_read_in_linear_time():
    """The search for the tags that open at a text's end (to move them out of it) started at
    each tag of a run before the text and matched to the run's end each time: the square of the
    tags (200,000 in a heading: ten minutes, holding the GIL). In a child given half a
    minute."""
    page = html_file_page("<h1>" + "<b>" * 200_000 + "Quarterly plan</h1>")
    assert run_case(page, "html", timeout=30, checks=False).kind == "ok"


@pytest.mark.parametrize("seed", range(3))
def test_the_tags_opening_at_a_texts_end_are_those_the_pattern_finds(seed):
    rng = random.Random(seed)
    pieces = ["<b>", "</b>", "<a href='x'>", "<!-- c -->", "<br/>", "word", " ", ">", "<", "<>"]
    for _ in range(2000):
        chunk = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        start = rng.randint(0, len(chunk))
        found = re.compile(r"(?:<[^/!<>][^<>]*>)+$").search(chunk, start)
        assert html_file._opening_tags(chunk, start) == (found.start() if found else len(chunk))


def _parsed(text: str):
    """srt_file._parse's subtitles, or the error's type when it refuses the text."""
    try:
        return list(srt_file._parse(text))
    except ValueError as exc:
        return type(exc)


@pytest.mark.parametrize("seed", range(3))
def test_subtitles_are_parsed_as_the_srt_library_parses_them(seed):
    """Texts put together at random from the pieces of cues (numbers with and without a dot,
    times written the ways the library takes, blank lines in and between cues, a byte order
    mark, spaces): the cues read are the library's, and a text the library refuses is
    refused."""
    rng = random.Random(seed)
    pieces = ["1", "-2", "3.5", "12.", "\n", "\r\n", "\n\n", " ", "  \t", "\ufeff", "x",
              "00:00:01,000 --> 00:00:02,000", "0:0:3.5 -> 0:0:4", "00:00:05:000 --> 00:01:00",
              "Hello there", "- Who?", "<i>Oh</i>", "99", "00:00:01,000"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        try:
            expected = list(srt.parse(text))
        except srt.SRTParseError:
            expected = ValueError
        assert _parsed(text) == expected, repr(text)


def test_subtitles_with_long_runs_of_digits_or_spaces_are_read_in_linear_time():
    """The srt library's pattern splits a run of digits (a cue's number, a line of digits in a
    cue) between two of its parts in every way before it gives up, and its search starts again
    at every character of a run of spaces it cannot match: n squared steps, hours for these
    (in one thread holding the GIL). Each file in a child process given half a minute."""
    cue = "1\n00:00:01,000 --> 00:00:02,000\n"
    files = {
        cue + "Count on\n" + "7" * 300_000 + "\n": "ok",
        cue + "Hello.\n\n" + "1" * 300_000: "ok",
        "1\n" + " " * 300_000 + "x": "refused",
    }
    for text, outcome in files.items():
        assert run_case(text.encode(), "srt", timeout=30, checks=False).kind == outcome


def test_formats_limits_and_broken_files():
    assert format_of("Report.DOCX") == "docx" and format_of("a/b.xlf") == "xlf"
    with pytest.raises(UnsupportedFormat, match=r"\.exe") as unsupported:
        format_of("setup.exe")
    assert isinstance(unsupported.value, UnsupportedMediaType)
    with pytest.raises(DocumentTooLarge) as err:
        extract(b"x" * 101, "txt", Limits(max_bytes=100))
    assert err.value.limit == 100 and "101 bytes" in err.value.message
    assert isinstance(err.value, TooLarge) and err.value.field == "file"  # mapped like the rest
    with pytest.raises(DocumentTooLarge, match="3 segments; the limit is 2"):
        extract(b"a\n\nb\n\nc\n", "txt", Limits(max_segments=2))  # three paragraphs
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"\0" * 2_000_000)  # a few KB packed
    with pytest.raises(DocumentTooLarge, match="unpacks to 2000000 bytes; the limit is 1000000"):
        extract(bomb.getvalue(), "docx", Limits(max_unpacked_bytes=1_000_000))
    with pytest.raises(InvalidDocument, match=r"\.docx"):
        extract(b"not a zip file", "docx")
    with pytest.raises(InvalidDocument, match="neither UTF-8 nor windows-1252") as invalid:
        extract(b"caf\x81", "txt")  # 0x81: no character in windows-1252
    assert isinstance(invalid.value, InvalidInput)


def test_a_document_is_split_by_the_rules_of_its_source_language():
    """A German document's ordinals end no sentence (app.text.segment.rules_for); without a
    source language they do, as in any text."""
    text = "Am 3. Oktober beginnt die Messe. Sie endet im 4. Quartal."
    seen: list[str] = []

    def record(sentences: list[str]) -> list[str]:
        seen.extend(sentences)
        return sentences

    assert translate_document(text.encode(), "txt", record, source_lang="de") == text.encode()
    assert seen == ["Am 3. Oktober beginnt die Messe.", "Sie endet im 4. Quartal."]
    seen.clear()
    translate_document(text.encode(), "txt", record)
    assert seen == ["Am 3.", "Oktober beginnt die Messe.", "Sie endet im 4.", "Quartal."]
