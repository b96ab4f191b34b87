"""The translation use case (app.translation.service) without a server: its own layout of a
text (masks, sentences, inline tags) and assembly, with a batcher that returns each text as
it came."""

from __future__ import annotations

import asyncio
import types

import pytest

from app.config import Settings
from app.engine.types import Result, TranslationOptions
from app.text import tags
from app.translation.service import TranslationService


class _Batcher:
    async def translate(self, engine, texts, options, timeout, priority=None):
        return [Result(text) for text in texts]


def _run(text: str, fmt: str) -> str:
    service = TranslationService(None, _Batcher(), Settings())
    engine = types.SimpleNamespace(max_source_tokens=None)
    model = types.SimpleNamespace(translator=engine, source="en")
    results, _ = asyncio.run(service._run([text], fmt, model, TranslationOptions(), 60.0))
    return results[0].text


@pytest.mark.parametrize("fmt", ["text", "html"])
def test_each_sentence_is_planned_with_its_own_tags_only(monkeypatch, fmt):
    """A text's tags were found again for each of its sentences, and each sentence's plan
    looked through all of them: a text of many sentences, a tag pair or a URL in each, cost
    the square of its masks. Its tags are found once, and each sentence looks at its own."""
    read, looked = [], []
    tag_marks, of = tags.tag_marks, tags.TagPlan.of.__func__

    def counted_marks(masked):
        read.append(masked.count)
        return tag_marks(masked)

    def counted_plan(cls, sentence, pairs, atoms=()):
        pairs, atoms = tuple(pairs), tuple(atoms)
        looked.append(len(pairs) + len(atoms))
        return of(cls, sentence, pairs, atoms)

    monkeypatch.setattr(tags, "tag_marks", counted_marks)
    monkeypatch.setattr(tags.TagPlan, "of", classmethod(counted_plan))
    n = 300
    text = " ".join(f"Sentence {k} has a <b>bold</b> word, see https://example.org/{k} now."
                    for k in range(n))
    assert _run(text, fmt) == text
    assert sum(read) <= 2 * 3 * n, sum(read)  # each mask (two tags, a URL) read once
    assert sum(looked) <= 2 * n, sum(looked)  # each sentence: its own pair
