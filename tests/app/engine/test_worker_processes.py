"""Decode workers in worker processes (app.engine.worker_processes): the same translations as a
running batch in this process, blank texts, failures that end one batch and not the service."""

from __future__ import annotations

import os
import signal

import pytest

from app.engine import TranslationOptions, Translator
from app.engine.worker_processes import WorkerProcessError


@pytest.fixture(scope="module")
def translator(tiny_bundle):
    t = Translator.from_dir(tiny_bundle, variant="fp32", workers=2, worker_processes=True)
    t.worker_processes.start(2)
    yield t
    t.close()
    assert t.worker_processes.pids == []


def drive(batch, keyed: dict) -> dict:
    """Admit every text at once, step until all finished; {key: Result}."""
    batch.admit(list(keyed), list(keyed.values()))
    out = {}
    while batch.running:
        out.update(batch.step())
    return out


@pytest.mark.parametrize("beams", [1, 3])
def test_a_worker_process_translates_as_a_running_batch_here(translator, tiny_sentences, beams):
    options = TranslationOptions(beam_size=beams, num_alternatives=beams - 1, return_scores=True)
    texts = {f"k{i}": text for i, text in enumerate(tiny_sentences)}
    batch = translator.start_batch(options, beside=True)
    assert type(batch).__name__ == "ProcessBatch"
    try:
        found = drive(batch, texts)
    finally:
        batch.close()
    here = translator.start_batch(options, beside=False)  # a RunningBatch in this process
    expected = drive(here, texts)
    assert set(found) == set(texts)
    for key in texts:  # fp32: bit-identical, alternatives and scores included
        assert found[key] == expected[key], key


def test_a_full_worker_sends_only_the_steps_that_finished_something(translator, tiny_sentences):
    """A full batch's step that finished nothing is no news to the parent (it could admit no
    one): the decode worker sends nothing for it, and the parent's next step waits for one that
    did."""
    size = translator.worker_processes.spec.max_batch_size
    texts = [tiny_sentences[i % len(tiny_sentences)] for i in range(size)]
    batch = translator.start_batch(TranslationOptions(beam_size=1), beside=True)
    try:
        batch.admit(list(range(size)), texts)
        answers = []
        while batch.running:
            full = batch.running == size
            answers.append((full, batch.step()))
    finally:
        batch.close()
    assert answers[0][0] and all(got for full, got in answers if full)
    assert sorted(key for _, got in answers for key, _ in got) == list(range(size))


def test_sentences_join_a_worker_between_steps(translator, tiny_sentences):
    options = TranslationOptions(beam_size=1)
    expected = translator.translate_batch(tiny_sentences[:4], options)
    batch = translator.start_batch(options, beside=True)
    try:
        batch.admit([0], [tiny_sentences[0]])
        out = dict(batch.step())
        batch.admit([1, 2, 3], tiny_sentences[1:4])  # while sentence 0 may still run
        batch.admit([4], ["   "])  # a blank text finishes at the next step, empty
        while batch.running:
            out.update(batch.step())
    finally:
        batch.close()
    assert [out[i].text for i in range(4)] == [r.text for r in expected]
    assert out[4].text == ""


def test_a_batch_given_up_on_leaves_nothing_for_the_next(translator, tiny_sentences):
    options = TranslationOptions(beam_size=1)
    first = translator.start_batch(options, beside=True)
    first.admit(list(range(len(tiny_sentences))), tiny_sentences)
    first.close()  # the batcher gave up (an error): its sentences are dropped in the decode worker
    second = translator.start_batch(options, beside=True)
    try:
        found = drive(second, {"only": tiny_sentences[0]})
    finally:
        second.close()
    assert list(found) == ["only"]
    assert found["only"].text == translator.translate_batch(tiny_sentences[:1], options)[0].text


def test_a_worker_process_that_dies_fails_its_batch_and_is_replaced(translator, tiny_sentences):
    options = TranslationOptions(beam_size=1)
    batch = translator.start_batch(options, beside=True)
    victim = batch.proc.process.pid
    os.kill(victim, signal.SIGKILL)
    batch.proc.process.wait()
    with pytest.raises(WorkerProcessError, match="exited"):
        batch.admit([0], [tiny_sentences[0]])
        batch.step()
    batch.close()
    for _ in range(2):  # both decode workers of the pool are taken: the dead one is started again
        again = translator.start_batch(options, beside=True)
        try:
            found = drive(again, {0: tiny_sentences[0]})
        finally:
            again.close()
        assert found[0].text
    assert victim not in translator.worker_processes.pids


def test_offline_calls_stay_in_this_process(translator, tiny_sentences):
    pids = translator.worker_processes.pids
    assert translator.translate_batch(tiny_sentences[:2])[0].text
    assert translator.worker_processes.pids == pids


def test_worker_processes_only_with_two_workers_on_the_cpu(tiny_bundle):
    one = Translator.from_dir(tiny_bundle, variant="fp32", workers=1, worker_processes=True)
    assert one.worker_processes is None
    assert type(one.start_batch(TranslationOptions(), beside=True)).__name__ == "RunningBatch"


def test_warm_up_starts_the_workers_and_offline_calls_still_translate(tiny_bundle, tiny_sentences):
    """With worker processes, warm-up starts one per decode worker (not this process's sessions); an
    offline call afterwards still translates here, as a translator without worker processes."""
    plain = Translator.from_dir(tiny_bundle, variant="fp32", workers=2)
    with_processes = Translator.from_dir(tiny_bundle, variant="fp32", workers=2,
                                         worker_processes=True)
    try:
        with_processes.warmup()
        assert len(with_processes.worker_processes.pids) == 2
        options = TranslationOptions(beam_size=2)
        assert ([r.text for r in with_processes.translate_batch(tiny_sentences, options)]
                == [r.text for r in plain.translate_batch(tiny_sentences, options)])
    finally:
        with_processes.close()
    assert with_processes.worker_processes.pids == []


def test_a_wedged_worker_process_is_killed_and_replaced(translator, tiny_sentences, monkeypatch):
    """A worker process that sends nothing for STEP_TIMEOUT (here: stopped with SIGSTOP) fails
    its batch and is killed; the next batch gets a decode worker started again."""
    from app.engine import worker_processes

    monkeypatch.setattr(worker_processes, "STEP_TIMEOUT", 1.0)
    options = TranslationOptions(beam_size=1)
    batch = translator.start_batch(options, beside=True)
    victim = batch.proc.process
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        batch.admit([0], [tiny_sentences[0]])
        with pytest.raises(WorkerProcessError, match="sent nothing"):
            batch.step()
    finally:
        batch.close()
    assert victim.wait(10) == -signal.SIGKILL
    for _ in range(2):  # both decode workers of the pool are taken: the killed one is started again
        again = translator.start_batch(options, beside=True)
        try:
            assert drive(again, {0: tiny_sentences[0]})[0].text
        finally:
            again.close()
    assert victim.pid not in translator.worker_processes.pids


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("beside", [False, True], ids=["here", "worker process"])
def test_a_cancelled_sentence_ends_at_the_next_step(translator, tiny_sentences, beams, beside):
    """A sentence whose request went away ends at the step after `cancel` (with what it has
    then) instead of decoding to its limit; the others run on as before."""
    options = TranslationOptions(beam_size=beams)
    text = " ".join(tiny_sentences)  # long: it runs for many steps

    def steps_to_finish(batch, keys) -> dict:
        done, step = {}, 0
        while batch.running:
            step += 1
            done.update({key: (step, result) for key, result in batch.step() if key in keys})
        return done

    alone = translator.start_batch(options, beside=False)
    alone.admit(["long", "other"], [text, tiny_sentences[0]])
    full = steps_to_finish(alone, {"long", "other"})
    assert full["long"][0] > 4  # else the test shows nothing
    batch = translator.start_batch(options, beside=beside)
    held = None
    try:
        # a worker process steps on its own, as fast as it can: held until the cancel waits in
        # its pipe beside the admit, else a busy machine may let it finish before the cancel
        # is sent (the parent cannot count its steps)
        if beside:
            held = batch.proc.process.pid
            os.kill(held, signal.SIGSTOP)
        batch.admit(["long", "other"], [text, tiny_sentences[0]])
        early = {}
        if not beside:
            for _ in range(2):
                early.update(batch.step())
        batch.cancel(["long", "gone before"])  # a key not running is no error
        if held:
            os.kill(held, signal.SIGCONT)
        found = steps_to_finish(batch, {"long", "other"})
    finally:
        if held:
            os.kill(held, signal.SIGCONT)  # (again, if the test failed before it)
        batch.close()
    full_tokens = len(full["long"][1].tokens)
    if beside:  # told before its first step, the worker process ends it within a step or two
        assert len(found["long"][1].tokens) <= min(4, full_tokens // 2)
    else:
        assert found["long"][0] == 1  # the next step ended it
        assert len(found["long"][1].tokens) == 3 < full_tokens
    other = early.get("other") or found["other"][1]
    assert other == full["other"][1]  # the sentence beside it as without the cancel
