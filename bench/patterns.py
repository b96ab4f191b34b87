"""Which regular expressions of app/ cost time with the square of a run of one character.

    python -m bench.patterns [--package app] [--size 4000] [--fills " ,a,..."]

A pattern searched for through a text (search, finditer, findall, sub, subn, split) is tried
from every position until one matches; where each try reads to the end of a run it cannot match
(a run of spaces, letters, dots), the search costs the square of the run, and a large upload
holds such runs. A pattern matched once (match, fullmatch) can cost as much in that one try: a
lazy `(.*?)` before an end tried from each of its characters. bench.scaling times the
documented paths with inputs built by hand; this looks at every pattern instead: each compiled
at module level in the package and used in its module (an attribute call above on its name),
and each written out in a call of `re` itself (`re.sub(r"...", ...)`, `re.compile(r"...")` in a
function: searched for), timed in CPU seconds at N and 2N characters, with finditer over runs of
each fill where it is searched for (the run alone, and the run with a space and one more
character after it: a pattern for the text's last word tries each start to the run's end only
where the text goes on), with match on the run and one more character where it is matched.
T(2N)/T(N) is about 2 where the cost is linear and 4 where it grows with the square; a ratio
above FLAGGED (where the longer run took at least NOTICED seconds) is flagged, after a second
timing of both sizes agrees.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import pkgutil
import re
import sys
import time

SCANS = {"search", "finditer", "findall", "sub", "subn", "split"}
MATCHES = {"match", "fullmatch"}
FILLS = [" ", "\t", "\n", "a", "ab", "1", ".", "-", "<", "<b>", "&", "%", "%s", "{", "{{",
         "é", "x ", "a.", "a:", "http://"]
# where a call of `re` takes its flags when they are not given by name
FLAGS_AT = {"compile": 1, "search": 2, "match": 2, "fullmatch": 2, "finditer": 2, "findall": 2,
            "split": 3, "sub": 4, "subn": 4}
FLAGGED = 3.0
NOTICED = 0.02


def used(package: str) -> dict[str, tuple[re.Pattern, bool]]:
    """module.NAME -> (the pattern, whether it is searched for), for every module-level compiled
    pattern of the package that its module searches for or matches; module:LINE -> the same for
    every pattern written out in a call of `re`."""
    found = {}
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        try:
            module = importlib.import_module(info.name)
            tree = ast.parse(inspect.getsource(module))
        except (ImportError, OSError, TypeError, SyntaxError):
            continue  # an optional dependency missing, or no source to read
        calls = {(node.value.id, node.attr in SCANS) for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr in SCANS | MATCHES
                 and isinstance(node.value, ast.Name)}
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and ((name, True) in calls or (name, False) in calls):
                found[f"{info.name}.{name}"] = (value, (name, True) in calls)
        found.update((f"{info.name}:{line}", used) for line, used in _written_out(tree))
    return found


def _written_out(tree: ast.AST) -> list[tuple[int, tuple[re.Pattern, bool]]]:
    """(line, (pattern, searched)) for each call `re.FUNCTION(literal, ...)` in the tree but
    a module-level `NAME = re.compile(...)` (`used` follows those); one compiled in a function is
    taken as searched for (how it is used there is not followed)."""
    named = {id(node.value) for node in tree.body if isinstance(node, ast.Assign)}
    out = []
    for node in ast.walk(tree):
        if id(node) in named or not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                and node.func.attr in FLAGS_AT and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str | bytes)):
            continue
        flags = 0
        given = ([k.value for k in node.keywords if k.arg == "flags"]
                 + node.args[FLAGS_AT[node.func.attr]:][:1])
        for flag in given:  # re.I, re.I | re.M
            names = [n.attr for n in ast.walk(flag) if isinstance(n, ast.Attribute)]
            flags |= sum((getattr(re, n) for n in names), re.NOFLAG)
        out.append((node.lineno, (re.compile(node.args[0].value, flags),
                                  node.func.attr not in MATCHES)))
    return out


def cost(pattern: re.Pattern, searched: bool, fill: str, size: int, end: str = "") -> float:
    text = fill * max(1, size // len(fill)) + end
    if not searched:
        text += "\x01"  # (a run to its end might match where the pattern ends in `$`)
    subject = text.encode() if isinstance(pattern.pattern, bytes) else text
    start = time.process_time()
    if searched:
        for _ in pattern.finditer(subject):
            pass
    else:
        pattern.match(subject)
    return time.process_time() - start


def ratio(pattern: re.Pattern, searched: bool, fill: str, size: int) -> tuple[float, float]:
    """(T(2N)/T(N), T(2N)) for one fill, the larger of the ends tried after the run."""
    worst = (0.0, 0.0)
    for end in (("", " \x01") if searched else ("",)):
        small = cost(pattern, searched, fill, size, end)
        large = cost(pattern, searched, fill, 2 * size, end)
        worst = max(worst, (large / max(small, 1e-6), large))
    return worst


def audit(patterns: dict[str, tuple[re.Pattern, bool]], fills: list[str], size: int
          ) -> list[tuple]:
    """(name, fill, ratio, seconds at 2N) for each flagged pair, the second timing's."""
    flagged = []
    for name, (pattern, searched) in sorted(patterns.items()):
        for fill in fills:
            r, seconds = ratio(pattern, searched, fill, size)
            if r > FLAGGED and seconds >= NOTICED:
                r, seconds = ratio(pattern, searched, fill, size)  # once more: the noise
                if r > FLAGGED and seconds >= NOTICED:
                    flagged.append((name, fill, r, seconds))
    return flagged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", default="app")
    ap.add_argument("--size", type=int, default=4000, help="N, characters of a run")
    ap.add_argument("--fills", help="comma-separated runs' characters (default: a built-in set)")
    args = ap.parse_args(argv)
    fills = args.fills.split(",") if args.fills else FILLS
    patterns = used(args.package)
    searched = sum(s for _, s in patterns.values())
    print(f"{searched} patterns searched for and {len(patterns) - searched} matched in "
          f"{args.package}, runs of {len(fills)} fills at {args.size} and {2 * args.size} "
          "characters")
    flagged = audit(patterns, fills, args.size)
    for name, fill, r, seconds in flagged:
        print(f"!! {name}  run of {fill!r}: T(2N)/T(N) {r:.1f}, {seconds:.3f} s at 2N")
    print(f"{len(flagged)} flagged" if flagged else "none grows with the square")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
