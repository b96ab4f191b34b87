"""The Debian packages the corpus is built from, and why.

``HELP_PACKAGES`` are the LibreOffice help pages (aligned paragraph by
paragraph).  ``GETTEXT_PACKAGES`` ship German ``.mo`` catalogs whose English
msgids are the source side.  Chosen for volume and translation quality: large,
actively reviewed translation teams (LibreOffice, GNOME, KDE, Xfce, MATE,
Cinnamon, GNU).  ``GENERAL_GETTEXT_PACKAGES`` (games with dialogue, stories and
encyclopedias) and the Ding dictionary (``ding.DING_PACKAGE``) bring everyday and
narrative English.  Every pair carries the domain of its source (``domain_of``).
``RESERVED`` packages are never used: they are kept for independent evaluation,
and the builder refuses a package list that names one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import gamedata
from .ding import DING_PACKAGE, is_example_sentence

HELP_EN = "libreoffice-help-en-us"
HELP_DE = "libreoffice-help-de"
HELP_PACKAGES = [HELP_EN, HELP_DE]
HELP_LICENCE = "MPL-2.0"
HELP_SOURCE = "libreoffice-help"  # the one corpus source both help packages feed

RESERVED = frozenset(
    {"gnome-user-docs", "mate-user-guide", "wesnoth-1.16-httt", "wesnoth-1.16-trow"}
)

DOMAINS = ("software", "documentation", "general")
IN_DOMAIN = ("software", "documentation")  # the original corpus; dev.* and test.* hold these

# Measured contributions (new unique pairs, in this order) are in corpus.json and the README.
# Left out after inspection: libvirt-l10n and libgphoto2-l10n (many word-by-word translations);
# glade, gparted, kate, totem, transmission-common, abiword-common, bash-builtins and the
# libkchart2/libkgantt2 l10n packages ship no German .mo in bookworm.
GETTEXT_PACKAGES = [
    # LibreOffice user interface
    "libreoffice-l10n-de",
    # GNU toolchain and core utilities
    "gcc-12-locales",
    "libc-l10n",
    "coreutils",
    "util-linux-locales",
    "e2fsprogs-l10n",
    "tar",
    "grep",
    "sed",
    "findutils",
    "diffutils",
    "gettext",
    "gawk",
    "make",
    "wget",
    "nano",
    "gdbm-l10n",
    "cflow-l10n",
    "libparted-i18n",
    "gnupg-l10n",
    "libgpg-error-l10n",
    # Packaging and developer tools
    "dpkg",
    "apt",
    "aptitude-common",
    "synaptic",
    "rpm-i18n",
    "git",
    "mc-data",
    "geany-common",
    "meld",
    "anjuta-common",
    "gnome-builder",
    "kdevelop-l10n",
    "libosinfo-l10n",
    # GNOME and GTK
    "libgtk-3-common",
    "libgtk-4-common",
    "libglib2.0-data",
    "nautilus-data",
    "gnome-control-center-data",
    "gnome-shell-common",
    "gnome-software-common",
    "gnome-disk-utility",
    "gnome-terminal-data",
    "gnome-system-monitor",
    "gnome-calendar",
    "gnome-maps",
    "baobab",
    "seahorse",
    "file-roller",
    "evince-common",
    "eog",
    "simple-scan",
    "cheese-common",
    "epiphany-browser-data",
    "evolution-common",
    "evolution-data-server-common",
    "gedit-common",
    "rhythmbox-data",
    "totem-common",
    "shotwell-common",
    "brasero-common",
    "network-manager",
    "network-manager-gnome",
    "pulseaudio",
    "pavucontrol",
    # Cinnamon, MATE and Xfce
    "cinnamon-l10n",
    "caja-common",
    "pluma-common",
    "mate-control-center-common",
    "mate-desktop-common",
    "thunar-data",
    "xfce4-panel",
    "xfce4-settings",
    "xfce4-terminal",
    "mousepad",
    "ristretto",
    "parole",
    "lightdm-gtk-greeter",
    # KDE
    "plasma-workspace-data",
    "plasma-desktop-data",
    "systemsettings",
    "dolphin",
    "konsole",
    "okular",
    "kmail",
    "kdeconnect",
    "kile-l10n",
    "k3b-i18n",
    "krita-l10n",
    "digikam-data",
    "kdenlive-data",
    "libokteta-l10n",
    "libktorrent-l10n",
    # Desktop applications
    "inkscape",
    "gimp-data",
    "darktable",
    "gthumb-data",
    "vlc-l10n",
    "audacity-data",
    "aegisub-l10n",
    "gnumeric-common",
    "gnucash-common",
    "gramps",
    "claws-mail-i18n",
    "sylpheed-i18n",
    "pidgin-data",
    "hexchat-common",
    "filezilla-common",
    "freeciv-data",
]

GERMAN_LOCALES = frozenset({"de", "de_DE"})

# General domain: games whose German catalogs hold dialogue, stories and encyclopedia
# text.  Wesnoth's campaign catalogs ship in their own packages; "Heir to the Throne" and
# "The Rise of Wesnoth" are RESERVED.  freeciv-data stays in GETTEXT_PACKAGES (software)
# so the in-domain dev/test splits stay those of the first corpus.
WESNOTH_CAMPAIGNS = ["did", "dm", "dw", "ei", "l", "low", "nr", "sof", "sota", "sotbe", "thot"]
WESNOTH_CAMPAIGNS += ["tsg", "ttb", "utbs"]
GENERAL_GETTEXT_PACKAGES = [
    "wesnoth-1.16-data",
    *[f"wesnoth-1.16-{c}" for c in WESNOTH_CAMPAIGNS],
    "widelands-data",
    "warzone2100-data",
    # Corpus v3: narrative and everyday text (item and creature descriptions, dialogue,
    # mission briefings, tool tips). Each one's measured contribution is in corpus.json.
    "cataclysm-dda-data",
    "naev-data",
    "freedroidrpg-data",
    "freedink-data",
    "unknown-horizons",
    "warmux-data",
    "7kaa-data",
    "tuxpaint-data",
    "manaplus-data",
    "gbrainy",  # puzzles and their answers in plain sentences
]
# Looked at and left out (corpus v3): colobot-common (help pages in its own markup, one directory
# per language), singularity (no German), lordsawar-data (interface messages); supertuxkart-data
# (1,119 mostly interface messages in a 599 MB download), teeworlds-data (410 interface messages),
# ufoai-data (no German); 0ad-data-common, neverball-data, endless-sky-data, xmoto-data,
# pioneers-data, lbreakout2-data and asc-data ship no German text; scummvm-data's tables besides
# supernova.dat are small (kyra.dat), spelled without umlauts (mort.dat) or unpaired
# (titanic.dat); drascula-german is all capitals; stellarium-data's German is 44 short landscape
# pages (HTML to align by hand for little text); lincity-ng-data's help is XML pages per language;
# openttd-data and minetest-data are interface labels; kanagram/khangman/parley hold DocBook
# manuals and word lists; simutrans-data (HTML help), pysiogame (interface), enigma-data (~200
# loose level texts), btanks-data (capitals), lure-of-the-temptress (compressed text),
# adonthell-data (no German); dict-freedict-eng-deu is Ding again.

# What the builder extracts from those packages (their images and sounds are hundreds of MB):
# the German catalogs and the copyright files.
CATALOG_MEMBERS = ("*/de/LC_MESSAGES/*.mo", "./usr/share/doc/*")


@dataclass(frozen=True)
class DataSource:
    """A general-domain package whose German text is not in .mo catalogs."""

    members: tuple[str, ...]  # tar wildcards of what to extract (always with the copyright)
    read: Callable[[Path], Iterator[tuple[str, str]]]  # unpacked dir -> raw (en, de) pairs


_DOC = "./usr/share/doc/*"
DATA_SOURCES: dict[str, DataSource] = {
    "hedgewars-data": DataSource(
        ("*/Data/Locale/de.lua", "*/Data/Locale/*_de.txt", "*/Data/Locale/*_en.txt", _DOC),
        gamedata.read_hedgewars,
    ),
    "megaglest-data": DataSource(("*english.lng", "*german.lng", _DOC), gamedata.read_megaglest),
    "tuxpaint-stamps-default": DataSource(
        ("./usr/share/tuxpaint/stamps/*.txt", _DOC), gamedata.read_tuxpaint_stamps
    ),
    "flare-game": DataSource(
        ("*/languages/data.de.po", _DOC), gamedata.po_reader("**/languages/data.de.po")
    ),
    "supertux-data": DataSource(("*/de.po", _DOC), gamedata.po_reader("**/de.po")),
    "pingus-data": DataSource(("*/po/de.po", _DOC), gamedata.po_reader("**/po/de.po")),
    "frozen-bubble-data": DataSource(
        ("*/locale/de.po", _DOC), gamedata.po_reader("**/locale/de.po")
    ),
    # children's activities: short instructions and descriptions in plain words
    "gcompris-qt-data": DataSource(
        ("*/translations/gcompris_de.qm", _DOC), gamedata.read_qm("**/translations/gcompris_de.qm")
    ),
    "freeorion-data": DataSource(
        ("*/stringtables/en.txt", "*/stringtables/de.txt", _DOC), gamedata.read_freeorion
    ),
    "freecol": DataSource(
        ("*/strings/FreeColMessages.properties", "*/strings/FreeColMessages_de.properties", _DOC),
        gamedata.read_freecol,
    ),
    # two fish talking their way through puzzles: short everyday dialogue lines
    "fillets-ng-data": DataSource(("*/dialogs_de.lua", _DOC), gamedata.read_fillets),
    # a German game's objects, tutorials and missions (hints, dialogue), in packed groups
    "openclonk-data": DataSource(
        ("*/openclonk/*.ocd", "*/openclonk/*.ocf", "*/openclonk/System.ocg", _DOC),
        gamedata.read_openclonk,
    ),
    # a German adventure's messages and dialogue with their English translation
    "scummvm-data": DataSource(("*/supernova.dat", _DOC), gamedata.read_supernova),
}
DICTIONARY = "dictionary"  # train.domain's label for the Ding entries (domain "general")
PHRASE = "phrase"  # ... and for the Ding entries that are example sentences


def members_of(package: str) -> tuple[str, ...]:
    """Tar wildcards to extract from a package; empty: everything."""
    if package in DATA_SOURCES:
        return DATA_SOURCES[package].members
    if package in GENERAL_GETTEXT_PACKAGES:
        return CATALOG_MEMBERS
    return ()


def train_label(source: str, english: str) -> str:
    """The label of a training pair in ``train.domain``: its domain, except that the Ding
    dictionary is told apart from the narrative sources of the general domain, and its
    example sentences from its words and patterns, so a recipe can weigh the three
    (``domain_sample``): the entries are mostly one to three words, while the example
    sentences are the everyday English no other source has."""
    if source == DING_PACKAGE:
        return PHRASE if is_example_sentence(english) else DICTIONARY
    return domain_of(source)


def domain_of(source: str) -> str:
    """The domain of a corpus source (a package name or ``libreoffice-help``)."""
    if source == HELP_SOURCE:
        return "documentation"
    if source in GENERAL_GETTEXT_PACKAGES or source in DATA_SOURCES or source == DING_PACKAGE:
        return "general"
    return "software"


def check_not_reserved(packages: list[str]) -> None:
    """Refuse a package list that names a package kept for independent evaluation."""
    reserved = sorted(set(packages) & RESERVED)
    if reserved:
        raise ValueError(
            f"{', '.join(reserved)} reserved for independent evaluation: "
            "the corpus must never contain them (see RESERVED in model/corpus/sources.py)"
        )
