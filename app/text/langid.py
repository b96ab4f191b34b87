"""Language identification for `source: "auto"` and LibreTranslate's /detect.

py3langid (BSD-3-Clause; langid.py's naive Bayes model over byte n-grams, 97 languages, its
model inside the package: nothing is downloaded at run time), restricted to the languages the
service serves. Chosen by measurement against lingua-language-detector (bench/langid.py; the
accuracy and timings are in BENCHMARKS.md): as accurate on whole segments, a little less on
strings of a few words (many such strings, "Status", "Name", "OK", are the same in both
languages), quicker, and from a much smaller package.

Load a LanguageDetector once (it reads the model: about a second) in the service's lifespan and
share it: `detect` only reads it (the native scores' scratch arrays are used with the GIL held).
The native scores read the model's tables (`native_tables`, tens of MiB, most of it the byte
n-gram automaton), loaded once per process and never written: a supervisor loads them before it
forks its server processes (app.server), which then share their pages. py3langid's own model
object (its Python lists, a second copy of the automaton) is made only where the library is not
built.

The scores come from `app/text/langid_score.cc` (the same model's tables, one call a
text) where that library is built, else from py3langid's own walk and NumPy scoring: the same
probabilities within float rounding (a test compares them), and less of the server's CPU a
request beside the decode workers, where py3langid's many small NumPy calls and its walk over a
large table run cold (BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
from py3langid.langid import MODEL_DIR, MODEL_FILE, LanguageIdentifier
from py3langid.modelio import load_model

log = logging.getLogger("app.text.langid")


@dataclass(frozen=True)
class Detection:
    language: str
    confidence: float  # 0..100

    def libretranslate(self) -> dict[str, Any]:
        return {"language": self.language, "confidence": self.confidence}


class LanguageDetector:
    """Ranks the given languages (ISO 639-1 codes that the model knows) for a text."""

    def __init__(self, languages: Iterable[str]) -> None:
        self.languages = sorted(set(languages))
        if not self.languages:
            raise ValueError("a language detector needs at least one language")
        self._native = _native_scores(self.languages)
        self._model: LanguageIdentifier | None = None
        if self._native is None:
            self._model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            _check_known(self.languages, self._model.nb_classes)
            self._model.set_languages(self.languages)

    @property
    def native(self) -> bool:
        """Whether the scores come from the native library."""
        return self._native is not None

    def rank(self, text: str) -> list[tuple[str, float]]:
        """(language, probability) pairs, most likely first."""
        if self._native is None:
            assert self._model is not None
            return self._model.rank(text)
        return self._native(text)

    def detect(self, text: str, top: int | None = None) -> list[Detection]:
        """The languages, most likely first, with confidences 0-100 that add up to about 100
        (one served language: it, at 100). A text without letters gives every language an
        equal share."""
        if not any(ch.isalpha() for ch in text):
            share = round(100 / len(self.languages), 1)
            ranked = [Detection(code, share) for code in self.languages]
        else:
            ranked = [Detection(code, round(float(p) * 100, 1)) for code, p in self.rank(text)]
        return ranked[:top] if top else ranked

    def best(self, text: str) -> str:
        return self.detect(text, top=1)[0].language


def _check_known(languages: list[str], classes: list[str]) -> None:
    unknown = [code for code in languages if code not in classes]
    if unknown:
        raise ValueError(f"language identification does not know {', '.join(unknown)}")


@dataclass(frozen=True)
class NativeTables:
    """py3langid's model, all its languages, as the native library reads it."""

    classes: list[str]
    ptc: np.ndarray  # (features, classes) float16: log P(feature | language)
    pc: np.ndarray  # (classes,) float32: log P(language)
    next_state: np.ndarray  # (rows * 256,) uint32: the automaton's transitions, rows shared
    row_base: np.ndarray  # (states,) uint32: each state's row * 256
    feature: np.ndarray  # (states,) int32: the n-gram feature a state completes, -1 for none


@functools.cache
def native_tables(languages: tuple[str, ...] | None = None) -> NativeTables:
    """The model's tables, read once per process (about a second); with languages (sorted), only
    the weights of those the model knows are kept (the automaton is the same for all)."""
    ptc, pc, classes, next_state, row, feature = load_model(Path(MODEL_DIR) / MODEL_FILE)
    classes = list(classes)
    columns = [i for i, code in enumerate(classes) if languages is None or code in languages]
    return NativeTables(
        classes=[classes[i] for i in columns],
        ptc=np.ascontiguousarray(ptc[:, columns], dtype=np.float16),
        pc=np.asarray(pc, dtype=np.float32)[columns],
        next_state=np.frombuffer(next_state, dtype=np.uint32),
        row_base=np.asarray(row, dtype=np.uint32) << 8,
        feature=np.asarray(feature, dtype=np.int32))


class _NativeScores:
    """py3langid's model, restricted to some languages, scored by the native library: the text
    prepared as py3langid prepares it (all-capital text lowered, NFC, UTF-8), then one call."""

    def __init__(self, tables: NativeTables, languages: list[str],
                 library: ctypes.PyDLL) -> None:
        _check_known(languages, tables.classes)
        # the model's order, as py3langid restricts it (a language listed twice would be an
        # alias pair, which py3langid merges: not this scorer's business)
        columns = [i for i, code in enumerate(tables.classes) if code in set(languages)]
        self.classes = [tables.classes[i] for i in columns]
        if len(set(self.classes)) != len(self.classes):
            raise ValueError("the model lists a language twice")
        weight = np.ascontiguousarray(tables.ptc[:, columns], dtype=np.float32)
        rows = len(weight)
        # kept here: the library reads them through the pointers below
        self._arrays = [
            tables.next_state,
            tables.row_base,
            tables.feature,
            weight,
            np.ascontiguousarray(tables.pc[columns], dtype=np.float32),
            np.full(rows, -1, dtype=np.int32),  # seen
            np.empty(rows, dtype=np.int32),  # rows visited
            np.empty(rows, dtype=np.float32),  # their visits
        ]
        next_state, row_base, feature = self._arrays[:3]
        if not (len(feature) and feature.max() < rows and feature.min() >= -1
                and next_state.max() < len(feature) and len(row_base) == len(feature)
                and row_base.max() + 256 <= len(next_state)):
            raise ValueError("the model's tables are not the shape the library reads")
        self._scores = (ctypes.c_float * len(self.classes))()
        self._call = library.nmt_langid_scores
        pointers = [a.ctypes.data for a in self._arrays]
        self._head = (*pointers[:5], len(self.classes))
        self._tail = (*pointers[5:], ctypes.addressof(self._scores))

    def __call__(self, text: str) -> list[tuple[str, float]]:
        if text.isupper():
            text = text.lower()
        data = unicodedata.normalize("NFC", text).encode("utf8", errors="surrogatepass")
        self._call(*self._head, data, len(data), *self._tail)
        return sorted(zip(self.classes, self._scores, strict=True), key=itemgetter(1),
                      reverse=True)


def _native_scores(languages: list[str]) -> _NativeScores | None:
    """The native scores for these languages, or None (py3langid scores) when the library is
    not built or this py3langid's model is not laid out as the library expects. ValueError
    for a language the model does not know."""
    from app.engine.kernels.runtime import langid_library

    path = langid_library()
    if path is None:
        return None
    try:
        tables = native_tables(tuple(sorted(languages)))
    except (OSError, KeyError, ValueError) as exc:
        log.warning("language identification scores in Python: %s", exc)
        return None
    _check_known(languages, tables.classes)
    try:
        library = ctypes.PyDLL(str(path))  # the GIL stays held: the scratch arrays are shared
        call = library.nmt_langid_scores
        call.restype = ctypes.c_int
        call.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_char_p,
                                                 ctypes.c_size_t] + [ctypes.c_void_p] * 4
        return _NativeScores(tables, languages, library)
    except (OSError, AttributeError, TypeError, ValueError) as exc:
        log.warning("language identification scores in Python: %s", exc)
        return None


def libretranslate_detections(detections: list[Detection]) -> list[dict[str, Any]]:
    """LibreTranslate's /detect answer for one text: [{"language": "de", "confidence": 97.5}]."""
    return [d.libretranslate() for d in detections]
