"""Language identification for `source: "auto"` and LibreTranslate's /detect.

py3langid (BSD-3-Clause; langid.py's naive Bayes model over byte n-grams, 97 languages, its
model inside the package: nothing is downloaded at run time), restricted to the languages the
service serves. Chosen by measurement against lingua-language-detector (bench/langid.py; the
accuracy and timings are in BENCHMARKS.md): as accurate on whole segments, a little less on
strings of a few words (many such strings, "Status", "Name", "OK", are the same in both
languages), quicker, and from a much smaller package.

Load a LanguageDetector once (it reads the model: about a second) in the service's lifespan and
share it: `detect` only reads it (the native scores' scratch arrays are used with the GIL held).

The scores come from `app/text/langid_score.cc` (the same model's tables, one call a
text) where that library is built, else from py3langid's own walk and NumPy scoring: the same
probabilities within float rounding (a test compares them), and less of the server's CPU a
request beside the decode workers, where py3langid's many small NumPy calls and its walk over a
large table run cold (BENCHMARKS.md).
"""

from __future__ import annotations

import ctypes
import logging
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
from py3langid.langid import MODEL_FILE, LanguageIdentifier

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
        self._model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        known = set(self._model.nb_classes)
        unknown = [code for code in self.languages if code not in known]
        if unknown:
            raise ValueError(f"language identification does not know {', '.join(unknown)}")
        self._model.set_languages(self.languages)
        self._native = _native_scores(self._model)

    @property
    def native(self) -> bool:
        """Whether the scores come from the native library."""
        return self._native is not None

    def rank(self, text: str) -> list[tuple[str, float]]:
        """(language, probability) pairs, most likely first."""
        if self._native is None:
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


class _NativeScores:
    """A py3langid model (restricted to its languages) scored by the native library: the text
    prepared as py3langid prepares it (all-capital text lowered, NFC, UTF-8), then one call."""

    def __init__(self, model: LanguageIdentifier, library: ctypes.PyDLL) -> None:
        self.classes = list(model.nb_classes)
        weight = np.ascontiguousarray(model.nb_ptc, dtype=np.float32)
        rows = len(weight)
        # kept here: the library reads them through the pointers below
        self._arrays = [
            np.frombuffer(model.tk_nextmove, dtype=np.uint32),
            np.asarray(model.tk_row, dtype=np.uint32) << 8,
            np.asarray(model.tk_output, dtype=np.int32),
            weight,
            np.ascontiguousarray(model.nb_pc, dtype=np.float32),
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


def _native_scores(model: LanguageIdentifier) -> _NativeScores | None:
    """The native scores for this model, or None (py3langid scores) when the library is not
    built, or this py3langid's model is not laid out as the library expects."""
    from app.engine.kernels.runtime import langid_library

    path = langid_library()
    if path is None or getattr(model, "_alias_pairs", None) or not getattr(model, "_norm_probs",
                                                                          False):
        return None
    try:
        library = ctypes.PyDLL(str(path))  # the GIL stays held: the scratch arrays are shared
        call = library.nmt_langid_scores
        call.restype = ctypes.c_int
        call.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_char_p,
                                                 ctypes.c_size_t] + [ctypes.c_void_p] * 4
        return _NativeScores(model, library)
    except (OSError, AttributeError, TypeError, ValueError) as exc:
        log.warning("language identification scores in Python: %s", exc)
        return None


def libretranslate_detections(detections: list[Detection]) -> list[dict[str, Any]]:
    """LibreTranslate's /detect answer for one text: [{"language": "de", "confidence": 97.5}]."""
    return [d.libretranslate() for d in detections]
