"""bench.patterns: which patterns it looks at, and how it reads their costs."""

from __future__ import annotations

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
        "    return SEARCHED.search(t), MATCHED.match(t), SPLIT.split(b)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = patterns.used("fakepkg")
    finally:
        for name in [m for m in sys.modules if m.startswith("fakepkg")]:
            del sys.modules[name]
    assert {name: searched for name, (_, searched) in found.items()} == {
        "fakepkg.texts.SEARCHED": True, "fakepkg.texts.MATCHED": False, "fakepkg.texts.SPLIT": True}


def test_a_cost_growing_with_the_square_is_flagged_once_timed_twice(monkeypatch):
    timed = []

    def cost(pattern, searched, fill, size):  # seconds as the two kinds would take them
        timed.append((pattern.pattern, fill, size))
        per = 1e-5 * size
        return per * size / 1000 if pattern.pattern == "square" else per

    monkeypatch.setattr(patterns, "cost", cost)
    import re

    flagged = patterns.audit({"m.SQUARE": (re.compile("square"), True),
                              "m.LINEAR": (re.compile("linear"), False)}, [" ", "a"], 4000)
    assert [(name, fill) for name, fill, _, _ in flagged] == [("m.SQUARE", " "), ("m.SQUARE", "a")]
    assert all(abs(r - 4.0) < 1e-9 for _, _, r, _ in flagged)
    # a flagged pair is timed again at both sizes before it is reported; a linear one is not
    assert timed.count(("square", " ", 8000)) == 2 and timed.count(("linear", " ", 8000)) == 1
