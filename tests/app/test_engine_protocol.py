"""The ONNX Runtime Translator and the test doubles are held to one interface: app.engine.Engine,
and the running batches they start to app.engine.types.DecodingBatch."""

from __future__ import annotations

import inspect

from app.engine import Translator
from app.engine.types import DecodingBatch, Engine, TranslationOptions
from tests.app.fakes import FakeTranslator
from tests.reliability.conftest import EngineDouble

MEMBERS = sorted({*Engine.__annotations__, *(n for n in vars(Engine) if not n.startswith("_"))})


def _check(engine: object) -> None:
    assert isinstance(engine, Engine)
    missing = [name for name in MEMBERS if not hasattr(engine, name)]
    assert not missing, missing
    params = list(inspect.signature(engine.translate_batch).parameters)
    assert params[:2] == ["texts", "options"], params
    batch = engine.start_batch(TranslationOptions())
    assert isinstance(batch, DecodingBatch)
    batch.admit(["k"], ["A small test."])
    done = []
    while batch.running:
        done += batch.step()
    batch.close()
    assert [key for key, _ in done] == ["k"] and done[0][1].text  # the seam decodes, step-wise


def test_translator_and_fakes_implement_the_engine_protocol(tiny_bundle) -> None:
    assert {"default_options", "max_source_tokens", "translate_batch", "count_tokens",
            "start_batch", "workers", "worker_process_counts", "close"} <= set(MEMBERS)
    real = Translator.from_dir(tiny_bundle, intra_threads=1)
    for engine in (real, FakeTranslator(), EngineDouble(real)):
        _check(engine)
    assert real.default_options.beam_size == real.manifest["decoding"]["beam_size"]


def test_an_object_without_the_interface_is_not_an_engine() -> None:
    class Partial:
        name = "x"

        def translate_batch(self, texts, options=None):
            return []

    assert not isinstance(Partial(), Engine)
