"""The translation cache (app.translation.cache): repeats answered without decoding, per model
and options, bounded, counted in /metrics; off with NMT_CACHE_SIZE=0."""

from __future__ import annotations

import asyncio
import gc

import httpx

from app.config import Settings
from app.engine.types import TranslationOptions
from app.translation.batcher import Batcher, BatcherConfig
from app.translation.cache import ResultCache
from tests.app.fakes import FakeTranslator
from tests.app.test_api import serve

GREEDY = TranslationOptions()
BEAM = TranslationOptions(beam_size=2)


def decoded(engine: FakeTranslator) -> list[str]:
    """Every sentence the engine was given, in order."""
    return [text for batch, _ in engine.batches for text in batch]


def translate_all(cache_size: int, requests: list[tuple[list[str], TranslationOptions]],
                  engine: FakeTranslator) -> tuple[list[list[str]], list[tuple[int, int]]]:
    counted: list[tuple[int, int]] = []
    batcher = Batcher(BatcherConfig.from_settings(Settings(cache_size=cache_size)),
                      on_cache=lambda hits, misses: counted.append((hits, misses)))
    batcher.start()

    async def main():
        return [[r.text for r in await batcher.translate(engine, texts, options)]
                for texts, options in requests]

    try:
        return asyncio.run(main()), counted
    finally:
        batcher.close()


def test_repeats_are_answered_from_the_cache_and_a_request_s_duplicates_decoded_once():
    engine = FakeTranslator()
    requests = [(["open the file", "save it", "open the file"], GREEDY),
                (["save it", "close the window"], GREEDY),
                (["save it"], BEAM)]  # other options: another translation, decoded
    outputs, counted = translate_all(100, requests, engine)
    assert outputs == [["file the open", "it save", "file the open"],
                       ["it save", "window the close"], ["it save"]]
    assert decoded(engine) == ["open the file", "save it", "close the window", "save it"]
    assert counted == [(1, 2), (1, 1), (0, 1)]


def test_without_the_cache_every_sentence_is_decoded_as_sent():
    engine = FakeTranslator()
    requests = [(["open the file", "open the file"], GREEDY), (["open the file"], GREEDY)]
    outputs, counted = translate_all(0, requests, engine)
    assert outputs == [["file the open"] * 2, ["file the open"]]
    assert decoded(engine) == ["open the file"] * 3 and counted == []


def test_the_cache_keeps_the_most_recently_used_sentences_of_each_engine():
    cache, first, second = ResultCache(2), FakeTranslator(), FakeTranslator()
    results = {t: r for t, r in zip("abc", first.translate_batch(list("abc"), GREEDY),
                                    strict=True)}
    cache.put(first, GREEDY, "a", results["a"])
    cache.put(first, GREEDY, "b", results["b"])
    assert cache.get(first, GREEDY, "a") is results["a"]  # used: "b" is now the oldest
    cache.put(first, GREEDY, "c", results["c"])
    assert cache.get(first, GREEDY, "b") is None
    assert cache.get(first, GREEDY, "c") is results["c"] and len(cache) == 2
    assert cache.get(second, GREEDY, "a") is None  # another model's cache is its own
    assert cache.get(first, BEAM, "a") is None
    del first, results
    gc.collect()
    assert len(cache) == 0  # an unloaded model takes its cache with it


def test_the_service_answers_a_repeated_request_from_the_cache_and_counts_it():
    engine = FakeTranslator()
    with serve(engine, cache_size=1000) as srv, httpx.Client(base_url=srv.url) as client:
        body = {"text": ["Open the file.", "Open the file."], "source": "en", "target": "de"}
        first = client.post("/v1/translate", json=body).json()["translations"]
        again = client.post("/v1/translate", json=body).json()["translations"]
        lt = client.post("/translate", json={"q": "Open the file.", "source": "en",
                                             "target": "de"}).json()["translatedText"]
        metrics = client.get("/metrics").text
    assert first == again and lt == first[0]["text"]
    assert decoded(engine) == ["Open the file."]
    assert 'nmt_cache_sentences_total{outcome="hit"} 4.0' in metrics
    assert 'nmt_cache_sentences_total{outcome="miss"} 1.0' in metrics
