"""Corpus readers, cleaning, token-budget batching and the tokenizer."""

import random

import pytest
import torch

from model.data import (
    BatchStream,
    Example,
    clean_pairs,
    collate,
    iterate_epochs,
    prepare_batch,
    read_corpus,
    stream_batches,
    token_batches,
)
from model.tokenizer import Tokenizer, train_tokenizer

TMX = """<?xml version="1.0" encoding="UTF-8"?>
<tmx version="1.4"><header srclang="en"/><body>
<tu><tuv xml:lang="en"><seg>Open the file</seg></tuv>
    <tuv xml:lang="de-DE"><seg>Datei öffnen</seg></tuv></tu>
<tu><tuv xml:lang="en"><seg>Only English</seg></tuv></tu>
</body></tmx>
"""


def test_readers_for_tsv_moses_and_tmx(tmp_path):
    (tmp_path / "a.tsv").write_text("Hello\tHallo\nbroken line\nYes\tJa\n", encoding="utf-8")
    (tmp_path / "m.en").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "m.de").write_text("eins\nzwei\n", encoding="utf-8")
    (tmp_path / "t.tmx").write_text(TMX, encoding="utf-8")
    assert read_corpus(tmp_path / "a.tsv") == [("Hello", "Hallo"), ("Yes", "Ja")]
    assert read_corpus(tmp_path / "m") == [("one", "eins"), ("two", "zwei")]
    assert read_corpus(tmp_path / "t.tmx") == [("Open the file", "Datei öffnen")]


def test_cleaning_drops_and_counts():
    pairs = [
        ("a  b", "c d"),
        ("a b", "c d"),
        ("", "x"),
        ("x" * 2000, "y" * 2000),
        ("a reasonably long sentence", "x"),
        ("fine", "gut"),
    ]
    kept, report = clean_pairs(pairs)
    assert kept == [("a b", "c d"), ("fine", "gut")]
    assert report.dropped == {"duplicate": 1, "empty": 1, "too_long": 1, "length_ratio": 1}


def test_token_batches_respect_the_budget_and_cover_every_example():
    examples = [Example([5] * n, [1] + [6] * (n % 7 + 1) + [2]) for n in range(1, 60)]
    batches = token_batches(examples, max_tokens=100, seed=3)
    assert sorted(len(e.src) for b in batches for e in b) == sorted(len(e.src) for e in examples)
    for b in batches:
        assert len(b) == 1 or len(b) * max(max(len(e.src), len(e.tgt)) for e in b) <= 100
    assert len(batches) < len(examples)  # real batching, not one example each
    src, tgt_in, tgt_out = collate(batches[0], pad_id=0)
    assert src.shape[0] == tgt_in.shape[0] and tgt_in.shape == tgt_out.shape


def _epoch_sample(epoch: int) -> list[Example]:
    """A different seeded sample of examples in each epoch, as domain_sample gives."""
    rng = random.Random(epoch)
    return [Example([5 + i % 9] * rng.randint(1, 20), [1] + [6] * rng.randint(1, 20) + [2])
            for i in range(300)]


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_the_batch_stream_made_ahead_by_workers_is_the_one_made_in_order(workers):
    """The batches the step gets, whether worker processes make them or the trainer does:
    iterate_epochs' own, epoch after epoch, with a resumed run's first batches left out."""
    start_epoch, skip = 2, 5
    expected = []
    for epoch, index, batch in iterate_epochs(_epoch_sample, 400, seed=7, start_epoch=start_epoch):
        if epoch == start_epoch + 3:
            break
        expected.append((epoch, index, prepare_batch(batch, 0)))
    expected = expected[skip:]
    assert len({e for e, _, _ in expected}) == 3 and len(expected) > 3 * workers
    stream = stream_batches(BatchStream(_epoch_sample, 400, 7, start_epoch, skip, pad_id=0),
                            workers, pin=False)
    got = [next(stream) for _ in expected]
    for (epoch, index, want), (got_epoch, got_index, batch) in zip(expected, got, strict=True):
        assert (got_epoch, got_index) == (epoch, index)
        for a, b in zip(want, batch, strict=True):
            assert torch.equal(a, b)
    src, tgt_in, tgt_out, real = got[0][2]
    assert torch.equal(real, (tgt_out != 0).flatten().nonzero().squeeze(1))


def test_token_batches_group_by_the_longer_side_so_targets_carry_little_padding():
    # sources of one length with targets of very different lengths, and the reverse
    examples = [Example([5] * 10, [1] + [6] * n + [2]) for n in (1, 30, 2, 31, 3, 32)]
    examples += [Example([5] * n, [1] + [6] * 8 + [2]) for n in (1, 30, 2, 31)]
    for b in token_batches(examples, max_tokens=70, seed=1):
        longest = [max(len(e.src), len(e.tgt)) for e in b]
        assert max(longest) - min(longest) <= 3, longest


def test_tokenizer_round_trips_text_and_keeps_special_ids(tmp_path):
    texts = ["The quick brown fox jumps over the lazy dog.", "Öffnen Sie die Datei %s."] * 100
    tok = Tokenizer.load(train_tokenizer(texts, tmp_path / "spm.model", vocab_size=60))
    for text in ["The lazy fox.", "Öffnen Sie die Datei %s."]:
        assert tok.decode(tok.encode(text)) == text
    ids = tok.encode("Datei %s")
    assert tok.sp.piece_to_id("%s") in ids
    assert min(ids) > 3  # pad/bos/eos/unk are 0..3 and never produced for known text


def test_sample_domains_cuts_and_repeats_by_share():
    from model.data import sample_domains

    by_domain = {
        "dictionary": [Example([i], [i]) for i in range(100)],
        "general": [Example([1000 + i], [i]) for i in range(10)],
        "software": [Example([2000 + i], [i]) for i in range(20)],
    }
    shares = {"dictionary": 0.25, "general": 2.5}
    chosen = sample_domains(by_domain, shares, seed=3)
    ids = [e.src[0] for e in chosen]
    assert sum(i < 1000 for i in ids) == 25 and len(set(i for i in ids if i < 1000)) == 25
    general = [i for i in ids if 1000 <= i < 2000]
    assert len(general) == 25 and all(general.count(1000 + i) >= 2 for i in range(10))
    assert sorted(i for i in ids if i >= 2000) == list(range(2000, 2020))
    assert [e.src for e in sample_domains(by_domain, shares, seed=3)] == [e.src for e in chosen]


def test_typed_in_a_hurry_lowers_the_source_or_drops_the_final_mark_on_both_sides():
    from model.data import HURRIES, typed_in_a_hurry

    pair = ("Where is the Station?", "Wo ist der Bahnhof?")
    assert [typed_in_a_hurry(*pair, how) for how in HURRIES] == [
        ("where is the station?", "Wo ist der Bahnhof?"),
        ("Where is the Station", "Wo ist der Bahnhof"),
        ("where is the station", "Wo ist der Bahnhof")]
    # a mark goes only where both sides end with one; the German's case always stays
    assert typed_in_a_hurry("Save the File.", "Datei speichern") == ("save the file.",
                                                                     "Datei speichern")
    assert typed_in_a_hurry("Wait!?", "Warte!") == ("wait", "Warte")
    assert typed_in_a_hurry("Wait...", "Warte …") == ("wait...", "Warte …")
    with pytest.raises(ValueError, match="how must be one of"):
        typed_in_a_hurry("a", "b", "shouting")
