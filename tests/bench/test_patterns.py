"""bench.patterns: which patterns it looks at, and how it reads their costs."""

from __future__ import annotations

import re
import sys

from bench import patterns


def test_module_level_patterns_searched_for_or_matched_are_looked_at(tmp_path, monkeypatch):
    package = tmp_path / "fakepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "texts.py").write_text(
        "import re\n"
        "SEARCHED = re.compile(r'\\s*x')\n"
        "MATCHED = re.compile(r'\\s*y')\n"
        "SPLIT = re.compile(rb',\\s*')\n"
        "UNUSED = re.compile(r'z')\n"
        "def f(t, b):\n"
        "    return SEARCHED.search(t), MATCHED.match(t), SPLIT.split(b)\n"
        "def g(t, word):\n"
        "    t = re.sub(r'[ \\t]*\\n', ' ', t, flags=re.I | re.M)\n"
        "    inline = re.compile(r'\\S+$', re.A)\n"
        "    return re.fullmatch('a+b', t), re.search(re.escape(word), t), inline\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = patterns.used("fakepkg")
    finally:
        for name in [m for m in sys.modules if m.startswith("fakepkg")]:
            del sys.modules[name]
    assert {name: searched for name, (_, searched) in found.items()} == {
        "fakepkg.texts.SEARCHED": True, "fakepkg.texts.MATCHED": False, "fakepkg.texts.SPLIT": True,
        # written out in a call of re (one built from a value is not): compiled in a function
        # taken as searched for, with the flags the call gives
        "fakepkg.texts:9": True, "fakepkg.texts:10": True, "fakepkg.texts:11": False}
    assert found["fakepkg.texts:9"][0].flags & (re.I | re.M) == re.I | re.M
    assert found["fakepkg.texts:10"][0].flags & re.A


def test_a_cost_growing_with_the_square_is_flagged_once_timed_twice(monkeypatch):
    timed = []

    def cost(pattern, searched, fill, size, end=""):  # seconds as the two kinds would take
        timed.append((pattern.pattern, fill, size, end))
        per = 1e-5 * size
        square = pattern.pattern == "square" or (pattern.pattern == "square_if_text_goes_on"
                                                 and end)
        return per * size / 1000 if square else per

    monkeypatch.setattr(patterns, "cost", cost)

    flagged = patterns.audit({"m.SQUARE": (re.compile("square"), True),
                              "m.ON": (re.compile("square_if_text_goes_on"), True),
                              "m.LINEAR": (re.compile("linear"), False)}, [" ", "a"], 4000)
    assert [(name, fill) for name, fill, _, _ in flagged] == [
        ("m.ON", " "), ("m.ON", "a"), ("m.SQUARE", " "), ("m.SQUARE", "a")]
    assert all(abs(r - 4.0) < 1e-9 for _, _, r, _ in flagged)
    # a flagged pair is timed again at both sizes before it is reported; a linear one is not;
    # one searched for is timed on the run alone and with more text after it, one matched once
    assert timed.count(("square", " ", 8000, "")) == 2
    assert timed.count(("square", " ", 8000, " \x01")) == 2
    assert [t for t in timed if t[0] == "linear" and t[1] == " "] == [
        ("linear", " ", 4000, ""), ("linear", " ", 8000, "")]
