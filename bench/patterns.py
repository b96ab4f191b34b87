"""Which regular expressions of app/ cost time with the square of a run of one character.

    python -m bench.patterns [--package app] [--size 4000] [--fills " ,a,..."]

A pattern searched for through a text (search, finditer, findall, sub, subn, split) is tried
from every position until one matches; where each try reads to the end of a run it cannot match
(a run of spaces, letters, dots), the search costs the square of the run, and a large upload
holds such runs. A pattern matched once (match, fullmatch) can cost as much in that one try: a
lazy `(.*?)` before an end tried from each of its characters. bench.scaling times the
documented paths with inputs built by hand; this looks at every pattern instead: each compiled
at module level in the package and used in its module (an attribute call above on its name),
timed in CPU seconds at N and 2N characters, with finditer over runs of each fill where it is
searched for, with match on the run and one more character where it is matched. T(2N)/T(N) is
about 2 where the cost is linear and 4 where it grows with the square; a ratio above FLAGGED
(where the longer run took at least NOTICED seconds) is flagged, after a second timing of both
sizes agrees.
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
FLAGGED = 3.0
NOTICED = 0.02


def used(package: str) -> dict[str, tuple[re.Pattern, bool]]:
    """module.NAME -> (the pattern, whether it is searched for), for every module-level compiled
    pattern of the package that its module searches for or matches."""
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
    return found


def cost(pattern: re.Pattern, searched: bool, fill: str, size: int) -> float:
    text = fill * max(1, size // len(fill))
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
    """(T(2N)/T(N), T(2N)) for one fill."""
    small = cost(pattern, searched, fill, size)
    large = cost(pattern, searched, fill, 2 * size)
    return large / max(small, 1e-6), large


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
