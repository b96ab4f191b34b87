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
    model = types.SimpleNamespace(translator=engine, source="en", target="de")
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


def test_a_long_text_is_read_and_written_off_the_event_loop(monkeypatch):
    """Reading a text (masks, sentences, tags) and writing its translation back is pure
    Python: done on the event loop, a long text held every other client of the process for
    as long as it took (an HTML text of short lines joined over <br>, lines of a URL each,
    still costs the square of its lines there). Past OFF_LOOP_CHARS it is done in a thread;
    a short text, not worth the hop, stays on the loop."""
    import threading

    from app.translation import service

    where = []
    layout, assemble = service._layout, service._assemble
    monkeypatch.setattr(service, "_layout",
                        lambda *a: where.append(threading.get_ident()) or layout(*a))
    monkeypatch.setattr(service, "_assemble",
                        lambda *a: where.append(threading.get_ident()) or assemble(*a))
    loop_thread = []

    async def run(text):
        loop_thread.append(threading.get_ident())
        svc = TranslationService(None, _Batcher(), Settings())
        model = types.SimpleNamespace(
            translator=types.SimpleNamespace(max_source_tokens=None), source="en",
            target="de")
        results, _ = await svc._run([text], "html", model, TranslationOptions(), 60.0)
        return results[0].text

    short = "Open the <b>file</b>."
    assert asyncio.run(run(short)) == short
    assert where == [loop_thread[-1]] * 2
    where.clear()
    long = "<br>".join(["1 " * 210 + "w"] + ["a www.b"] * 300)
    assert len(long) > service.OFF_LOOP_CHARS
    assert asyncio.run(run(long)).count("www.b") == 300
    assert len(where) == 2 and loop_thread[-1] not in where
