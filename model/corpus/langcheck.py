"""Language identification of both sides of a pair: drop German that is English, and back.

Translators leave messages untranslated (the German side is the English text, or
English with a German word or two), and a few catalogs have the sides the wrong
way round.  py3langid (langid.py's byte n-gram model, in the package: nothing is
downloaded) restricted to English and German ranks each side.

Short strings are the risk: names ("Berlin"), one-word labels ("Status",
"Name") and loan words read as either language, so a side is only judged when
it has at least ``min_words`` words and ``min_chars`` characters, and a pair is
only dropped when the wrong language wins with at least the side's confidence.
The English side needs more: English terms named after German places and people
("Schengen border zone", "Van der Waals linkage") read as German with 0.95-0.99,
while a German sentence left on the English side scores above 0.99.
"""

from __future__ import annotations

from dataclasses import dataclass

from py3langid.langid import MODEL_FILE, LanguageIdentifier

DE_IS_ENGLISH = "langid_de_side_english"
EN_IS_GERMAN = "langid_en_side_german"


@dataclass(frozen=True)
class LangCheckConfig:
    """When a side is judged, and how sure the model must be to drop the pair."""

    min_words: int = 4
    min_chars: int = 20
    # of the wrong language, normalised over en and de
    de_side_confidence: float = 0.95
    en_side_confidence: float = 0.99


class LanguageCheck:
    """Ranks English against German on each side of a pair (loads the model once)."""

    def __init__(self, config: LangCheckConfig = LangCheckConfig()) -> None:
        self.config = config
        self._model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self._model.set_languages(["de", "en"])

    def judged(self, text: str) -> bool:
        """Whether a side is long enough to be judged at all."""
        return len(text) >= self.config.min_chars and len(text.split()) >= self.config.min_words

    def is_language(self, text: str, language: str, min_confidence: float) -> bool:
        """True when ``text`` is long enough and ``language`` wins with ``min_confidence``."""
        if not self.judged(text):
            return False
        found, confidence = self._model.classify(text)
        return found == language and confidence >= min_confidence

    def reject_reason(self, src: str, tgt: str) -> str | None:
        """Why an (English, German) pair has a side in the wrong language, or None."""
        if self.is_language(tgt, "en", self.config.de_side_confidence):
            return DE_IS_ENGLISH
        if self.is_language(src, "de", self.config.en_side_confidence):
            return EN_IS_GERMAN
        return None
