"""Protected spans: what must come back from the model exactly as it went in.

Placeholders (printf `%s` `%1$d`, Python `%(name)s` `%r`, `{name}` `{0}`, `${VAR}` `$(VAR)`, Qt and
LibreOffice `%1` `%PRODUCTNAME`, GCC `%<` `%qE`), inline markup tags (`<b>`, `</a>`, `<br/>`,
XLIFF `<x id="1"/>`), URLs, e-mail addresses, `inline code` (HTML's `<code>...</code>` whole too,
and an inline element marked translate="no" or notranslate) and Markdown link targets are found
by SPAN_RE, and the words of software (paths, file names, identifiers, @mentions, command
lines: WORD_KINDS), quantities and numbers with thousands separators beside them; each is given
a mask before the model, and `unmask` puts the originals back after (a number or a quantity's
amount in the target language's way, where `mask` is told the languages).
Emoji are spans too, with no mask: the model sees the sentence without them (an unknown piece to
it, an emoji changed the words around it and came back about half the time), and `unmask` puts
them back as it does a mask the model dropped.

    mask("Open <b>%s</b> at https://example.org")
      .text == "Open {1}%s{2} at {3}"    # masks: "{1}" "%s" "{2}" "{3}"

Which masks: measured with the shipped en-de model by bench/placeholders.py (numbers in the
README). Placeholders are their own masks (`keep_placeholders`): the corpus kept them intact,
so the model has learned to copy `%s`, `%1`, `{0}` and to read them as a hint of the string's
origin; numbering every span instead (QT_STYLE `%1, %2, ...` or BRACE_STYLE `{1}, {2}, ...`)
made the model return its masks less often and cost chrF points. Tags, URLs, addresses and
code, which the corpus stripped or dropped, get numbered `{N}` masks (skipping numbers the text
itself uses): the model returned all of them more often than `%N` masks (`python -m
bench.placeholders`; BENCHMARKS.md). DEFAULT_STYLE is that
combination.

Restoring is robust to what a model does to masks (`unmask`):
- a mask that comes back is replaced by its original, wherever the model put it (the k-th copy
  of a mask string that stands for several equal spans, like two `%s`, goes to the k-th);
- a duplicate of a mask, a mask number that was never issued, or a span the model made up
  (a `%s` or a tag that was not in the source: it would break a format string) is deleted;
- a mask the model dropped is re-inserted: at the start or the end of the text when it stood
  there in the source (only other masks or spaces between it and the edge), right after its
  source neighbour when they were adjacent and the neighbour survived, else at the word boundary
  nearest to its relative position in the source; its own spacing (glued or spaced) is kept;
- an opening and a closing tag that come back crossed (`</b> ... <b>`) swap places, and a
  space the model put just inside a pair that hugged its text in the source is deleted;
- deleting may join neighbours into a new span ("%%jm" + "p" -> "%p"): that is deleted too,
  and an original that would read differently next to its neighbour is spaced off.
So every original span is in the output exactly as many times as in the input (the tests and
bench/placeholders.py check it).
"""

from __future__ import annotations

import bisect
import collections
import datetime
import functools
import html
import re
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

_INLINE_TAGS = (
    "a|abbr|b|bdi|bdo|big|br|cite|code|del|dfn|em|font|i|img|ins|kbd|mark|q|s|samp|small|span|"
    "strike|strong|sub|sup|time|tt|u|var|wbr|"
    "x|g|bx|ex|ph|bpt|ept|it|mrk|pc|sc|ec|sm"  # XLIFF 1.2 and 2.0 inline elements
)
# One alternative per kind of span; the first that matches at a position wins.
_PLACEHOLDER = (
    r"%(?:\d+\$)?[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64)?"
    r"[diouxXeEfFgGcrsSpaAm@]"  # printf, Python's %r, glibc %m, GCC %qE, Objective-C %@
    r"|%\(\w+\)[-+ #0]*\d*(?:\.\d+)?[diouxXeEfFgGcrs]"  # Python %(name)s
    # GCC quotes; not a "<" that starts a tag ("50%</b>"): in markup a "<" of text is escaped
    rf"|%<(?!/?(?i:{_INLINE_TAGS})[\s/>])|%>"
    r"|%[1-9]\d*"  # Qt / LibreOffice %1
    r"|%[A-Z][A-Z0-9_]{2,}%?"  # LibreOffice %PRODUCTNAME, %FOO%
    r"|\$\([\w.]+\)|\$\{[\w.]+\}|\$[1-9](?!\d|[.,]\d)|\$[A-Z][A-Z0-9_]+\$?"  # shell, make
    # ("$1,299", "$4.99", "$42" are sums: WORD_RE's quantities)
    r"|\{\{[\w.]*\}\}|\{[\w.]*(?::[^{}\s]*)?\}"  # {{name}}, {name}, {0}, {0:.2f}, {}
)
_HTML_INLINE_TAGS = (
    "a|abbr|b|bdi|bdo|big|br|cite|code|del|dfn|em|font|i|img|ins|kbd|mark|q|s|samp|small|span|"
    "strike|strong|sub|sup|time|tt|u|var|wbr"
)
_INLINE_TAGS = f"{_HTML_INLINE_TAGS}|x|g|bx|ex|ph|bpt|ept|it|mrk|pc|sc|ec|sm"  # XLIFF 1.2, 2.0
INLINE_TAGS = frozenset(_INLINE_TAGS.split("|"))
# a line break in markup ends the sentence there, the text on each side translated apart and
# the tag kept between, unless the sentence goes on after it (`joins_at_break`): then the tag
# stands alone in the sentence, and app.text.tags takes it out and puts it back (with its mask in
# the sentence, the model lost words: "Save the file<br>and close the window." -> "Speichert
# die Datei<br>and das Fenster."; cut there, each half lost the other)
LINE_BREAK_TAGS = frozenset({"br"})
# what follows a tag's name up to its ">": an attribute's quoted value may hold ">" (HTML allows
# it: title="a > b"), so a value is read whole; one left open reads as plain characters, and the
# possessive repeat never goes back over what it read (no backtracking on a tag without its end)
_TAG_STEP = r"""(?>=\s*"[^"<]*"|=\s*'[^'<]*'|[^<>])"""  # a quoted value whole, or a character
TAG_BODY = rf"{_TAG_STEP}*+"
ANY_TAG_RE = re.compile(rf"<{TAG_BODY}>")  # any tag in markup, comments and declarations too
LINE_BREAK_RE = re.compile(rf"(<br(?:\s{TAG_BODY})?/?>)", re.IGNORECASE)
_TAG = rf"</?(?i:{_INLINE_TAGS})(?:\s{TAG_BODY})?/?>"
_NOT_URL = "\\s<>\"'„“”‘’«»‹›"  # what ends a URL; it does not end in punctuation either
_URL = (
    rf"(?i:https?|ftp)://[^{_NOT_URL}]+[^{_NOT_URL}.,;:!?)\]}}]"
    rf"|www\.[\w-]+(?:\.[\w-]+)+(?:[^{_NOT_URL}]*[^{_NOT_URL}.,;:!?)\]}}])?"
)
_EMAIL = r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}"
# `inline code` and ``inline code`` (reStructuredText's, Markdown's: a backtick may be inside),
# over one line break at most, a Markdown link's (target), parentheses in it too (a Wikipedia
# link), and its "title", if any, or its [label] (a reference link's: the key of its definition)
# HTML's inline code elements (INLINE_CODE_TAGS), whole: start tag, content (other tags in it
# too: Sphinx's <span class="pre">), end tag; one element of the same name may nest in it once
# (Sphinx's compound keystroke, <kbd><kbd>C</kbd>-<kbd>d</kbd></kbd>). An element without its
# end tag is no span: its tags are masked as other tags are.
# HTML's other inline elements marked not to be translated (translate="no", any case, quoted or
# not; class notranslate: Google's) are spans whole too, as code is, with elements of their own
# name nested two deep in them (<span class="notranslate"><span>Acme</span> Cloud</span>): a
# brand or product name in a sentence stays in it as one mask, and comes back byte for byte
# MathML's <math> too: a formula is notation, its tokens (<mi>sin</mi>) are no words to translate
INLINE_CODE_TAGS = frozenset({"code", "kbd", "samp", "tt", "var", "math"})
# classes that mark an element as not to be translated: notranslate (Google's, Sphinx's), and
# sig-object, Sphinx's API signature: code written in spans, not <code>, which the model read as
# words ("None" came back "Kein")
KEPT_CLASSES = frozenset({"notranslate", "sig-object"})
# elements without content (img, br, wbr) are no kept span: their tag alone is one
_KEPT_INLINE_TAGS = sorted(set(_HTML_INLINE_TAGS.split("|")) - INLINE_CODE_TAGS
                           - {"br", "img", "wbr"})


def _element(group: str, names: list[str], start: str, depth: int) -> str:
    """An HTML element whole (any case): a start tag of one of `names` whose attributes pass the
    lookahead `start`, its content, its end tag; elements of its own name nest in it `depth`
    deep (a tag of its own name in the content ends it or opens one of those)."""
    inside = rf"(?:[^<]|<(?!/?(?P={group})[\s/>]))"  # not a tag of the element's own name
    end = rf"</(?P={group})\s*>"
    content = f"{inside}*"
    for _ in range(depth):
        content = rf"(?:{inside}|<(?P={group})(?=[\s/>]){TAG_BODY}>{content}{end})*"
    return rf"(?i:<(?P<{group}>{'|'.join(names)})(?=[\s/>]){start}{TAG_BODY}>{content}{end})"


_CODE_ELEMENT = _element("inline", sorted(INLINE_CODE_TAGS), "", 1)
# (_TAG_STEP reads a quoted value whole, so words in a value, title="translate=no", are not
# read as attributes)
_KEPT_CLASS = f"(?:{'|'.join(sorted(KEPT_CLASSES))})"
_KEPT_ATTRIBUTE = (
    rf"""(?={_TAG_STEP}*?\s(?:translate\s*=\s*(?:"no"|'no'|no(?=[\s/>]))"""
    rf"""|class\s*=\s*(?:"(?:[^"<]*\s)?{_KEPT_CLASS}(?:\s[^"<]*)?"|'(?:[^'<]*\s)?"""
    rf"""{_KEPT_CLASS}(?:\s[^'<]*)?'|{_KEPT_CLASS}(?=[\s/>]))))""")
_KEPT_ELEMENT = _element("kept", _KEPT_INLINE_TAGS, _KEPT_ATTRIBUTE, 2)
_CODE = (r"""(?<!`)``(?!`)(?:[^`\n]|`(?!`))+(?:\n(?:[^`\n]|`(?!`))+)?``(?!`)"""
         r"""|(?<!`)`[^`\n]+(?:\n[^`\n]+)?`(?!`)"""
         r"""|(?<=\])\((?:[^()\s]|\([^()\s]*\))+(?:\s+(?:"[^"\n]*"|'[^'\n]*'))?\)"""
         r"""|(?<=\])\[[^\[\]\n]+(?:\n[^\[\]\n]+)?\]"""  # a label, wrapped too
         rf"|{_CODE_ELEMENT}|{_KEPT_ELEMENT}")
# an inline element that is one span whole: code, or marked not to be translated
WHOLE_ELEMENT_RE = re.compile(rf"{_CODE_ELEMENT}|{_KEPT_ELEMENT}")
# what the text of escaped markup is read around: an element that is one span whole, or a tag
MARKUP_RE = re.compile(rf"{_CODE_ELEMENT}|{_KEPT_ELEMENT}|<{TAG_BODY}>")
# Emoji: pictographs (and the symbols that are emoji only with the emoji presentation selector
# U+FE0F after them: "☎️", a keycap "1️⃣"), each with its modifiers (selectors, skin tones, a
# keycap's frame, a subdivision flag's tag characters), joined by zero-width joiners (a family,
# "👨‍👩‍👧"); a run of them glued together is one span (a flag is two regional indicators). The
# symbols of text ("©", "→", "×" without the selector) are no emoji: they stay in the sentence
_PICTOGRAPHS = "\U0001F000-\U0001FAFF\u2600-\u27BF\u2B00-\u2BFF\u231A\u231B\u23E9-\u23FA"
_EMOJI_IF_SELECTED = (
    "#*0-9\u00A9\u00AE\u203C\u2049\u2122\u2139\u2194-\u2199\u21A9\u21AA\u24C2"
    "\u25AA-\u25FE\u2934\u2935\u3030\u303D\u3297\u3299")
_EMOJI_ONE = (rf"(?:[{_PICTOGRAPHS}]|[{_EMOJI_IF_SELECTED}](?=\uFE0F))"
              "[\uFE0E\uFE0F\u20E3\U0001F3FB-\U0001F3FF\U000E0020-\U000E007F]*")
_EMOJI = rf"(?:{_EMOJI_ONE}(?:\u200D{_EMOJI_ONE})*)+"
# code before tags: a whole element starts with a tag that is a span of its own
SPAN_RE = re.compile(
    rf"(?P<url>{_URL})|(?P<email>{_EMAIL})|(?P<code>{_CODE})|(?P<tag>{_TAG})"
    rf"|(?P<placeholder>{_PLACEHOLDER})|(?P<emoji>{_EMOJI})"
)
# every span has one of these in it (a URL's "://" or "www.", an address's "@", a tag's "<", code's
# "`", "](" or "][", a placeholder's "%", "$" or "{", an emoji's pictograph or selector), so a text
# without any has none; SPAN_RE tries each of its alternatives at every position, this one scan is
# far quicker (`_spans`)
_SPAN_HINT = re.compile(rf"[@<`%${{{_PICTOGRAPHS}\uFE0F]|://|www\.|\]\(|\]\[")

# Words of software that must come back as they are, where the model read them as words and
# changed them ("config.yaml" -> "Konfiguration.yaml", "~/Pictures/Holiday" -> "~/Pikturen/Holitag",
# "@maria" -> "@ria", "node_modules" -> "Knoten-Module"): file paths of two parts or more (a
# single "/word" is as often a command or an abbreviation), Windows paths, file names with a
# known extension (not "e.g." or "etc."), identifiers written in snake_case or camelCase (two
# lower-case letters first: "iPhone" and "dB" are left to the model), @mentions of three
# characters or more (e2fsprogs' "@i", "@bs" are codes its translators write out) and hashes
# and serial numbers. They get numbered masks like URLs, but unlike SPAN_RE's kinds one the
# model writes on its own is no stray span: `unmask` leaves it (WORD_KINDS). Measured by
# bench/placeholders.py --words.
_PATH_PART = r"(?:[\w+-]|\.(?=[\w+-]))"
_PATH = (rf"(?<![\w/.~<;\\\[])(?:(?:~|\.{{1,2}})/{_PATH_PART}+|/{_PATH_PART}+/{_PATH_PART}+)"
         rf"(?:/{_PATH_PART}*)*"
         r"|(?<!\w)[A-Za-z]:\\(?:[\w+-]|[.\\](?=[\w+-]))*")
_EXTENSIONS = (
    "7z|apk|bak|bat|bin|bmp|bz2|cc|cfg|conf|cpp|crt|css|csv|dat|db|deb|desktop|dll|dmg|docx?|dtd|"
    "exe|flac|gif|go|gz|hpp|html?|ico|img|ini|iso|jar|java|jpe?g|js|json|log|lock|md|mkv|mov|mp3|"
    "mp4|msi|odp|ods|odt|ogg|oxt|pdf|pem|php|png|po|pot|pptx?|ps1|py|rb|rpm|rs|rst|service|sh|so|"
    "sql|sqlite|svg|tar|tgz|tmp|toml|ts|tsv|txt|wav|webp|xcs|xcu|xlsx?|xml|xsl|xz|ya?ml|zip")
_FILE = (rf"(?<![\w./\\-])(?:[\w-]+(?:\.[\w-]+)*\.(?i:{_EXTENSIONS})"
         r"|\.(?:bashrc|zshrc|profile|gitignore|env))(?!\w)")  # "config.yaml-Datei" too
# a whole word, read once (possessive): not a capitalised word with one "_" in it (GTK's
# mnemonic, "S_ave", "Pre_fix"); snake_case, a letter first, an "_" after it and a letter or
# digit last (backtracking over the word's "_" for that last character cost the square of a
# word of many); camelCase
_IDENTIFIER = (r"(?<![\w%$\\])(?![A-Z][a-z]*+_[a-z]++(?!\w))"
               r"(?:[A-Za-z](?=\w*?_)\w*+(?<=[A-Za-z0-9])|[a-z]{2,}+[A-Z]\w*+)")
_MENTION = r"(?<![\w@.])@[A-Za-z0-9_][\w-]{2,}"
# a hash, a UUID, an order number: a word of eight characters or more, letters and at least
# four digits ("3a7bd3e2360a...", "AB-12345-XY"; not "COVID-19" or "MP3-player"), which the
# model copied with characters doubled or dropped
_SERIAL = (r"(?<![\w-])(?=[\w-]{8})(?=(?:[A-Za-z_-]*+\d){4})(?=[\w-]*?[A-Za-z])"
           r"[A-Za-z0-9]++(?:[-_][A-Za-z0-9]++)*+(?![\w-])")
# A number with thousands separators as English writes them ("1,000", "1,234.56"): the model
# garbled it ("1,234,56") or copied it into German, where "1,000" reads as one. It comes back
# in the target language's way (`mask`'s `languages`, NUMBER_SEPARATORS), or as it was.
_GROUPED = r"\d{1,3}(?:,\d{3})++"  # "1,000", "12,000,000"
_NUMBER = rf"(?<![\w.,]){_GROUPED}(?:\.\d++)?(?!\w|[.,]\d)"
# A quantity: an amount with a unit symbol ("200 g", "250 ml", "4,500 mAh", "180 °C") or a
# currency sign ("$1,299", "€19.99", "5 €"). The model dropped or changed units it had seen
# little of ("200 g of flour" -> "200 Mehl", "500 mg" -> "500 Mg", "45 m deep" -> "45 mir
# tief") and copied amounts in English ("€1,450" reads as one euro in German). A unit written
# out ("5 minutes") is a word for the model; "in" and single capitals ("A", "B") are left
# out as too often words, and a unit counts only after a space: written on to its amount
# ("35mm-Äquivalent", "um 90°"), the model read the two as one word and did well, and "1940s"
# and the "35m" of an escape sequence are none; a sum may have a "/" after it ("€9.99/month"),
# a unit not ("m/x" is none). Its amount comes back written the target's way, as a number.
_AMOUNT = rf"(?:{_GROUPED}(?!\d|,\d)|\d++)(?:\.\d++)?"
_UNITS = (
    "km/h|m/s|mph|km²|m²|cm²|mm²|km³|m³|cm³|°C|°F|°|mAh|kWh|Wh|kW|MW|W|mV|kV|V|mA|Ah|"
    "GHz|MHz|kHz|Hz|KiB|MiB|GiB|TiB|KB|kB|MB|GB|TB|PB|Mbit/s|Gbit/s|Mbps|Gbps|kbps|"
    "ms|min|mg|kg|ml|cl|dl|mm|cm|km|ft|mi|yd|oz|lbs|lb|px|pt|dpi|fps|rpm|dB|"
    "kcal|kJ|hPa|kPa|bar|psi|tbsp|tsp|€|£|¥|[smhgl]")
_CURRENCY = "$€£¥₹₩₽₺₴₪"
_QUANTITY = (rf"(?<![\w.,/:;{_CURRENCY}])(?:[{_CURRENCY}][ \xa0\u202f]?{_AMOUNT}(?!\w|[.,]\d)"
             rf"|{_AMOUNT}[ \xa0\u202f](?:{_UNITS})(?![\w°²³/]|[.,]\d))")
# A command line written in prose without backticks ("Install it with sudo apt install
# nginx." -> "... sudo apt Junge.", "Type git status" -> "Git-Status"): a program's name and
# what it is told, up to the first word of English. Only where the name cannot be a word: after
# "sudo", a package manager's or tool's name with one of its subcommands ("pip install", "git
# clone"; "make" only with its few targets, as "make new" is English), or one of them or a
# shell command with an option or a path ("ls -la", "cd ~/projects"). An argument is an
# option, a path, a number, or a lower-case word (not two in a row); a capital, punctuation,
# anything SPAN_RE masks on its own (a URL, a placeholder) and the commonest words of English
# end the command (others do not: "to see ls -la output" takes "output" in).
_STOP_WORDS = (
    "a|about|after|again|also|an|and|any|are|as|at|be|been|before|but|by|can|cannot|could|did|"
    "do|does|each|fails|first|for|from|had|has|have|if|in|instead|into|is|it|its|later|like|"
    "may|might|more|must|next|not|now|of|on|once|or|should|so|some|such|than|that|the|then|"
    "there|this|to|too|until|was|were|when|where|which|while|will|with|would|you|your")
_ARG_REST = r"(?:[\w@=/~+-]|[.,](?=[\w/~-])|:(?=[\w~]|/(?!/)))*+"
_ARG = (rf"(?!(?:{_STOP_WORDS})(?![\w-]|\.\w)|[a-z][\w+.-]*://)"
        rf"(?:[a-z0-9/~@=+-]|\.\.?(?=[\w/])){_ARG_REST}")
# a plain word (a package, a target, an option's value) comes only after the command's name or
# an option or another argument, never after a plain word: "git diff header lacks ..." is
# "git diff header"
_WHOLE = r"(?![\w@=/~+]|[.,:](?=[\w/~-]))"
_PLAIN = rf"(?!(?:{_STOP_WORDS}){_WHOLE})[a-z][a-z0-9-]*+{_WHOLE}"
_ARGS = (rf"(?: {_PLAIN})?(?: (?:-{{1,2}}[A-Za-z0-9]{_ARG_REST}"
         rf"|(?![a-z][a-z0-9-]*+{_WHOLE}|-){_ARG})(?: {_PLAIN})?){{0,10}}")
_SUBCOMMANDS = (
    "activate|add|apply|autoremove|branch|build|checkout|ci|clean|clone|commit|compose|"
    "create|delete|describe|diff|disable|enable|exec|fetch|freeze|get|images|import|init|"
    "install|list|logs|merge|new|package|ps|publish|pull|purge|push|rebase|reload|remove|"
    "require|reset|restart|restore|rm|run|search|serve|show|start|stash|status|stop|switch|"
    "test|uninstall|update|upgrade")
_TOOLS = (
    "apt-get|apt|brew|cargo|composer|conda|dnf|docker-compose|docker|dotnet|flatpak|gem|git|"
    "gradle|helm|journalctl|kubectl|mvn|nmt|npm|pacman|pip3|pipx|pip|pnpm|podman|rustup|snap|"
    "systemctl|yarn|yum|zypper")
_SHELL = ("bash|cat|cd|chmod|chown|cp|curl|grep|head|less|ls|mkdir|mv|nano|node|python3|python|"
          "rm|rsync|scp|sh|ssh|tail|tar|touch|unzip|vim|wget")
_COMMAND = (
    rf"(?<![\w./-])(?:sudo (?:(?:{_TOOLS}) (?:{_SUBCOMMANDS})(?![\w-])|[a-z][\w-]*+)"
    rf"|(?:{_TOOLS}) (?:{_SUBCOMMANDS})(?![\w-])"
    r"|make (?:install|uninstall|clean|distclean)(?![\w-])"
    rf"|(?:{_TOOLS}|{_SHELL})"
    r"(?= (?:-{1,2}[A-Za-z]|[~/]|\.\.?/|[A-Za-z_][\w-]*[/.][\w-])))"
    rf"{_ARGS}")
# A date of numbers, day and month in either order ("31/12/2026", "12/31/2026"), is masked: the
# model garbled them ("31.12/2026", "07/14.2026"). From English it comes back as the target
# language writes dates ("31.12.2026") where one of the two can only be the day; "3/4/2026" is
# the 3rd of April or the 4th of March, and comes back as it is. (Sent unmasked in the target's
# way, "am 31.12.2026" read well, but the model wrote ".2026" again at the sentence's end.)
DATE_FORMATS = {
    **dict.fromkeys(["de", "pl", "ru", "tr", "uk"], "{d:02}.{m:02}.{y}"),
    **dict.fromkeys(["es", "fr", "it", "pt"], "{d:02}/{m:02}/{y}"),
    "nl": "{d:02}-{m:02}-{y}",
    "sv": "{y}-{m:02}-{d:02}",
}
_DATE = r"(?<![\w/.,-])(\d{1,2})(?P<sep>[/-])(\d{1,2})(?P=sep)(\d{4})(?![\w/-]|[.,]\d)"
DATE = re.compile(_DATE)
WORD_KINDS = frozenset({"path", "file", "identifier", "mention", "serial", "number",
                        "quantity", "command", "date"})
WORD_RE = re.compile(rf"(?P<command>{_COMMAND})|(?P<path>{_PATH})|(?P<file>{_FILE})"
                     rf"|(?P<identifier>{_IDENTIFIER})|(?P<mention>{_MENTION})"
                     rf"|(?P<date>{_DATE})|(?P<quantity>{_QUANTITY})|(?P<serial>{_SERIAL})"
                     rf"|(?P<number>{_NUMBER})")
_AMOUNT_RE = re.compile(_AMOUNT)
# each word span holds one of these (as _SPAN_HINT for SPAN_RE)
_WORD_HINT = re.compile(
    rf"[/\\_@]|[a-z][A-Z]|\.(?i:{_EXTENSIONS}|bashrc|zshrc|profile|gitignore|env)(?!\w)"
    rf"|\d|\b(?:sudo|make|{_TOOLS}|{_SHELL}) ")
# (thousands, decimal) separators of the languages whose numbers `mask` rewrites (CLDR's);
# only numbers of a source language that writes them as English does are read as such
_COMMA_GROUPS = (",", ".")
NUMBER_SEPARATORS = {
    **dict.fromkeys(["en", "ja", "zh", "ko", "he", "th", "hi"], _COMMA_GROUPS),
    **dict.fromkeys(["de", "es", "it", "nl", "pt", "da", "id", "tr", "el", "ro"], (".", ",")),
    "fr": ("\u202f", ","),
    **dict.fromkeys(["ru", "uk", "pl", "cs", "sk", "sv", "fi", "nb", "hu", "bg"], ("\xa0", ",")),
}
# A time on the 12-hour clock ("5 pm", "6:45 p.m.") is written on the 24-hour clock ("17:00",
# "18:45") before the model, from English into a language whose readers use that clock (CLDR's
# time formats with "H" and ":"): the model wrote "5 p.m." as "5 Uhr" (five in the morning) and
# "2 pm" as "2 Pm", and read "at 17:00" well. A dotted form's last period that also ends the
# sentence stays.
CLOCK_24 = frozenset({"cs", "de", "es", "fr", "it", "nl", "pl", "pt", "ru", "sv", "tr", "uk"})
CLOCK_12 = re.compile(r"(?<![\w:.,])(1[0-2]|0?[1-9])(?::([0-5]\d))?[ \xa0]?"
                       r"(?:([AaPp])[Mm]\b|([AaPp])\.[Mm]\.(?=(\s*$|\s+[A-Z])?))")
_CLOCK_12_HINT = re.compile(r"\d[ \xa0]?[AaPp]\.?[Mm]")
_TAG_NAME = re.compile(r"</?\s*([\w:-]+)")
_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class MaskStyle:
    """How the mask of the n-th masked span (from 1) is written; with keep_placeholders,
    placeholders are their own masks (the model has seen them) and only tags, URLs and
    addresses get numbered ones (emoji none: `_masks_for`). A mask must be a span itself
    (SPAN_RE finds it)."""

    template: str
    keep_placeholders: bool = False

    def token(self, n: int) -> str:
        return self.template.format(n=n)


QT_STYLE = MaskStyle("%{n}")
BRACE_STYLE = MaskStyle("{{{n}}}")
KEEP_STYLE = MaskStyle("%{n}", keep_placeholders=True)
KEEP_BRACE_STYLE = MaskStyle("{{{n}}}", keep_placeholders=True)
DEFAULT_STYLE = KEEP_BRACE_STYLE


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str  # placeholder, tag, url, email, code, emoji; WORD_KINDS


def _spans(pattern: re.Pattern, text: str) -> Iterator[re.Match]:
    """pattern.finditer(text) for SPAN_RE, or a pattern whose every match is a span (the
    masks), without running it over a text that has no span (_SPAN_HINT)."""
    return pattern.finditer(text) if _SPAN_HINT.search(text) else iter(())


def has_words(text: str, markup: bool = False) -> bool:
    """Whether text has a letter outside its protected spans; with markup (HTML-escaped text),
    read with its character references as the characters they stand for: "&nbsp;" has none."""
    if not _SPAN_HINT.search(text):
        return bool(_LETTER.search(html.unescape(text) if markup else text))
    if markup and "&" in text:  # a reference may stand for a letter, or hide one, across spans
        return bool(_LETTER.search(html.unescape(SPAN_RE.sub("", text))))
    # the spans looked for only as far as the first letter outside them: SPAN_RE tries each of
    # its alternatives at every position, and most texts have a word before their first span
    letter, pos = _LETTER.search(text), 0
    while letter:
        span = SPAN_RE.search(text, pos)
        if span is None or span.start() > letter.start():
            return True
        pos = max(span.end(), span.start() + 1)  # (past an empty match, as sub goes on)
        if span.end() > letter.start():
            letter = _LETTER.search(text, span.end())
    return False


def find_spans(text: str) -> list[Span]:
    """SPAN_RE's spans, and the words of software (WORD_RE) outside them: a URL, an address
    or code holds a path or a file name whole. Two scans, each skipped without its hint: one
    pattern of all the kinds tried each of them at every position of every text."""
    spans = [Span(m.start(), m.end(), m.lastgroup or "") for m in _spans(SPAN_RE, text)]
    if not _WORD_HINT.search(text):
        return spans
    out, k = [], 0
    for m in WORD_RE.finditer(text):
        while k < len(spans) and spans[k].end <= m.start():
            out.append(spans[k])
            k += 1
        if k == len(spans) or m.end() <= spans[k].start:
            out.append(Span(m.start(), m.end(), m.lastgroup or ""))
    return out + spans[k:]


@dataclass(frozen=True)
class Masked:
    """A text with its protected spans replaced by masks.

    originals[i] is the i-th span (in source order), masks[i] the string standing for it;
    at_edge[i] is "start", "end" or "";
    neighbours[i] are the characters just (left, right) of the span ("" at an edge);
    where[i] is the (start, end) of its mask in `text`;
    pairs are (open, close) indices of matching tags;
    lines[i], for a span taken out (an empty mask): ("start" or "end", k) where it stood at the
    start or the end of `text`'s k-th line (from 0), else ("", k);
    kinds[i] is its Span.kind."""

    text: str
    originals: tuple[str, ...]
    masks: tuple[str, ...]
    at_edge: tuple[str, ...]
    neighbours: tuple[tuple[str, str], ...]
    where: tuple[tuple[int, int], ...]
    pairs: tuple[tuple[int, int], ...]
    lines: tuple[tuple[str, int], ...]
    kinds: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.originals)


def mask(text: str, style: MaskStyle = DEFAULT_STYLE,
         languages: tuple[str | None, str | None] | None = None) -> Masked:
    """The text with its spans masked. A number written with thousands separators is masked
    only with `languages` (source, target) whose ways of writing numbers are known
    (NUMBER_SEPARATORS) and where the source writes them as English does ("1,000" is one in
    French), and comes back written the target's way; so does a quantity's amount (a quantity
    is masked without `languages` too, for its unit), and, from English, a date of numbers
    whose day is clear (DATE_FORMATS). Times on the 12-hour clock are written on the 24-hour
    clock first (`written_for`: the masked text has them so; nothing to put back)."""
    source, target = languages or (None, None)
    numbers = _number_separators(source, target)
    text = written_for(text, source, target)
    dates = DATE_FORMATS.get(target) if source == "en" else None
    spans = [s for s in find_spans(text) if numbers or s.kind != "number"]
    originals = tuple(_written(text[s.start : s.end], s.kind, numbers, dates) for s in spans)
    masks = _masks_for(spans, originals, style)
    out, pos, where, lines, length = [], 0, [], [], 0  # length: of "".join(out), as it grows
    newlines, blank = 0, True  # of "".join(out): its line breaks, whether its last line is blank
    ends = _line_ends(text, spans) if "" in masks else []
    for k, (span, token) in enumerate(zip(spans, masks, strict=True)):
        before, end, edge = text[pos : span.start], span.end, ""
        if not token:
            before, end, edge = _taken_out(text, before, end, blank, ends[k])
        out.append(before)
        newlines += before.count("\n")
        lines.append((edge, newlines))
        added = before + token
        blank = (blank or "\n" in added) and not added.rsplit("\n", 1)[-1].strip()
        start = length + len(before)
        where.append((start, start + len(token)))
        out.append(token)
        length, pos = start + len(token), end
    out.append(text[pos:])
    masked = "".join(out)
    between = [text[a.end : b.start] for a, b in zip(spans, spans[1:], strict=False)]
    # blank before a span: it starts at or before the first non-blank character; blank after
    # it: it ends at or after the last one (one scan, not a slice per span)
    first, last = len(text) - len(text.lstrip()), len(text.rstrip())
    at_edge = []
    for i, span in enumerate(spans):
        before_blank = span.start <= first or (
            i > 0 and at_edge[i - 1] == "start" and not between[i - 1].strip()
        )
        at_edge.append("start" if before_blank else "")
    for i in reversed(range(len(spans))):
        after_blank = spans[i].end >= last or (
            i + 1 < len(spans) and at_edge[i + 1] == "end" and not between[i].strip()
        )
        if after_blank and at_edge[i] != "start":
            at_edge[i] = "end"
    neighbours = tuple((text[s.start - 1 : s.start] if s.start else "", text[s.end : s.end + 1])
                       for s in spans)
    return Masked(
        text=masked,
        originals=originals,
        masks=masks,
        at_edge=tuple(at_edge),
        neighbours=neighbours,
        where=tuple(where),
        pairs=_tag_pairs(spans, originals),
        lines=tuple(lines),
        kinds=tuple(span.kind for span in spans),
    )


def _number_separators(source: str | None, target: str | None) -> tuple[str, str] | None:
    """The target's (thousands, decimal) separators, where numbers of the source are read as
    English writes them; else None (a language not given, or not in NUMBER_SEPARATORS)."""
    if NUMBER_SEPARATORS.get(source) != _COMMA_GROUPS:
        return None
    return NUMBER_SEPARATORS.get(target)


def written_for(text: str, source: str | None, target: str | None) -> str:
    """text from English with its times on the 12-hour clock on the 24-hour clock, for a
    target of CLOCK_24."""
    if source != "en":
        return text
    if target in CLOCK_24 and _CLOCK_12_HINT.search(text):
        text = CLOCK_12.sub(on_24_hours, text)
    return text


def date_for(date: str, form: str) -> str:
    """A date of numbers (DATE) written in `form`, where one of its first two numbers can only
    be the day (and the date exists); else as it is."""
    found = DATE.fullmatch(date)
    first, second, year = int(found.group(1)), int(found.group(3)), int(found.group(4))
    if first > 12 >= second:
        day, month = first, second
    elif second > 12 >= first:
        day, month = second, first
    else:
        return date
    try:
        datetime.date(year, month, day)
    except ValueError:
        return date
    return form.format(d=day, m=month, y=year)


def on_24_hours(time: re.Match) -> str:
    """A CLOCK_12 match on the 24-hour clock ("6:45 pm" -> "18:45"), with its sentence's
    period where a dotted form ended the sentence too."""
    hour, minutes, plain, dotted, end = time.groups()
    pm = (plain or dotted) in "Pp"
    written = f"{int(hour) % 12 + (12 if pm else 0)}:{minutes or '00'}"
    return written + "." if end is not None else written


def _written(original: str, kind: str, numbers: tuple[str, str] | None,
             dates: str | None = None) -> str:
    """A span as it comes back: a number, or a quantity's amount, the target's way where
    `numbers` are the target's separators, a date in the form `dates` (DATE_FORMATS)."""
    if dates and kind == "date":
        return date_for(original, dates)
    if numbers and kind == "number":
        return _number_for(original, *numbers)
    if numbers and kind == "quantity":
        return _AMOUNT_RE.sub(lambda m: _number_for(m.group(), *numbers), original, count=1)
    return original


def _number_for(number: str, group: str, decimal: str) -> str:
    """A number as English writes it ("1,234.56") with other separators ("1.234,56")."""
    whole, _, fraction = number.partition(".")
    return whole.replace(",", group) + (decimal + fraction if fraction else "")


_BLANKS = re.compile(r"[ \t]*")


def _line_ends(text: str, spans: list[Span]) -> list[bool]:
    """For each span, whether only blanks and emoji follow it on its line (one pass, from the
    last span back)."""
    ends = [False] * len(spans)
    for k in reversed(range(len(spans))):
        last = k + 1 == len(spans)
        gap = text[spans[k].end : len(text) if last else spans[k + 1].start]
        if "\n" in gap or last:
            ends[k] = not gap.split("\n", 1)[0].strip()
        else:
            ends[k] = not gap.strip() and spans[k + 1].kind == "emoji" and ends[k + 1]
    return ends


def _taken_out(text: str, before: str, end: int, blank: bool, line_end: bool
               ) -> tuple[str, int, str]:
    """A span taken out of `text` (an emoji) that ends at `end`, with `before` the text between
    it and the previous span, `blank` whether the masked text's last line is blank so far and
    `line_end` whether only blanks and emoji follow it on its line: the text before it as it
    stays, where the text after it goes on, and the edge of its line it stood at ("start",
    "end" or ""). The spaces between it and its line's text go with it; between two words, a
    space."""
    if line_end:  # (emoji after it on its line go too)
        return before.rstrip(" \t"), end, "end"
    if not before.rsplit("\n", 1)[-1].strip() and (blank or "\n" in before):
        return before, _BLANKS.match(text, end).end(), "start"
    if before[-1:].isspace() and text[end : end + 1] in (" ", "\t"):
        return before, end + 1, ""
    if before[-1:].strip() and text[end : end + 1].strip():
        return before + " ", end, ""  # it stood between two words: they stay apart
    return before, end, ""


def _masks_for(spans: list[Span], originals: tuple[str, ...], style: MaskStyle) -> tuple[str, ...]:
    """Each span's mask: itself (a kept placeholder), nothing (an emoji: the model sees the
    sentence without it, and unmask puts it back as it does a dropped mask; as a mask or as
    itself, an unknown piece, it changed the words around it, and came back half the time) or
    the next numbered mask that is not already a kept placeholder of this text."""
    keep = [style.keep_placeholders and s.kind == "placeholder" for s in spans]
    taken = {o for o, k in zip(originals, keep, strict=True) if k}
    masks, n = [], 0
    for span, original, kept in zip(spans, originals, keep, strict=True):
        if kept or span.kind == "emoji":
            masks.append("" if span.kind == "emoji" else original)
            continue
        n += 1
        while style.token(n) in taken:
            n += 1
        masks.append(style.token(n))
    return tuple(masks)


def _tag_pairs(spans: list[Span], originals: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """Each end tag with the last start tag of its name still open. The open ones are kept
    by name: an end tag looking through all of them, most recent first, cost a paragraph of
    tags never closed (<img>, <br>) and end tags without a start their product."""
    pairs: list[tuple[int, int]] = []
    open_tags: dict[str, list[int]] = {}  # name -> the indices of its open start tags
    for i, (span, original) in enumerate(zip(spans, originals, strict=True)):
        if span.kind != "tag" or original.endswith("/>"):
            continue
        name = _TAG_NAME.match(original).group(1).lower()
        if not original.startswith("</"):
            open_tags.setdefault(name, []).append(i)
        elif open_tags.get(name):
            pairs.append((open_tags[name].pop(), i))
    return tuple(sorted(pairs))


def unmask(masked: Masked, translation: str) -> str:
    """The translation with every mask replaced by its original; see the module doc for how
    dropped, duplicated, unknown and crossed masks are handled."""
    if not masked.count and not _SPAN_HINT.search(translation):
        return translation  # nothing to put back, no span the model made up to take out
    clean, placed = _strip_masks(masked, translation)
    spacing = {i: (True, True) for i in placed}  # (glued left, glued right)
    places = _Places(clean, masked.text.count("\n"))
    for i in range(masked.count):
        if i not in placed:
            placed[i], spacing[i] = _reinsert_at(masked, i, places, placed)
    for a, b in masked.pairs:  # an opening tag must not come after its closing tag
        if placed[a] > placed[b]:
            placed[a], placed[b] = placed[b], placed[a]
    clean, placed = _tighten_pairs(masked, clean, placed)
    out = _assemble(masked, clean, placed, spacing)
    if Counter(m.group() for m in _spans(SPAN_RE, out)) != Counter(
            o for o, kind in zip(masked.originals, masked.kinds, strict=True)
            if kind not in WORD_KINDS):
        # an original joined with a neighbour into another span ("%" + "<b>" reads "%<", "b>"):
        # space every original off
        out = _assemble(masked, clean, placed, dict.fromkeys(placed, (False, False)))
    return out


def _tighten_pairs(
    masked: Masked, clean: str, placed: dict[int, int]
) -> tuple[str, dict[int, int]]:
    """A tag pair that hugged its text in the source hugs it here too: the model's space just
    inside `<b> word </b>` is deleted. The pairs are taken in turn, each reading `clean` as
    the pairs before it left it (a character deleted, the places after it one less), but the
    deletions are made at the end, at once: each made at once copied `clean` and moved every
    mask's place, the square of a paragraph's pairs."""
    if not masked.pairs:
        return clean, placed
    deleted: set[int] = set()  # in `clean` as it came

    def alive(at: int, step: int) -> int:  # the first character from `at` not deleted
        while at in deleted:
            at += step
        return at

    at = collections.defaultdict(list)  # place -> the spans placed there
    for i, where in placed.items():
        at[where].append(i)
    for a, b in masked.pairs:
        start, end = placed[a], placed[b]  # the characters between the pair's masks
        first, last = alive(start, 1), alive(end - 1, -1)
        if first >= end or last < start:
            continue  # none left between them
        # its last character, then its first (where that is another one), each deleted where
        # it is a space that was a word's character in the source; not where another span
        # stands between it and the tag ("<b>%s --</b>": the space follows the placeholder)
        if clean[last] == " " and masked.neighbours[b][0].strip() and not any(
                i < b for i in at[end] if i != a):
            deleted.add(last)
        if (first != last or last not in deleted) and clean[first] == " " and (
                masked.neighbours[a][1].strip()) and not any(i > a for i in at[start]
                                                             if i != b):
            deleted.add(first)
    if not deleted:
        return clean, placed
    gone = sorted(deleted)
    return ("".join(c for k, c in enumerate(clean) if k not in deleted),
            {i: p - bisect.bisect_left(gone, p) for i, p in placed.items()})


# numbered brace masks ("{12}"): beyond this many in one text they are found by their shape,
# not one by one: the regular expression tries its alternatives in turn, so with thousands
# (a paragraph of 100,000 formatting runs) each match took a scan of them all
_MANY_MASKS = 64
_BRACE_MASK = re.compile(r"\{\d+\}")


@functools.lru_cache(maxsize=1024)
def _mask_pattern(masks: frozenset[str]) -> re.Pattern:
    """The masks (longest first), then any span, compiled once per set of masks: compiling it
    per translation showed in a server profile of the event loop."""
    numbered = {t for t in masks if _BRACE_MASK.fullmatch(t)}
    # a brace mask is delimited, so matching its shape finds the same masks as listing them
    # (one that was never issued is then deleted, as SPAN_RE's placeholder match of it was)
    shape = [_BRACE_MASK.pattern] if len(numbered) > _MANY_MASKS else []
    listed = masks - numbered if shape else masks
    ours = "|".join(shape + [re.escape(t) for t in sorted(listed, key=len, reverse=True)])
    return re.compile(f"{ours}|{SPAN_RE.pattern}") if ours else SPAN_RE


def _strip_masks(masked: Masked, translation: str) -> tuple[str, dict[int, int]]:
    """The translation without masks and without spans the model made up, and where each
    span's mask stood in it (the k-th copy of a mask string goes to the k-th span it stands
    for; copies beyond those are deleted)."""
    pieces: list[str] = []  # of the clean text, `length` characters so far
    placed, pos, length = {}, 0, 0
    free: dict[str, deque[int]] = {}  # mask string -> its spans not placed yet, in order
    for i, token in enumerate(masked.masks):
        free.setdefault(token, deque()).append(i)
    # the masks themselves first, longest first: "%2hier" is mask %2 glued to a word, not
    # the printf "%2hi"
    at_end: list[int] = []  # the spans placed where clean ends, after its last piece
    for m in _spans(_mask_pattern(frozenset(masked.masks) - {""}), translation):
        if piece := translation[pos : m.start()]:  # so pieces[-1] is where clean ends
            pieces.append(piece)
            length += len(piece)
            at_end = []
        pos = m.end()
        if free.get(m.group()):
            i = free[m.group()].popleft()
            placed[i] = length
            at_end.append(i)
        elif (not at_end and pieces and pieces[-1].endswith(" ")
              and translation[pos : pos + 1] in (" ", "")):
            # a deleted mask leaves no double space (the space is no longer the one before
            # masks placed after it: so they stay inside clean)
            pieces[-1] = pieces[-1][:-1]
            length -= 1
    pieces.append(translation[pos:])
    clean = "".join(pieces)
    # deleting a span may join what was around it into a new one ("%%jm" + "p" -> "%p"):
    # delete until none is left, moving the places after each deletion; but as many of each
    # as the source has once its masks are out are its own ("20.6%<a>4</a>": "%4"), not made up
    own: Counter[str] | None = None  # read once, where the translation has a span at all
    while True:
        left = None  # of the source's own, in this pass
        for found in _spans(SPAN_RE, clean):
            own = _own_spans(masked) if own is None else own
            left = own.copy() if left is None else left
            if left[found.group()] <= 0:
                break
            left[found.group()] -= 1
        else:
            return clean, placed
        a, b = found.span()
        clean = clean[:a] + clean[b:]
        placed = {i: at if at <= a else max(a, at - (b - a)) for i, at in placed.items()}


def _own_spans(masked: Masked) -> Counter[str]:
    """The spans of the masked source once its masks are taken out, and how often each is."""
    pieces, pos = [], 0
    for a, b in masked.where:
        pieces.append(masked.text[pos:a])
        pos = b
    pieces.append(masked.text[pos:])
    return Counter(m.group() for m in _spans(SPAN_RE, "".join(pieces)))


class _Places:
    """The places in a translation (`clean`: without its masks) where dropped masks may go, each
    kind found once per translation, not once per mask (a text may drop thousands: emoji)."""

    def __init__(self, clean: str, source_lines: int) -> None:
        self.clean = clean
        self.source_lines = source_lines  # the masked source's line breaks
        self._found: dict[str, list[int]] = {}

    def of(self, pattern: str) -> list[int]:
        """Where pattern's matches start, in order."""
        if pattern not in self._found:
            self._found[pattern] = [m.start() for m in re.finditer(pattern, self.clean)]
        return self._found[pattern]

    def line(self, k: int) -> tuple[int, str] | None:
        """Where the k-th line starts, and its text; None where the translation's lines are
        not the source's."""
        breaks = self.of("\n")
        if len(breaks) != self.source_lines:
            return None
        begin = breaks[k - 1] + 1 if k else 0
        return begin, self.clean[begin : breaks[k] if k < len(breaks) else len(self.clean)]


def _nearest(places: list[int], target: float, first: tuple[int, ...] = ()) -> int:
    """min([*first, *places], key=distance to target), the first of two as near as it takes
    them, with `places` in order: found by bisection."""
    k = bisect.bisect_left(places, target)
    return min([*first, *places[max(0, k - 1) : k + 1]], key=lambda b: abs(b - target))


def _reinsert_at(
    masked: Masked, i: int, places: _Places, placed: dict[int, int]
) -> tuple[int, tuple[bool, bool]]:
    """Where dropped mask i goes back, and its spacing (glued left, glued right)."""
    clean = places.clean
    side, k = masked.lines[i]
    if side and (line := places.line(k)):  # to its line's start or end
        begin, text = line
        at = begin + (len(text) - len(text.lstrip()) if side == "start" else len(text.rstrip()))
    elif masked.at_edge[i] == "start":
        at = len(clean) - len(clean.lstrip())
    elif masked.at_edge[i] == "end":
        at = len(clean.rstrip())
    elif (neighbour := _placed_neighbour(masked, i, placed)) is not None:
        at = placed[neighbour]
    else:
        # its middle's relative place: its start's put a mask after a word at that word's
        # start as often as at its end ("Page {1} of {2}." -> "{1} PAGE OF {2}.")
        target = sum(masked.where[i]) / 2 / max(1, len(masked.text)) * len(clean)
        left, right = masked.neighbours[i]
        # glued to a mark in the source ("page {1}.", "({1} pages"): next to that mark
        # nearest its relative place, glued to it, where the translation has one
        for mark, side in ((right, 0), (left, 1)):
            if mark.strip() and not mark.isalnum():
                found = places.of(re.escape(mark))
                if found:
                    return _nearest(found, target - side) + side, (bool(side), not side)
        # else the word boundary nearest to its relative position in the source, spaced
        return _nearest(places.of(r"(?<=\s)\S"), target, (0, len(clean))), (False, False)
    # glued to a word character it touched in the source, or to the same character here
    left, right = masked.neighbours[i]
    glue_left = left.isalnum() or (left.strip() != "" and clean[at - 1 : at] == left)
    glue_right = right.isalnum() or (right.strip() != "" and clean[at : at + 1] == right)
    return at, (glue_left, glue_right)


def _placed_neighbour(masked: Masked, i: int, placed: dict[int, int]) -> int | None:
    """The nearest placed mask that mask i stood next to in the source, before it or after it,
    over other masks not placed (yet) between them: in "{1}{2}{3}" with {3} alone placed,
    {1} goes with {3} too (it went by its relative place, away from the code it preceded)."""
    for step in (-1, 1):
        j = i + step
        while 0 <= j < masked.count and _adjacent(masked, min(j, j - step), max(j, j - step)):
            if j in placed:
                return j
            j += step
    return None


def _adjacent(masked: Masked, a: int, b: int) -> bool:
    """Masks a and b stood next to each other in the masked source (only spaces between)."""
    return not masked.text[masked.where[a][1] : masked.where[b][0]].strip()


def _assemble(
    masked: Masked, clean: str, placed: dict[int, int], spacing: dict[int, tuple[bool, bool]]
) -> str:
    """Originals into `clean` at their places, with a space where `spacing` wants one (between
    two originals at one place: where neither is glued to the other)."""
    order = sorted(placed, key=lambda k: (placed[k], k))
    out, pos = [], 0
    for k, index in enumerate(order):
        at = placed[index]
        piece, (glue_left, glue_right) = masked.originals[index], spacing[index]
        out.append(clean[pos:at])
        joined_left = k > 0 and placed[order[k - 1]] == at  # the previous original is here too
        if not glue_left and not joined_left and _last_char(out).strip():
            piece = " " + piece
        nxt = order[k + 1] if k + 1 < len(order) else None
        if nxt is not None and placed[nxt] == at:  # spaced as they were in the source
            a, b = sorted((index, nxt))
            between = masked.text[masked.where[a][1] : masked.where[b][0]]
            if not between and not masked.masks[a]:  # taken out: the space that followed it
                between = " " if masked.neighbours[a][1] in (" ", "\t") else ""
            # two tags whose words went elsewhere (app.text.tags: "<em>x</em> y</a>" ->
            # "...x</em></a>")
            # close up; otherwise text between them in the source keeps them apart
            both_tags = all(masked.originals[i].startswith("<") for i in (a, b))
            piece += " " if between and not (both_tags and between.strip()) else ""
        elif not glue_right and clean[at : at + 1].strip():
            piece += " "
        out.append(piece)
        pos = at
    out.append(clean[pos:])
    return "".join(out)


def _last_char(pieces: list[str]) -> str:
    """The last character of "".join(pieces), without joining them (one call per span)."""
    return next((piece[-1] for piece in reversed(pieces) if piece), "")


def protect(
    translate: Callable[[list[str]], list[str]], style: MaskStyle = DEFAULT_STYLE
) -> Callable[[list[str]], list[str]]:
    """Wrap a batch translate function so protected spans survive it."""

    def protected(texts: list[str]) -> list[str]:
        masked = [mask(text, style) for text in texts]
        outputs = translate([m.text for m in masked])
        return [unmask(m, out) for m, out in zip(masked, outputs, strict=True)]

    return protected


def joins_at_break(before: str, after: str) -> bool:
    """Whether a sentence runs on over a line-break tag between these two stretches of text
    (markup around them ignored): the text before has words and does not end a sentence or a
    label (. ! ? … : ;), and the text after starts with a lowercase letter."""
    head = html.unescape(ANY_TAG_RE.sub("", before)).rstrip()
    tail = html.unescape(ANY_TAG_RE.sub("", after)).lstrip()
    return (has_words(head) and head[-1] not in ".!?…:;" and bool(tail)
            and tail[0].islower())


def join_breaks(parts: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """(chunk, translatable) runs with each line-break tag that stands alone between two texts
    of one sentence (`joins_at_break`) moved into the text: "Save the file<br>and close it."
    becomes one run with the tag in it. What is read of heads whole is bounded
    (`_JOIN_WORK_FLOOR`, `_JOIN_WORK_PER_CHARACTER`): past it, a line whose head must be read
    whole does not join (a block made for it, a head of thousands of spans before its first
    word and thousands of short lines after it, cost the product)."""
    out: list = []
    joined: dict[int, _Joined] = {}  # the texts that lines may join, by their place in out
    work = [max(_JOIN_WORK_FLOOR, _JOIN_WORK_PER_CHARACTER * sum(len(c) for c, _ in parts))]
    for chunk, kind in parts:
        if (kind and len(out) >= 2 and out[-2][1] and not out[-1][1]
                and LINE_BREAK_RE.fullmatch(out[-1][0])):
            before = joined.get(len(out) - 2) or joined.setdefault(len(out) - 2,
                                                                   _Joined(out[-2][0], work))
            if before.joins(chunk):
                before.add(out.pop()[0], chunk)
                continue
        out.append((chunk, kind))
    for at, text in joined.items():
        out[at] = (text.text(), True)
    return out


# characters of heads join_breaks may read whole in all, at least and for each of its own
_JOIN_WORK_FLOOR = 1_000_000
_JOIN_WORK_PER_CHARACTER = 16
_BLANK_CHARACTERS = " \t\n\r\f\v"
_SETTLING = 400  # characters of a text's start read for a word that stays one (_Joined._settle)
_NAMED_REFERENCE = 32  # characters of a named character reference's name at most (html.unescape)


class _Joined:
    """A text that join_breaks joins the lines after it to, line by line, and what
    joins_at_break reads of it as the text before the next break (`head`: tags out, character
    references read, blanks at the end stripped), kept as it grows: read whole again at each
    break, a block of thousands of lines that a sentence runs on over cost their square.

    Kept: the head's text as read, but for a character reference at its end that the next
    line may still go on (`open`); whether it has a letter, and a span's hint (_SPAN_HINT),
    so that a head without a hint has words where it has a letter (each span holds a hint);
    and, once found, a word at its start that no span can take, whatever follows it
    (`_settle`). Where neither tells, the head is read whole, as joins_at_break does, within
    join_breaks's bound."""

    def __init__(self, text: str, work: list[int]) -> None:
        self.pieces = [text]  # as written: texts and line breaks
        self.work = work  # what join_breaks may still read of heads whole (shared)
        self.read: list[str] | None = None  # the head's text, once read (_start)

    def text(self) -> str:
        return "".join(self.pieces)

    def joins(self, after: str) -> bool:
        """joins_at_break(self.text(), after)."""
        self._start()
        self.after = ANY_TAG_RE.sub("", after)  # (added as it is, if it joins)
        tail = html.unescape(self.after).lstrip()
        if not tail or not tail[0].islower():
            return False
        last = self._last()
        return bool(last) and last not in ".!?…:;" and self._words()

    def add(self, brk: str, after: str) -> None:
        """The line break and the text after it (`joins` said yes), joined."""
        self.pieces += [brk, after]
        self._read(self.after)  # a line break is a tag: it leaves nothing

    def _start(self) -> None:
        if self.read is None:
            self.read, self.open, self.length, self.end = [], "", 0, ""
            self.letter = self.hint = False
            self.words: bool | None = None  # True: a word that stays one; False: none to find
            self._read(ANY_TAG_RE.sub("", self.pieces[0]))

    def _read(self, plain: str) -> None:
        """More of the head, tags out: read up to its last "&", and past it once the
        reference there is ended (html.unescape reads it the same way whatever follows)."""
        raw, self.open = self.open + plain, ""
        amp = raw.rfind("&")
        if amp < 0:
            self._done(raw)
            return
        self._done(html.unescape(raw[:amp]))  # (a reference never holds an "&")
        end = _reference_end(raw, amp)
        if end is None:
            self.open = raw[amp:]
        else:
            self._done(html.unescape(raw[amp:end]) + raw[end:])

    def _done(self, text: str) -> None:
        if not text:
            return
        self.read.append(text)
        self.letter = self.letter or bool(_LETTER.search(text))
        self.hint = self.hint or bool(_SPAN_HINT.search(self.end + text))
        self.end = (self.end + text)[-3:]  # a hint is four characters at most ("www.")
        self.length += len(text)
        if self.words is None and self.length - len(text) < _SETTLING:
            self._settle()

    def _settle(self) -> None:
        """A letter of the head's first _SETTLING characters outside its spans, with a blank
        after it, before which every span able to hold a blank that may start there is read
        whole (`_decided`): every other span ends at a blank, so whatever follows, the
        letter stays outside them, and the head has words."""
        start, size = [], 0
        for piece in self.read:
            start.append(piece)
            size += len(piece)
            if size >= _SETTLING:
                break
        text = "".join(start)[:_SETTLING]
        text = text[: max(text.rfind(c) for c in _BLANK_CHARACTERS) + 1]
        spans = list(_spans(SPAN_RE, text))
        gaps = zip([0] + [m.end() for m in spans], [m.start() for m in spans] + [len(text)],
                   strict=True)
        letter = next((found for a, b in gaps if (found := _LETTER.search(text, a, b))), None)
        if letter:
            self.words = all(_decided(text, k, spans) for k in range(letter.start())
                             if _over_blanks(text, k))
        elif self.length >= _SETTLING:
            self.words = False

    def _last(self) -> str:
        """The head's last character ("" where it is empty)."""
        tail = html.unescape(self.open).rstrip()
        if tail:
            return tail[-1]
        for piece in reversed(self.read):
            if stripped := piece.rstrip():
                return stripped[-1]
        return ""

    def _words(self) -> bool:
        """has_words(head); False once join_breaks may read no more heads whole."""
        if self.words:
            return True
        tail = html.unescape(self.open)
        if not self.hint and not _SPAN_HINT.search(self.end + tail):
            return self.letter or bool(_LETTER.search(tail))
        head = ("".join(self.read) + tail).rstrip()
        self.work[0] -= len(head)
        return self.work[0] >= 0 and has_words(head)


def _over_blanks(text: str, k: int) -> bool:
    """Whether a span that may hold a blank can start at text[k]: a tag or an element, code,
    a placeholder with a space among its flags ("%(n) d"), a link's target or label (after a
    "]"); every other kind of span ends at a blank."""
    c = text[k]
    return c in "<`" or (c == "%" and text[k + 1 : k + 2] == "(") or (
        c in "([" and text[k - 1 : k] == "]")


def _decided(text: str, k: int, spans: list[re.Match]) -> bool:
    """Whether what reading text's spans (`spans`) found at text[k] stays so whatever follows
    text: k is inside a span that starts before it, or starts one (but a tag: its element may
    end later and be read whole), that ends before text does (its end read, what follows it
    seen)."""
    at = bisect.bisect_right([m.start() for m in spans], k) - 1
    if at < 0 or spans[at].end() <= k:
        return False
    span = spans[at]
    return span.end() < len(text) and (span.start() < k or text[k] != "<")


def _reference_end(text: str, amp: int) -> int | None:
    """Where the character reference that html.unescape reads from the "&" at `amp` ends
    (amp + 1 where it reads none), or None where more text after it may still make it
    longer."""
    rest = text[amp + 1 :]
    if rest[:1] == "#":  # &#65; &#x41; (the ";" is optional)
        hexadecimal = rest[1:2] in ("x", "X")
        digits = "0123456789abcdefABCDEF" if hexadecimal else "0123456789"
        k = 2 if hexadecimal else 1
        if k >= len(rest):
            return None
        if rest[k] not in digits:
            return amp + 1
        while k < len(rest) and rest[k] in digits:
            k += 1
        if k == len(rest):
            return None
        return amp + 1 + k + (rest[k] == ";")
    k = 0
    while k < len(rest) and k < _NAMED_REFERENCE and rest[k] not in "\t\n\f <&#;":
        k += 1
    if k == len(rest):
        return None
    if k == 0:
        return amp + 1
    return amp + 1 + k + (rest[k] == ";")
