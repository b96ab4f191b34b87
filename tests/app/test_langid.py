"""app.text.langid on sentences written for the test (the dev sets are not in the repository; their
numbers come from bench/langid.py)."""

import pytest
from py3langid.langid import MODEL_FILE, LanguageIdentifier

from app.text.langid import LanguageDetector, libretranslate_detections

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


def _texts() -> list[str]:
    """Sentences of both languages, all-capital and mixed-script ones, and random strings of
    letters, digits, punctuation, combining marks and other scripts."""
    import random

    rng = random.Random(7)
    alphabet = "aeinrstdhulcgmobwfkzpvjyxqäöüß AEINRST.,;:!?'\"-0123456789\u0301日本語Жж😀\t\n"
    texts = ENGLISH + GERMAN + [t.upper() for t in ENGLISH + GERMAN]
    texts += [" ".join(rng.sample(ENGLISH + GERMAN, 3)) for _ in range(50)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
              for _ in range(2000)]
    return texts


def test_native_scores_are_py3langids(detector):
    """The native library (app/text/langid_score.cc) scores py3langid's model as
    py3langid does: the same probabilities within float rounding, the same ranking."""
    if not detector.native:
        pytest.skip("the language identification library is not built "
                    "(python -m app.engine.kernels build)")
    model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    model.set_languages(detector.languages)
    assert detector._model is None  # py3langid's own model is made only without the library
    for text in _texts():
        theirs, ours = model.rank(text), detector.rank(text)
        assert [code for code, _ in ours] == [code for code, _ in theirs] or \
            abs(theirs[0][1] - theirs[1][1]) < 1e-5, text
        assert max(abs(dict(ours)[c] - p) for c, p in theirs) < 1e-5, text


def test_kernels_off_scores_in_python(monkeypatch):
    from app.engine import kernels

    monkeypatch.setenv("NMT_KERNELS", "off")
    assert kernels.langid_library() is None
    python = LanguageDetector(["en", "de"])
    assert not python.native
    assert python.best(ENGLISH[0]) == "en" and python.best(GERMAN[0]) == "de"
