"""app.langid on sentences written for the test (the dev sets are not in the repository; their
numbers come from bench/langid.py)."""

import pytest

from app.langid import LanguageDetector, libretranslate_detections

ENGLISH = ["The file could not be saved.", "Open the settings", "Print", "Where is the station?"]
GERMAN = ["Die Datei konnte nicht gespeichert werden.", "Einstellungen öffnen", "Drucken",
          "Wo ist der Bahnhof?"]


@pytest.fixture(scope="module")
def detector():
    return LanguageDetector(["en", "de"])


def test_labels_served_languages_with_confidences(detector):
    assert [detector.best(t) for t in ENGLISH] == ["en"] * len(ENGLISH)
    assert [detector.best(t) for t in GERMAN] == ["de"] * len(GERMAN)
    ranked = detector.detect("Die Datei konnte nicht gespeichert werden.")
    assert [d.language for d in ranked] == ["de", "en"]
    assert ranked[0].confidence > 90 and abs(sum(d.confidence for d in ranked) - 100) < 0.5


def test_libretranslate_shape_and_edge_cases(detector):
    answer = libretranslate_detections(detector.detect("Hello world, how are you?", top=1))
    assert answer == [{"language": "en", "confidence": answer[0]["confidence"]}]
    assert 50 < answer[0]["confidence"] <= 100
    assert [d.confidence for d in detector.detect("1234 !!")] == [50.0, 50.0]
    only = LanguageDetector(["de"])
    assert only.detect("anything at all") == only.detect("Hallo")
    assert only.detect("Hallo")[0].confidence == 100.0
    with pytest.raises(ValueError, match="xx"):
        LanguageDetector(["en", "xx"])
