"""The ONNX engine decodes exactly like the PyTorch reference decoders (model/search.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

import app.engine.translator as translator_module
from app.engine import BundleError, Result, TranslationOptions, Translator
from app.engine.tokenizer import (
    as_written,
    capitalize_lowercase,
    final_marks,
    marks_as_source,
    one_final_period,
)
from model.search import beam_search, greedy_search


@pytest.fixture(scope="module", params=[1, 2], ids=["one-worker", "two-workers"])
def translator(tiny_bundle, request):
    """One running batch, or two decode workers side by side (each on its own thread)."""
    t = Translator.from_dir(tiny_bundle, intra_threads=1, workers=request.param)
    assert t.workers == request.param
    return t


def test_greedy_equals_pytorch(translator, reference, sources):
    model, _ = reference
    got = translator.translate_ids(sources, TranslationOptions(beam_size=1))
    assert [h[0].tokens for h in got] == greedy_search(model, sources)


@pytest.mark.parametrize("walk", ["vectorized", "sentence by sentence"])
@pytest.mark.parametrize(("beam_size", "length_penalty"), [(2, 1.0), (4, 0.6), (5, 1.0)])
def test_beam_equals_pytorch_with_n_best(translator, reference, sources, beam_size, length_penalty,
                                         walk, monkeypatch):
    """Both beam walks (numpy over all sentences; Python lists for a few) give PyTorch's
    n-best lists."""
    import app.engine.search as search_module

    monkeypatch.setattr(search_module, "FEW_SENTENCES", 0 if walk == "vectorized" else 10**6)
    model, _ = reference
    options = TranslationOptions(
        beam_size=beam_size, length_penalty=length_penalty, num_alternatives=beam_size - 1
    )
    got = translator.translate_ids(sources, options)
    for source, hyps in zip(sources, got, strict=True):
        ref = beam_search(
            model, source, beam_size=beam_size, length_penalty=length_penalty, n_best=beam_size
        )
        assert [h.tokens for h in hyps] == [h.tokens for h in ref]
        assert [h.normalized for h in hyps] == pytest.approx([h.normalized for h in ref], abs=1e-4)


def test_batch_equals_single(translator, tiny_sentences):
    for options in (
        TranslationOptions(beam_size=1, return_scores=True),
        TranslationOptions(beam_size=4, num_alternatives=2, return_scores=True),
    ):
        batched = translator.translate_batch(tiny_sentences, options)
        for text, together in zip(tiny_sentences, batched, strict=True):
            alone = translator.translate_batch([text], options)[0]
            assert (alone.text, alone.tokens, alone.alternatives) == (
                together.text,
                together.tokens,
                together.alternatives,
            )
            assert alone.score == pytest.approx(together.score, abs=1e-5)


def test_small_batches_and_input_order(tiny_bundle, translator, tiny_sentences):
    small = Translator.from_dir(tiny_bundle, intra_threads=1, max_batch_size=3)
    texts = list(reversed(tiny_sentences))
    options = TranslationOptions(beam_size=3)
    assert [r.text for r in small.translate_batch(texts, options)] == [
        r.text for r in translator.translate_batch(texts, options)
    ]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_max_length(translator, reference, sources, beam_size):
    """max_len_offset + max_len_ratio * len(src) tokens at most, EOS included; capped by the
    positions."""
    model, _ = reference
    short = TranslationOptions(beam_size=beam_size, max_len_offset=2, max_len_ratio=0.0)
    for hyps in translator.translate_ids(sources, short):
        assert len(hyps[0].tokens) <= 2
    assert any(len(h[0].tokens) == 2 for h in translator.translate_ids(sources, short))
    if beam_size == 1:
        assert [h[0].tokens for h in translator.translate_ids(sources, short)] == greedy_search(
            model, sources, max_len_offset=2, max_len_ratio=0.0
        )
    long = TranslationOptions(beam_size=beam_size, max_len_offset=1000, max_len_ratio=0.0)
    cap = model.config.max_positions - 1
    gibberish = [[5] * 5]
    assert len(translator.translate_ids(gibberish, long)[0][0].tokens) <= cap


def test_alternatives_and_scores(translator, tiny_sentences):
    results = translator.translate_batch(
        tiny_sentences, TranslationOptions(beam_size=4, num_alternatives=3, return_scores=True)
    )
    for r in results:
        assert len(r.alternatives) == 3 == len(r.alternative_scores)
        assert len({r.text, *r.alternatives}) == 4  # distinct hypotheses
        assert r.score >= r.alternative_scores[0] >= r.alternative_scores[1]
        assert r.score < 0
    plain = translator.translate_batch(tiny_sentences[:2], TranslationOptions(beam_size=4))
    assert all(r.score is None and r.alternatives == [] for r in plain)


def test_blank_text_skips_the_model(translator, monkeypatch):
    def boom(*args):
        raise AssertionError("the model ran")

    monkeypatch.setattr(translator.sessions, "encode", boom)
    results = translator.translate_batch(["", "   ", "\n"], TranslationOptions(beam_size=4))
    assert [r.text for r in results] == ["", "", ""]
    assert translator.count_tokens("   ") == 0


def test_mixed_blank_and_text(translator, tiny_sentences):
    results = translator.translate_batch(["", tiny_sentences[0], " "], TranslationOptions())
    assert results[0].text == "" == results[2].text
    assert results[1].text == translator.translate_batch([tiny_sentences[0]])[0].text


def test_metadata_and_count_tokens(translator, reference):
    _, tokenizer = reference
    assert (translator.name, translator.source_lang, translator.target_lang) == (
        "en-de",
        "en",
        "de",
    )
    assert translator.variant == "fp32"
    assert translator.count_tokens("open the file") == len(tokenizer.encode("open the file")) + 1
    assert translator.default_options.beam_size == 4


def test_a_text_is_tokenized_once_for_its_count_and_its_translation(tiny_bundle, monkeypatch):
    """The service counts a text's tokens (length check, batcher) before the engine encodes it:
    the tokenizer runs once, and callers get lists of their own."""
    t = Translator.from_dir(tiny_bundle, intra_threads=1)
    calls = []
    encode = t.tokenizer.encode
    monkeypatch.setattr(t.tokenizer, "encode", lambda texts: calls.append(texts) or encode(texts))
    first = t.count_tokens("open the file")
    ids = t.encode(["open the file"])[0]
    ids.append(-1)  # the caller's own list
    assert t.encode(["open the file"])[0] == ids[:-1] and len(ids) == first
    assert t.translate_batch(["open the file"])[0].text
    assert calls == [["open the file"]]
    t.encode(["the car"])
    assert len(calls) == 2


@pytest.mark.parametrize(("typed", "encoded"), [
    ("where is the station", "Where is the station"),
    ("  i don't know, sorry.", "  I don't know, sorry."),
    ("grüße aus der well-known stadt", "Grüße aus der well-known stadt"),
    ("open file", "open file"),                  # a label or a term: too few words
    ("to take legal measures", "to take legal measures"),  # an infinitive: a term
    ("today is fine", "Today is fine"),
    ("can i come in? i'm late", "Can I come in? I'm late"),  # the pronoun, as English writes it
    ("is it his or is it mine", "Is it his or is it mine"),  # an "i" inside a word stays
    ("where is Berlin, i asked", "where is Berlin, i asked"),  # written as meant: untouched
    ("Where is the station", "Where is the station"),
    ("where is Berlin", "where is Berlin"),      # a capital letter: written as meant
    ("ls -l /tmp", "ls -l /tmp"),                # code
    ("copy file_name to dir", "copy file_name to dir"),
    ("wait 5 minutes please", "wait 5 minutes please"),
    ("", ""),
])
def test_lowercase_sentences_are_capitalised_and_nothing_else(typed, encoded):
    assert capitalize_lowercase(typed) == encoded


def as_typed_and_capitalising(tiny_bundle, tmp_path) -> tuple[Translator, Translator]:
    """The tiny bundle's translator, and one of a copy whose manifest sets capitalize_lowercase."""
    written = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, written)
    manifest = json.loads((written / "manifest.json").read_text())
    (written / "manifest.json").write_text(json.dumps({**manifest, "capitalize_lowercase": True}))
    return (Translator.from_dir(tiny_bundle, intra_threads=1),
            Translator.from_dir(written, intra_threads=1))


def test_a_bundle_that_says_so_capitalises_lowercase_sentences(tiny_bundle, tmp_path):
    as_typed, capitalising = as_typed_and_capitalising(tiny_bundle, tmp_path)
    typed, capital = "the red house is old", "The red house is old"
    assert as_typed.encode([typed]) != as_typed.encode([capital])
    assert capitalising.encode([typed]) == as_typed.encode([capital])
    assert capitalising.count_tokens(typed) == as_typed.count_tokens(capital)
    assert capitalising.translate_batch([typed])[0].text == \
        as_typed.translate_batch([capital])[0].text
    assert capitalising.encode(["the house"]) == as_typed.encode(["the house"])


@pytest.mark.parametrize("typed, read, capitals", [
    ("PLEASE CLOSE THE DOOR.", "Please close the door.", True),
    ("  CAN I COME IN? I'M LATE", "  Can I come in? I'm late", True),
    ("THE 2 FILES ARE GONE - SORRY", "The 2 files are gone - sorry", True),
    ('CLICK "NEXT", THEN (SEE BELOW) WAIT...', 'Click "next", then (see below) wait...', True),
    ("THE FILE %S COULD NOT BE OPENED", "THE FILE %S COULD NOT BE OPENED", False),  # code
    ("NAME|#N VOLUME [VOLUME ...]", "NAME|#N VOLUME [VOLUME ...]", False),  # usage text
    ("THE {1} IS GONE", "The {1} is gone", True),  # a masked span has no letters
    ("SAVE AS", "SAVE AS", False),               # a label: too few words
    ("USB", "USB", False),                       # an acronym
    ("Please CLOSE the door", "Please CLOSE the door", False),  # written as meant
    ("東京 東京 東京", "東京 東京 東京", False),  # a script without case
    ("where is the station", "Where is the station", False),   # lower case: capitalised
])
def test_texts_in_capitals_are_read_in_sentence_case(typed, read, capitals):
    assert as_written(typed) == (read, capitals)


def test_a_bundle_that_says_so_gives_back_a_text_in_capitals_in_capitals(tiny_bundle, tmp_path):
    """Read in sentence case, translated, and given back in capitals, alternatives too, on the
    offline path and the service's running batches."""
    as_typed, capitalising = as_typed_and_capitalising(tiny_bundle, tmp_path)
    options = TranslationOptions(beam_size=3, num_alternatives=2)
    shouted, written_text = "THE RED HOUSE IS OLD", "The red house is old"
    assert capitalising.encode([shouted]) == as_typed.encode([written_text])
    want = as_typed.translate_batch([written_text], options)[0]
    got = capitalising.translate_batch([shouted, written_text], options)
    assert got[0].text == want.text.upper() and got[0].text.isupper()
    assert got[0].alternatives == [a.upper() for a in want.alternatives]
    assert got[1].text == want.text  # its neighbour, written, as it is
    batch, done = capitalising.start_batch(options), {}
    batch.admit(["shouted", "written"], [shouted, written_text])
    while batch.running:
        done.update(batch.step())
    assert done["shouted"].text == got[0].text and done["written"].text == want.text
    assert as_typed.encode([shouted]) != as_typed.encode([written_text])  # without: as typed


@pytest.mark.parametrize("written, tidied", [
    ("Verschoben auf Freitag, den 5..", "Verschoben auf Freitag, den 5."),  # an ordinal's period
    ("Äpfel, Birnen usw..", "Äpfel, Birnen usw."),  # an abbreviation's
    ("Warte.. ", "Warte. "),
    ("Bitte warten...", "Bitte warten..."),  # an ellipsis
    ("Bitte warten….", "Bitte warten…."),
    ("Am 5. Mai.", "Am 5. Mai."),
    ("..", ".."),  # nothing but the marks: as it is
    ("Version 1..2", "Version 1..2"),  # a range
    ("", ""),
])
def test_a_sentence_ends_in_one_period_not_two(written, tidied):
    assert one_final_period(written) == tidied


def test_translations_end_in_one_period(translator, monkeypatch):
    """The model writes a sentence-final ordinal or abbreviation with the sentence's own period
    after it ("am 5.."); no orthography writes that, alternatives included."""
    monkeypatch.setattr(translator, "decode", lambda ids, unknown=None: "Am Freitag, den 5..")
    options = TranslationOptions(beam_size=3, num_alternatives=2)
    got = translator.translate_batch(["the red house"], options)[0]
    assert got.text == "Am Freitag, den 5." and got.alternatives == [got.text] * 2


@pytest.mark.parametrize("source, written, tidied", [
    ("Thank you!!!", "Danke!", "Danke!!!"),  # the model wrote one mark for three
    ("Are you sure??", "Bist du sicher?", "Bist du sicher??"),
    ("I HAVE FAILED!!!", "ICH HABE VERSAGT!!!!!!!!!", "ICH HABE VERSAGT!!!"),  # and doubled
    ("Really?!", "Wirklich?", "Wirklich?!"),
    ("Hello!", "Hallo!", "Hallo!"),
    ("Hello!", "Hallo!!", "Hallo!"),
    ("Hello.", "Hallo!!", "Hallo!!"),  # the source ends in none: as the model wrote it
    ("Stop!!", "Halt.", "Halt."),  # the translation ends in none
    ("Why?!", "Warum?! ", "Warum?! "),
])
def test_a_translation_ends_in_the_sources_run_of_marks(source, written, tidied):
    assert marks_as_source(written, final_marks(source)) == tidied


def test_translations_end_in_the_sources_marks(translator, monkeypatch):
    monkeypatch.setattr(translator, "decode", lambda ids, unknown=None: "das rote Haus!")
    got = translator.translate_batch(["the red house!!!", "the red house!"])
    assert [r.text for r in got] == ["das rote Haus!!!", "das rote Haus!"]


def test_long_input_is_truncated_to_the_positions(translator):
    text = " ".join(["the red house"] * 100)
    assert translator.count_tokens(text) == translator.max_source_tokens + 1
    assert isinstance(translator.translate_batch([text])[0].text, str)


def test_int8_agrees_with_fp32(tiny_bundle, translator, tiny_sentences):
    int8 = Translator.from_dir(tiny_bundle, variant="int8", intra_threads=1)
    assert int8.variant == "int8"
    options = TranslationOptions(beam_size=1)
    fp32 = [r.text for r in translator.translate_batch(tiny_sentences, options)]
    got = [r.text for r in int8.translate_batch(tiny_sentences, options)]
    agreement = sum(a == b for a, b in zip(fp32, got, strict=True)) / len(got)
    assert agreement >= 0.75, agreement


def test_cuda_request_falls_back_to_cpu(tiny_bundle, caplog):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA is available here")
    with caplog.at_level("WARNING"):
        t = Translator.from_dir(tiny_bundle, provider="cuda", intra_threads=1)
    assert t.sessions.providers == ["CPUExecutionProvider"]
    assert "falling back to CPU" in caplog.text


def test_engine_runs_without_torch(tiny_bundle, tiny_sentences):
    """app.engine must not import torch (the service image has none): translate in a fresh
    interpreter and check sys.modules."""
    code = textwrap.dedent(
        f"""
        import sys
        from app.engine import TranslationOptions, Translator
        t = Translator.from_dir({str(tiny_bundle)!r}, variant="int8", intra_threads=1)
        out = t.translate_batch({tiny_sentences[:3]!r}, TranslationOptions(beam_size=2))
        assert all(r.text for r in out), out
        import app.cli
        bad = sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "model")))
        assert not bad, bad
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def joiners_match_pytorch(translator, model, sources, order, beam_size):
    """Sources join one running search one at a time in `order`, one step apart; each output
    must equal PyTorch's. Returns the search (its state as the last step left it)."""
    options = TranslationOptions(beam_size=beam_size)
    search = translator.start_search(options)
    found: dict[int, list] = {}
    for i in order:  # one more sentence before every step
        translator.admit(search, [i], [sources[i]], options)
        found.update(search.step())
    found.update(search.run())
    assert_match_pytorch(model, sources, found, beam_size)
    return search


def assert_match_pytorch(model, sources, found, beam_size):
    """Each source's best hypothesis (found[i]) equals PyTorch's search of it alone."""
    for i, source in enumerate(sources):
        if beam_size == 1:
            ref = greedy_search(model, [source])[0]
        else:
            ref = beam_search(model, source, beam_size=beam_size)[0].tokens
        assert found[i][0].tokens == ref, i


def test_growing_buffers_and_late_joiners_keep_pytorch_results(translator, reference, sources,
                                                                monkeypatch):
    """The cache starting at 2 positions (so it grows several times while decoding), and
    sentences joining a running batch one at a time, longest last (so the rows, the sentences and
    the cross keys/values grow under running sentences, and joiners take finished sentences'
    slots): every output still equals PyTorch's."""
    import app.engine.search as search_module
    from app.engine.step import DecodeState

    model, _ = reference
    monkeypatch.setattr(search_module, "FIRST_POSITIONS", 2)
    put, slots_taken = DecodeState.put, []

    def counting_put(self, slots, *args):
        slots_taken.append(len(slots))
        put(self, slots, *args)

    monkeypatch.setattr(DecodeState, "put", counting_put)
    by_length = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for beam_size in (1, 3):
        search = joiners_match_pytorch(translator, model, sources, by_length, beam_size)
        assert search.state.max_len > 2 and search.state.cross_mask.shape[1] > 2
        assert slots_taken, "no sentence took a finished sentence's slot"
        slots_taken.clear()


def test_cross_buffers_narrow_after_long_sources_finish(translator, reference, sources,
                                                         monkeypatch):
    """A far longer source runs while short ones keep joining, one a step, until it has
    finished: the cross keys/values then narrow to the longest running source (so later steps
    do not attend over a finished sentence's width), and every output still equals PyTorch's.
    (When the long one stops is the tiny model's to say, and differs between processors; short
    ones are running whenever it does.)"""
    from app.engine.search import GREEDY_FIT
    from app.engine.step import DecodeState

    model, _ = reference
    fit, widths = DecodeState.fit_sources, []

    def recording_fit(self, width, share=0.75):
        before = self.cross_mask.shape[1]
        fit(self, width, share)
        if self.cross_mask.shape[1] < before:
            widths.append((before, self.cross_mask.shape[1]))

    monkeypatch.setattr(DecodeState, "fit_sources", recording_fit)
    long = sources[0] + sources[1] + sources[2]
    short = [s for s in sources if 0 < len(s) <= GREEDY_FIT * len(long)]
    assert len(short) >= 3
    for beam_size in (1, 3):
        options = TranslationOptions(beam_size=beam_size)
        search = translator.start_search(options)
        inputs = [long]
        translator.admit(search, [0], [long], options)
        found = dict(search.step())
        while 0 not in found:  # bounded: the long source's output has a length limit
            inputs.append(short[len(inputs) % len(short)])
            translator.admit(search, [len(inputs) - 1], [inputs[-1]], options)
            found.update(search.step())
        found.update(search.run())
        assert widths, "the cross buffers never narrowed"
        assert all(4 * after <= 3 * before for before, after in widths)
        widths.clear()
        assert_match_pytorch(model, inputs, found, beam_size)


def test_sentences_are_encoded_a_batch_at_a_time_and_join_a_few_at_a_time(
        tiny_bundle, reference, sources, monkeypatch):
    """Offline, the encoder runs on a running batch's worth of sentences at once, and they join
    the batch as slots free up, each group with its encoder output cut to its own longest
    source: the outputs still equal PyTorch's. (Lengths are not looked at here.)"""
    from app.engine.search import Search

    model, _ = reference
    monkeypatch.setattr(translator_module, "LIKE_LENGTHS", 0.0)
    translator = Translator.from_dir(tiny_bundle, intra_threads=1, max_batch_size=6)
    encoded, admitted = [], []
    encode, admit = translator.sessions.encode, Search.admit

    def spy_encode(src_ids, beside=False):
        encoded.append(len(src_ids))
        return encode(src_ids, beside)

    def spy_admit(self, keys, limits, cross_k, cross_v, src_mask):
        admitted.append((len(keys), src_mask.shape[1], int(src_mask.sum(axis=1).max())))
        assert cross_k.shape[1] == cross_v.shape[1] == len(keys)
        assert cross_k.shape[3] == cross_v.shape[3] == src_mask.shape[1]
        admit(self, keys, limits, cross_k, cross_v, src_mask)

    monkeypatch.setattr(translator.sessions, "encode", spy_encode)
    monkeypatch.setattr(Search, "admit", spy_admit)
    got = translator.translate_ids(sources, TranslationOptions(beam_size=1))
    assert [h[0].tokens for h in got] == greedy_search(model, sources)
    assert sum(encoded) == sum(n for n, _, _ in admitted) == len(sources)
    assert max(encoded) == 6 and len(encoded) < len(admitted)
    assert all(width == longest for _, width, longest in admitted)  # cut to the group's own


def test_the_queue_keeps_sentences_for_every_worker_near_its_end():
    queue = translator_module._Queue(list(range(10)), workers=2)
    assert queue.take_share(8, 1) == [0, 1, 2, 3, 4]  # half of the 10 left, not 8
    assert queue.take_share(8, 1) == [5, 6, 7]  # 5 left: 3 each
    assert queue.take_share(8, 1) == [8]
    assert queue.take_share(8, 4) == [9]  # at least 4 asked: what is left
    assert queue.take_share(8, 1) == []


@pytest.mark.parametrize("longest_first", [True, False])
def test_the_queue_hands_out_sentences_of_like_lengths_together(longest_first):
    """A chunk stops before a source whose length and its first's differ by more than a
    factor LIKE_LENGTHS and by more than LENGTH_SLACK tokens (they are encoded together:
    padding), but always holds one."""
    lengths = [30, 100, 95, 91, 89, 40, 29, 3, 5, 6, 10]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    queue = translator_module._Queue(order[::-1] if longest_first else order, 1, lengths)
    chunks = [[lengths[i] for i in chunk] for chunk in iter(lambda: queue.take_share(4, 1), [])]
    if longest_first:
        assert chunks == [[100, 95, 91], [89], [40], [30, 29], [10], [6, 5, 3]]
    else:
        assert chunks == [[3, 5, 6], [10], [29, 30], [40], [89, 91, 95], [100]]


def test_workers_share_the_sentences_and_use_one_thread_sessions(tiny_bundle, tiny_sentences,
                                                                monkeypatch):
    """With two threads and two decode workers, each decode worker runs its own running batch on the
    one-thread sessions, the call's sentences are split between them, and the results are those of
    one running batch on the two-thread sessions (fp32: exact)."""
    one = Translator.from_dir(tiny_bundle, intra_threads=2, workers=1)
    two = Translator.from_dir(tiny_bundle, intra_threads=2, workers=2)
    s = two.sessions
    assert s.one_thread_encoder is not s.encoder
    assert s.one_thread_encoder.get_session_options().intra_op_num_threads == 1
    encoded: list[tuple[str, int]] = []
    encode = s.encode

    def spy(src_ids, beside=False):
        encoded.append((threading.current_thread().name, len(src_ids), beside))
        return encode(src_ids, beside)

    monkeypatch.setattr(s, "encode", spy)
    texts = tiny_sentences * 3
    for beam in (1, 3):
        options = TranslationOptions(beam_size=beam)
        assert [r.text for r in two.translate_batch(texts, options)] == \
            [r.text for r in one.translate_batch(texts, options)]
    assert all(beside for _, _, beside in encoded)
    threads = {name for name, _, _ in encoded}
    assert len(threads) == 2  # both decode workers admitted sentences
    assert sum(n for _, n, _ in encoded) == 2 * len(texts)
    encoded.clear()
    two.translate_batch(texts[:1])  # one sentence: one decode worker, the two-thread sessions
    assert [beside for _, _, beside in encoded] == [False]


def test_decode_workers(monkeypatch):
    from app.engine.sessions import SessionConfig, decode_workers

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    assert decode_workers(SessionConfig(), 32) == 2  # at least 16 sentences per decode worker
    assert decode_workers(SessionConfig(), 128) == 8  # one per core
    assert decode_workers(SessionConfig(intra_op_threads=1), 128) == 1
    assert decode_workers(SessionConfig(intra_op_threads=4), 128) == 4
    assert decode_workers(SessionConfig(), 8) == 1
    assert decode_workers(SessionConfig(workers=3), 8) == 3  # as asked
    assert decode_workers(SessionConfig(provider="cuda", workers=3), 32) == 1
    with pytest.raises(ValueError, match="workers"):
        SessionConfig(workers=-1)


@pytest.mark.parametrize("beam_size", [1, 2])
def test_greedy_calls_start_with_the_longest_sources(tiny_bundle, reference, sources,
                                                     monkeypatch, beam_size):
    """A greedy call of several sentences starts its decode worker with the LONGEST_FIRST longest
    sources (their long outputs then run beside the others, not alone at the end), then goes
    shortest first; beam search goes shortest first from the start. Outputs equal PyTorch's."""
    from app.engine.search import Search

    model, _ = reference
    translator = Translator.from_dir(tiny_bundle, intra_threads=1, max_batch_size=4)
    first, admit = [], Search.admit

    def spy_admit(self, keys, limits, cross_k, cross_v, src_mask):
        first.extend(keys)
        admit(self, keys, limits, cross_k, cross_v, src_mask)

    monkeypatch.setattr(Search, "admit", spy_admit)
    got = translator.translate_ids(sources, TranslationOptions(beam_size=beam_size))
    if beam_size == 1:
        assert [h[0].tokens for h in got] == greedy_search(model, sources)
    by_length = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    n = translator_module.LONGEST_FIRST if beam_size == 1 else 0
    want = by_length[::-1][:n] + by_length[:2]
    assert [len(sources[i]) for i in first[:n + 2]] == [len(sources[i]) for i in want]


def test_cuda_sessions_get_none_of_the_cpu_only_machinery(tiny_bundle, tiny_sentences,
                                                         monkeypatch):
    """On CUDA our kernels (CPU-only custom ops), the fused search Loop, the graphs specialized
    by source length, one-thread copies and decode worker processes are all left out: the
    sessions run the bundle's graphs as exported. Here CUDA falls back to the CPU sessions,
    which still must have been made as for CUDA."""
    import onnx

    import app.engine.sessions as sessions_module
    from app.engine.kernels.rewrite import DOMAIN

    made = []
    original = sessions_module.create_session

    def recording(path, config, shared=(), custom_ops=None, external=None):
        if isinstance(path, bytes):
            graph = onnx.load_from_string(path)
        elif isinstance(path, onnx.ModelProto):
            graph = path
        else:
            graph = onnx.load(str(path), load_external_data=False)
        made.append((config.provider, custom_ops, {n.domain for n in graph.graph.node}))
        return original(path, config, shared, custom_ops, external)

    monkeypatch.setattr(sessions_module, "create_session", recording)
    t = Translator.from_dir(tiny_bundle, variant="fp32", provider="cuda", max_batch_size=64,
                            worker_processes=True)
    out = t.translate_batch(tiny_sentences[:1], TranslationOptions(beam_size=1))  # alone: fused?
    out += t.translate_batch(tiny_sentences[:4], TranslationOptions(beam_size=4))
    assert all(r.text for r in out)
    s = t.sessions
    assert (s.by_length, s.fused, s.greedy_advance, s._one_thread) == (False,) * 4
    assert t.workers == 1 and t.worker_processes is None
    assert made and all(provider == "cuda" and library is None and DOMAIN not in domains
                        for provider, library, domains in made), made


def test_graphs_of_a_newer_ir_version_than_onnxruntime_reads_still_load(tiny_bundle,
                                                                       tiny_sentences, tmp_path,
                                                                       caplog, monkeypatch):
    """onnxruntime-gpu trails the onnx that writes the bundles (IR 14 graphs, a runtime that
    reads 13): a bundle whose graphs carry an IR version one past what this onnxruntime reads
    loads with the version it reads, says so once, and translates as the original does."""
    import hashlib
    import json
    import shutil

    import onnx
    import onnxruntime as ort

    import app.engine.sessions as sessions_module

    monkeypatch.setattr(sessions_module, "_RESTAMPED", set())
    copy = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    entries = manifest["variants"]["fp32"]
    graph = onnx.load(str(copy / entries["encoder"]["file"]))
    newer = graph.ir_version + 1
    graph.ir_version = newer
    try:  # this onnxruntime must refuse it, else there is nothing to test here
        ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - onnxruntime's Fail
        assert sessions_module.IR_REFUSED.search(str(exc)), exc
    else:
        pytest.skip(f"this onnxruntime reads IR version {newer}")
    for name in ("encoder", "decoder"):
        path = copy / entries[name]["file"]
        model = onnx.load(str(path))
        model.ir_version = newer
        onnx.save(model, str(path))
        entries[name]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))

    options = TranslationOptions(beam_size=2)
    expected = Translator.from_dir(tiny_bundle, variant="fp32", workers=1)
    with caplog.at_level("WARNING"):
        newer_bundle = Translator.from_dir(copy, variant="fp32", workers=1)
        got = newer_bundle.translate_batch(tiny_sentences[:4], options)
    assert [r.tokens for r in got] == \
        [r.tokens for r in expected.translate_batch(tiny_sentences[:4], options)]
    assert caplog.text.count(f"the bundle's graphs are {newer}: loading them as") == 1


def test_another_provider_must_translate_the_probe_sentences_as_the_cpu_does(tiny_bundle,
                                                                             monkeypatch):
    """A translator whose provider is not the CPU is loaded only if its greedy output of the
    probe sentences shares most tokens with the CPU fp32 engine's: a provider that computes
    wrong numbers without an error is refused with the sentence that shows it."""
    from app.engine.sessions import Seq2SeqSessions

    made = Seq2SeqSessions.__init__
    probed = []

    def as_cuda(self, *args, **kwargs):  # CPU sessions that, asked for CUDA, report it
        made(self, *args, **kwargs)
        if self.config.provider == "cuda":
            self.providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]

    def recording(translator, cpu):
        probed.append(cpu.sessions.providers[0])
        return check(translator, cpu)

    check = translator_module.check_provider
    monkeypatch.setattr(translator_module, "check_provider", recording)
    monkeypatch.setattr(Seq2SeqSessions, "__init__", as_cuda)
    t = Translator.from_dir(tiny_bundle, variant="fp32", provider="cuda")
    assert probed == ["CPUExecutionProvider"]  # checked against the CPU engine
    monkeypatch.undo()

    cpu = Translator.from_dir(tiny_bundle, variant="fp32")
    good = cpu.translate_batch(list(translator_module.PROBE_SENTENCES),
                               TranslationOptions(beam_size=1))
    assert all(r.tokens for r in good)
    translator_module.check_provider(t, cpu)  # the same numbers: accepted
    wrong = [Result(text="des des des", tokens=[-1] * len(r.tokens)) for r in good]
    monkeypatch.setattr(t, "translate_batch", lambda texts, options=None: wrong)
    with pytest.raises(BundleError, match="translate differently from the CPU: 'The file"):
        translator_module.check_provider(t, cpu)


class _CopyAtBind:
    """An I/O binding with the CUDA provider's input semantics, on the CPU: ONNX Runtime copies
    an input read on another device when it is bound (IOBinding::BindInput), so later writes
    to the bound memory do not reach the run."""

    def __init__(self, binding) -> None:
        self.binding, self.held = binding, {}

    def bind_input(self, name, device, index, dtype, shape, pointer) -> None:
        import ctypes

        import numpy as np

        count = int(np.prod(shape))
        memory = (ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(pointer)
        copy = self.held[name] = np.frombuffer(memory, dtype, count).reshape(shape).copy()
        self.binding.bind_input(name, device, index, dtype, shape, copy.ctypes.data)

    def bind_output(self, *args) -> None:
        self.binding.bind_output(*args)


class _CopyingSession:
    def __init__(self, session) -> None:
        self.session = session

    def io_binding(self) -> _CopyAtBind:
        return _CopyAtBind(self.session.io_binding())

    def run_with_iobinding(self, binding: _CopyAtBind) -> None:
        self.session.run_with_iobinding(binding.binding)

    def get_outputs(self):
        return self.session.get_outputs()


@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize("batch", [32, 6], ids=["one batch", "sentences joining"])
def test_steps_on_a_device_that_copies_inputs_at_bind_time_bind_them_again(
        tiny_bundle, tiny_sentences, beam_size, batch):
    """Where ONNX Runtime copies bound inputs when they are bound (CUDA), the decoder binds its
    inputs again before every step (StepDecoder.rebind_inputs, set off the CPU; the cross
    keys, values and mask when they changed, as when sentences join a running batch in
    finished ones' slots) and translates as the CPU does; binding them once, as on the CPU,
    feeds every step the first one's tokens and cache (the output the first CUDA run
    showed)."""
    from app.engine.step import StepDecoder

    sentences = tiny_sentences * 3  # in batches of 6, some join in finished ones' slots
    options = TranslationOptions(beam_size=beam_size)
    t = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1, workers=1,
                            cross_by_length=False, fused=False, max_batch_size=batch)
    s = t.sessions
    assert not s.by_length and not s.greedy_advance  # the bundle's own graph, as on CUDA
    want = [r.tokens for r in t.translate_batch(sentences, options)]

    def copying(beams, small=False, advance=False):
        return _CopyingSession(s.decoder_for(beams, small, advance))

    got = {}
    for rebind in (False, True):
        s.step = StepDecoder(copying, t.bundle.architecture["n_decoder_layers"],
                             rebind_inputs=rebind).step
        got[rebind] = [r.tokens for r in t.translate_batch(sentences, options)]
    assert got[True] == want
    assert sum(a != b for a, b in zip(got[False], want, strict=True)) >= len(want) // 2


@pytest.mark.parametrize("source, decoded, given", [
    ("The room is 20 m² in size.", "Der Raum ist 20 m2 groß.", "Der Raum ist 20 m² groß."),
    ("Add ½ cup of sugar.", "1⁄2-Cup Zucker hinzufügen.", "½-Cup Zucker hinzufügen."),
    ("Firefox™ is a browser.", "FirefoxTM ist ein Browser.", "Firefox™ ist ein Browser."),
    ("Please wait…", "Bitte warten ...", "Bitte warten …"),
    ("H₂O and CO₂ are molecules.", "H2O und CO2 sind Moleküle.", "H₂O und CO₂ sind Moleküle."),
    ("Step ① of 10", "Schritt 1 von 10", "Schritt ① von 10"),
    ("Read 2 MB of 4 m².", "2 MB von 4 m2 lesen.", "2 MB von 4 m² lesen."),  # the other 2 stays
    ("Wait… what... really", "Warte... was... wirklich", "Warte... was... wirklich"),  # which?
    ("The ﬁle is open.", "Die Datei ist offen.", "Die Datei ist offen."),  # not found: as it is
    ("It weighs 10\u00a0kg.", "Es wiegt 10 kg.", "Es wiegt 10\u00a0kg."),  # a no-break space
    ("25\u00a0kg incl.\u00a0VAT", "25 kg inkl. MwSt.", "25\u00a0kg inkl. MwSt."),  # no VAT
    ("Fig.\u00a03 shows it", "Abb. 3 zeigt es", "Abb.\u00a03 zeigt es"),
    ("Hello \u00a0 world", "Hallo Welt", "Hallo Welt"),  # spaces alone are no word
    ("foo\u00adbar", "foo\u00adbar", "foo\u00adbar"),  # a soft hyphen is read as it is
    ("m² and m²", "m2 und m2", "m² und m²"),
])
def test_characters_the_vocabulary_reads_otherwise_come_back_as_written(translator, monkeypatch,
                                                                         source, decoded, given):
    """SentencePiece reads a compatibility character as its plain form ("m²" as "m2", "™" as
    "TM", "…" as "..."), and the model writes that form: where the translation has the plain
    form of a source word that held one (or of the character itself, where nothing else in the
    source reads so), the source's characters go back, alternatives included."""
    monkeypatch.setattr(translator, "decode", lambda ids, unknown=None: decoded)
    options = TranslationOptions(beam_size=3, num_alternatives=1)
    got = translator.translate_batch([source], options)[0]
    assert got.text == given and got.alternatives == [given]


def masking(tiny_bundle, tmp_path, symbols: str) -> Translator:
    """A translator of a copy of the tiny bundle whose manifest names masked_symbols."""
    copy = tmp_path / "masking"
    shutil.copytree(tiny_bundle, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**manifest, "masked_symbols": symbols}))
    return Translator.from_dir(copy, intra_threads=1)


def test_symbols_the_model_does_not_copy_are_masked_and_put_back(tiny_bundle, tmp_path,
                                                                 monkeypatch):
    """A symbol the bundle names (export.symbols measured that the model writes a word for
    it) goes to the model as a mask, `{N}` with a number the text does not use, a run of them
    as one; the symbols go back where the model put the mask, alternatives included."""
    t = masking(tiny_bundle, tmp_path, "±★")
    assert t.read("the red ±0.5 house")[0] == "the red {1}0.5 house"
    assert t.read("the {1} red ★★ house ±")[0] == "the {1} red {2} house {3}"
    assert t.encode(["the red ±0.5 house"]) == t.encode(["the red {1}0.5 house"])
    assert t.read("the red house") == ("the red house", None)
    for decoded, given in [
        ("das {1}0,5 Haus", "das ±0,5 Haus"),  # where the model put it, glued
        ("das {1} Haus {1}", "das ± Haus"),  # a copy is deleted
        ("das rote Haus", "das ± rote Haus"),  # dropped: the word boundary nearest its place
        ("das {9} rote Haus", "das {9} ± rote Haus"),  # braces not its own stay
    ]:
        monkeypatch.setattr(t, "decode", lambda ids, unknown=None, out=decoded: out)
        got = t.translate_batch(["the red ±0.5 house"], TranslationOptions(beam_size=2,
                                                                         num_alternatives=1))
        assert got[0].text == given and got[0].alternatives == [given]
    two = t.read("★ the red house ★")[1]  # both dropped: each near its own place
    assert two.back("das rote Haus") == "★ das rote Haus ★"
    assert t.tokenizer.unknown_pieces("✓")  # a symbol the vocabulary lacks: masked too
    assert t.read("done ✓")[0] == "done {1}"
    assert t.read("open Ω now") == ("open Ω now", None)  # a letter: an unknown piece
    unmeasured = Translator.from_dir(tiny_bundle, intra_threads=1)  # no masked_symbols
    assert unmeasured.read("the red ±0.5 house ✓") == ("the red ±0.5 house ✓", None)


def test_unknown_pieces_decode_as_the_source_wrote_them(translator):
    # what the model outputs for a character its vocabulary lacks (an unknown piece) is written
    # as that character, in the source's order, never as SentencePiece's " ⁇ "
    tokenizer = translator.tokenizer
    text = "open Ω and ж now"
    ids = tokenizer.encode([text])[0]
    unk = translator.unk_id
    assert ids.count(unk) == 2
    unknown = translator.unknowns(text)
    assert unknown == ("Ω", "ж")
    assert tokenizer.decode(ids, unknown) == text
    assert "\u2047" in tokenizer.decode(ids)  # without them: SentencePiece's surface
    # one more unknown piece out than in: it is dropped
    assert tokenizer.decode([*ids, unk], unknown) == text
