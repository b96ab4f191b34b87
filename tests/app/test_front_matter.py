"""app.documents.front_matter: a Markdown page's title, description, summary, subtitle, caption
and alt text are translated in its YAML or TOML front matter, each written back with the quoting
its translation needs; every other key, comment and line stays byte for byte. The outputs are
read back with PyYAML and tomllib: what they read is the translation, as text."""

import json

import pytest
import yaml

from app.documents import extract, translate_document
from tests.app.fakes import FakeTranslator


def engine(texts: list[str]) -> list[str]:
    """The fake engine: each sentence's words in reverse order."""
    return [result.text for result in FakeTranslator().translate_batch(texts)]


def answers(table: dict[str, str]):
    return lambda texts: [table[text] for text in texts]


def front(page: str) -> str:
    return page.split("---\n")[1] if page.startswith("---") else page.split("+++\n")[1]


YAML_PAGE = (
    "---\n"
    "title: Getting started  # shown in the menu\n"
    'description: "Install the \\"server\\" first"\n'
    "summary: 'It''s quick to set up'\n"
    "date: 2024-05-01\n"
    "tags: [install, setup]\n"
    "draft: false\n"
    "params:\n"
    "  description: Nested values stay\n"
    "alt:\n"
    "  - A red door\n"
    "  - 'A blue window'\n"
    'caption: [First caption, "Second one"]\n'
    "subtitle: >-\n"
    "  A folded text\n"
    "  over two lines\n"
    "---\n\n"
    "Body text here.\n")


def test_yaml_values_of_the_listed_keys_are_translated_and_the_rest_kept():
    """The front matter was kept whole: a German page had an English title and summary."""
    assert extract(YAML_PAGE.encode(), "md").segments == [
        "Getting started", 'Install the "server" first', "It's quick to set up",
        "A red door", "A blue window", "First caption", "Second one",
        "A folded text\nover two lines", "Body text here."]
    out = translate_document(YAML_PAGE.encode(), "md", engine).decode()
    assert out == YAML_PAGE.replace("Getting started ", "started Getting ").replace(
        'Install the \\"server\\" first', 'first \\"server\\" the Install').replace(
        "It''s quick to set up", "up set to quick It''s").replace(
        "A red door", "door red A").replace("A blue window", "window blue A").replace(
        'First caption, "Second one"', 'caption First, "one Second"').replace(
        "A folded text\n  over two lines", "lines two over\n  text folded A").replace(
        "Body text here.", "here. text Body")
    assert yaml.safe_load(front(out))["summary"] == "up set to quick It's"


def test_a_plain_yaml_value_gets_quotes_where_its_translation_needs_them():
    src = ("---\ntitle: Setup\ndescription: Read this\nsummary: One\nsubtitle: Year\n"
           "alt: [Left, Right]\ncaption:\n- Top\n- Bottom\n---\n")
    table = {"Setup": "Einrichtung: Schritt 1", "Read this": "- Lies das #1", "One": "No",
             "Year": "1984", "Left": "Links, oben", "Right": "Rechts", "Top": "*Oben*",
             "Bottom": 'Unten "hier"'}
    out = translate_document(src.encode(), "md", answers(table)).decode()
    assert out == ('---\ntitle: "Einrichtung: Schritt 1"\ndescription: "- Lies das #1"\n'
                   'summary: "No"\nsubtitle: "1984"\nalt: ["Links, oben", Rechts]\n'
                   'caption:\n- "*Oben*"\n- Unten "hier"\n---\n')
    assert yaml.safe_load(front(out)) == {
        "title": "Einrichtung: Schritt 1", "description": "- Lies das #1", "summary": "No",
        "subtitle": "1984", "alt": ["Links, oben", "Rechts"],
        "caption": ["*Oben*", 'Unten "hier"']}


def test_yaml_a_block_scalar_is_translated_a_paragraph_at_a_time():
    src = ("---\ndescription: |\n  First paragraph\n  of the text.\n\n  Second one.\n"
           "summary: >\n  Kept, it has\n    a deeper line.\n---\n")
    assert extract(src.encode(), "md").segments == [
        "First paragraph\nof the text.", "Second one."]
    out = translate_document(src.encode(), "md", engine).decode()
    assert out == ("---\ndescription: |\n  text. the of\n  paragraph First\n\n  one. Second\n"
                   "summary: >\n  Kept, it has\n    a deeper line.\n---\n")
    assert yaml.safe_load(front(out))["description"] == (
        "text. the of\nparagraph First\n\none. Second\n")


def test_yaml_forms_the_reader_does_not_know_stay_as_written():
    src = ("---\ntitle: A title that\n  goes on here\ndescription: &desc Anchored text\n"
           "summary: !!str Tagged text\nsubtitle: \"An unknown \\q escape\"\n"
           "caption:\n  - name: A mapping\nalt:\n  en: A nested value\n"
           "Title: Any case counts\n---\n\nText.\n")
    assert extract(src.encode(), "md").segments == ["Any case counts", "Text."]


def test_an_escape_of_no_character_leaves_its_value_as_written():
    """`\\UFFFFFFFF` refused the whole page as unreadable, a surrogate (`\\ud83d`) failed it when
    it was written; such a value is one the reader does not know."""
    src = ('---\ntitle: "Past \\UFFFFFFFF the end"\ndescription: "A \\ud83d\\ude00 pair"\n---\n\n'
           "Text.\n")
    assert extract(src.encode(), "md").segments == ["Text."]
    assert translate_document(src.encode(), "md", engine).decode() == src


TOML_PAGE = (
    "+++\n"
    'title = "Getting \\"started\\""  # the menu\n'
    "description = 'The quick way'\n"
    "summary = 'Plain words'\n"
    "draft = false\n"
    "alt = [\"One door\", 'Two doors']\n"
    'subtitle = """\nA multi-line string\n"""\n'
    "caption = 'Kept\n"
    "[params]\n"
    'title = "In a table"\n'
    "+++\n\n"
    "Text.\n")


def test_toml_values_are_translated_in_their_string_style():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11's
    assert extract(TOML_PAGE.encode(), "md").segments == [
        'Getting "started"', "The quick way", "Plain words", "One door", "Two doors", "Text."]
    table = {'Getting "started"': 'Erste "Schritte"', "The quick way": 'Der "schnelle" Weg',
             "Plain words": "Die Wörter des Autors: 'klar'", "One door": "Eine Tür",
             "Two doors": "Zwei Türen", "Text.": "Text."}
    out = translate_document(TOML_PAGE.encode(), "md", answers(table)).decode()
    assert out == TOML_PAGE.replace('"Getting \\"started\\""', '"Erste \\"Schritte\\""').replace(
        "'The quick way'", "'Der \"schnelle\" Weg'").replace(
        "'Plain words'", "\"Die Wörter des Autors: 'klar'\"").replace(
        "[\"One door\", 'Two doors']", "[\"Eine Tür\", 'Zwei Türen']")
    read = tomllib.loads(front(out).replace("caption = 'Kept\n", ""))
    assert (read["title"], read["description"], read["summary"], read["alt"]) == (
        'Erste "Schritte"', 'Der "schnelle" Weg', "Die Wörter des Autors: 'klar'",
        ["Eine Tür", "Zwei Türen"])


JSON_PAGE = (
    "{\n"
    '  "title": "Getting \\"started\\"",\n'
    '  "date": "2024-05-01",\n'
    '  "tags": ["install", "setup"],\n'
    '  "params": {"description": "Nested values stay", "alt": "So do these"},\n'
    '  "summary": "A \\u00fcber-quick setup"\n'
    "}\n\n"
    "Body text here.\n")


def test_json_front_matter_is_read_as_hugo_reads_it():
    """It went to the model whole, keys and braces: the page's JSON came back broken."""
    assert extract(JSON_PAGE.encode(), "md").segments == [
        'Getting "started"', "A über-quick setup", "Body text here."]
    table = {'Getting "started"': 'Erste "Schritte"\tjetzt', "A über-quick setup": "Schnell",
             "Body text here.": "Text."}
    out = translate_document(JSON_PAGE.encode(), "md", answers(table)).decode()
    head, body = out.split("}\n\n", 1)
    assert json.loads(head + "}") == {
        "title": 'Erste "Schritte"\tjetzt', "date": "2024-05-01", "tags": ["install", "setup"],
        "params": {"description": "Nested values stay", "alt": "So do these"},
        "summary": "Schnell"}
    assert body == "Text.\n"
    # a page that opens with a brace that is no JSON object is no front matter; nor is one
    # nested past Python's recursion limit, or longer than a front matter is
    assert extract(b"{\nOpen the file.\n}\n", "md").segments == ["{\nOpen the file.\n}"]
    deep = "{\n" + '"a": {\n' * 2000 + "}\n" * 2001 + "\nText.\n"
    assert extract(deep.encode(), "md").segments[-1] == "Text."
    long = "{\n" + '"a": {\n' * 20 + '"b": 1,\n' * 20_000 + '"c": 2\n' + "}\n" * 21 + "\nText.\n"
    assert extract(long.encode(), "md").segments[0].startswith('{\n"a"')


def test_a_value_is_written_on_one_line_as_the_pattern_searched_for_its_breaks_wrote_it():
    # each space of a run without a line break after it began a try to the run's end: the
    # square of the run; a try starts only where a run of spaces, or a line break, begins now
    import random
    import re

    from app.documents import front_matter

    searched = re.compile(r"[ \t]*[\r\n]+[ \t]*")
    rng = random.Random(5)
    pieces = [" ", "\t", "\n", "\r\n", "\r", "a", "b c", "\u00a0", "."]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        assert front_matter._LINE_BREAK.sub(" ", text) == searched.sub(" ", text), repr(text)


def test_a_title_with_a_long_run_of_spaces_is_written_in_linear_time():
    from bench.fuzz_documents import run_case

    page = b'---\ntitle: "The ' + b" " * 200_000 + b'plan"\n---\n\nText.\n'
    assert run_case(page, "md", timeout=30, checks=False).kind == "ok"
