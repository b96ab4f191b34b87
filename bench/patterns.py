"""Which regular expressions of app/ cost time with the square of a run of one character.

    python -m bench.patterns [--package app] [--size 4000] [--fills " ,a,..."]

A pattern searched for through a text (search, finditer, findall, sub, subn, split) is tried
from every position until one matches; where each try reads to the end of a run it cannot match
(a run of spaces, letters, dots), the search costs the square of the run, and a large upload
holds such runs. bench.scaling times the documented paths with inputs built by hand; this
looks at every pattern instead: each compiled at module level in the package and scanned in
its module (an attribute call above on its name), timed in CPU seconds with finditer over runs
of each fill at N and 2N characters. T(2N)/T(N) is about 2 where the cost is linear and 4
where it grows with the square; a ratio above FLAGGED (where the longer run took at least
NOTICED seconds) is flagged, after a second timing of both sizes agrees. A pattern used only
with match or fullmatch is tried once, where its caller says, and is left out.
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
FILLS = [" ", "\t", "\n", "a", "ab", "1", ".", "-", "<", "<b>", "&", "%", "%s", "{", "{{",
         "é", "x ", "a.", "a:", "http://"]
FLAGGED = 3.0
NOTICED = 0.02


def scanned(package: str) -> dict[str, re.Pattern]:
    """module.NAME -> the pattern, for every module-level compiled pattern of the package that
    its module scans a text with."""
    found = {}
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        try:
            module = importlib.import_module(info.name)
            tree = ast.parse(inspect.getsource(module))
        except (ImportError, OSError, TypeError, SyntaxError):
            continue  # an optional dependency missing, or no source to read
        calls = {node.value.id for node in ast.walk(tree)
                 if isinstance(node, ast.Attribute) and node.attr in SCANS
                 and isinstance(node.value, ast.Name)}
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and name in calls:
                found[f"{info.name}.{name}"] = value
    return found


def cost(pattern: re.Pattern, fill: str, size: int) -> float:
    text = fill * max(1, size // len(fill))
    subject = text.encode() if isinstance(pattern.pattern, bytes) else text
    start = time.process_time()
    for _ in pattern.finditer(subject):
        pass
    return time.process_time() - start


def ratio(pattern: re.Pattern, fill: str, size: int) -> tuple[float, float]:
    """(T(2N)/T(N), T(2N)) for one fill."""
    small, large = cost(pattern, fill, size), cost(pattern, fill, 2 * size)
    return large / max(small, 1e-6), large


def audit(patterns: dict[str, re.Pattern], fills: list[str], size: int) -> list[tuple]:
    """(name, fill, ratio, seconds at 2N) for each flagged pair, the second timing's."""
    flagged = []
    for name, pattern in sorted(patterns.items()):
        for fill in fills:
            r, seconds = ratio(pattern, fill, size)
            if r > FLAGGED and seconds >= NOTICED:
                r, seconds = ratio(pattern, fill, size)  # once more: the timer's noise
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
    patterns = scanned(args.package)
    print(f"{len(patterns)} patterns scanned with in {args.package}, runs of {len(fills)} fills "
          f"at {args.size} and {2 * args.size} characters")
    flagged = audit(patterns, fills, args.size)
    for name, fill, r, seconds in flagged:
        print(f"!! {name}  run of {fill!r}: T(2N)/T(N) {r:.1f}, {seconds:.3f} s at 2N")
    print(f"{len(flagged)} flagged" if flagged else "none grows with the square")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
