"""The n-gram language model for reranking: its counts and estimate against a plain reference
implementation of interpolated Kneser-Ney, its file as the engine reads it, pruning, domain
weights and the command line."""

from __future__ import annotations

import hashlib
import math
from collections import Counter

import numpy as np
import pytest

from app.engine.ngram import NgramModel, write_ngram_file
from model.ngram import build, build_file, count_ngrams, estimate, main, parse_weights
from model.tokenizer import BOS_ID, EOS_ID

VOCAB = 12


def _sentences(count: int, seed: int) -> list[list[int]]:
    """Pieces 4..11 with some structure (a few frequent bigrams), lengths 1..7."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        s = [int(rng.integers(4, VOCAB))]
        while len(s) < rng.integers(1, 8):
            s.append(s[-1] + 1 if s[-1] < VOCAB - 1 and rng.random() < 0.5
                     else int(rng.integers(4, VOCAB)))
        out.append(s)
    return out


class Reference:
    """Interpolated Kneser-Ney written the plain way: dictionaries of n-gram tuples."""

    def __init__(self, sentences: list[list[int]], order: int) -> None:
        self.order = order
        top: Counter = Counter()
        for s in sentences:
            seq = [BOS_ID] * (order - 1) + s + [EOS_ID]
            for i in range(order - 1, len(seq)):
                top[tuple(seq[i - order + 1 : i + 1])] += 1
        self.counts = {order: top}
        for n in range(order - 1, 0, -1):  # distinct pieces seen before each
            self.counts[n] = Counter(g[1:] for g in self.counts[n + 1])
        self.discount = {}
        for n, c in self.counts.items():
            n1 = sum(1 for v in c.values() if v == 1)
            n2 = sum(1 for v in c.values() if v == 2)
            self.discount[n] = n1 / (n1 + 2 * n2) if n1 and n2 else 0.5  # as model.ngram

    def p(self, g: tuple[int, ...]) -> float:
        if not g:
            return 1 / VOCAB
        counts, h = self.counts[len(g)], g[:-1]
        followers = [v for k, v in counts.items() if k[:-1] == h]
        if not followers:
            return self.p(g[1:])
        d, total = self.discount[len(g)], sum(followers)
        return max(counts.get(g, 0) - d, 0) / total + d * len(followers) / total * self.p(g[1:])

    def log_probs(self, pieces: list[int]) -> list[float]:
        seq = [BOS_ID] * (self.order - 1) + pieces + [EOS_ID]
        return [math.log(self.p(tuple(seq[i - self.order + 1 : i + 1])))
                for i in range(self.order - 1, len(seq))]


def _decode(tables, bits: int) -> list[list[tuple[int, ...]]]:
    """Each table's keys as tuples of pieces (the context's place walked down the orders)."""
    out: list[list[tuple[int, ...]]] = []
    for t in tables:
        low = (1 << bits) - 1
        out.append([(*(out[-1][int(k) >> bits] if out else ()), int(k) & low)
                    for k in t.keys])
    return out


def _file(tmp_path, sentences, order=3, min_count=1, weights=None) -> NgramModel:
    header, arrays = build(sentences, np.ones(len(sentences)) if weights is None else weights,
                           VOCAB, order, min_count)
    write_ngram_file(tmp_path / "lm.ngram.bin", {**header, "info": {"test": 1}}, arrays)
    return NgramModel(tmp_path / "lm.ngram.bin")


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_the_estimate_is_interpolated_kneser_ney(order):
    sentences = _sentences(60, seed=1)
    ref = Reference(sentences, order)
    tables = count_ngrams(sentences, np.ones(len(sentences)), order, bits=4)
    logp, _, _ = estimate(tables, 4, VOCAB)
    for n, (names, t) in enumerate(zip(_decode(tables, 4), tables, strict=True), start=1):
        seen = {g: c for g, c in zip(names, t.counts, strict=True) if c > 0}
        assert seen == dict(ref.counts[n])
        for g, lp in zip(names, logp[n - 1], strict=True):
            if BOS_ID not in g[1:]:  # the padding's own n-grams are contexts, never predicted
                assert lp == pytest.approx(math.log(ref.p(g)), abs=1e-9), g


def test_the_file_scores_as_the_reference_does(tmp_path):
    sentences = _sentences(60, seed=1)
    ref, lm = Reference(sentences, 3), _file(tmp_path, sentences)
    assert (lm.order, lm.info) == (3, {"test": 1})
    # seen sentences and new ones (unseen n-grams back off; piece 3 was never seen)
    probes = sentences[:10] + _sentences(10, seed=2) + [[3, 4, 5], [11, 11, 11, 11]]
    errors = []
    for pieces in probes:
        ids = np.array([BOS_ID] * 2 + pieces + [EOS_ID])
        got = lm.log_probs(ids)[2:]
        errors += list(np.abs(got - np.array(ref.log_probs(pieces))))
    # a byte per value: a few hundredths of a nat on average
    assert np.mean(errors) < 0.02 and np.max(errors) < 0.3
    per_token = lm.per_token(probes)
    for pieces, value in zip(probes, per_token, strict=True):
        assert value == pytest.approx(np.mean(ref.log_probs(pieces)), abs=0.05)


def test_each_context_sums_to_one_unpruned(tmp_path):
    lm = _file(tmp_path, _sentences(80, seed=3))
    for context in ([], [4], [4, 5], [9, 9], [3, 3]):
        total = sum(math.exp(lm.log_probs(np.array([BOS_ID] * 2 + context + [w]))[-1])
                    for w in [EOS_ID, *range(3, VOCAB)])  # every piece that may follow
        assert total == pytest.approx(1.0, abs=0.03), context


def test_a_row_scores_the_same_in_any_batch(tmp_path):
    lm = _file(tmp_path, _sentences(60, seed=1), order=4)
    rows = [[4, 5, 6], [7], [11, 4, 5, 6, 7, 8], [6, 6]]
    together = lm.per_token(rows)
    alone = np.array([lm.per_token([r])[0] for r in rows])
    np.testing.assert_allclose(together, alone, rtol=1e-6)
    assert len(set(np.round(together, 4))) == len(rows)


def test_the_unknown_piece_is_left_unjudged(tmp_path):
    lm = _file(tmp_path, _sentences(60, seed=1))
    row = [4, 3, 5, 6]  # piece 3 never seen: the model's lowest log-probability
    each = lm.log_probs(np.array([BOS_ID] * 2 + row + [EOS_ID]))[2:]
    assert lm.per_token([row])[0] == pytest.approx(each.mean(), abs=1e-5)
    judged = [0, 2, 3, 4]  # 4, 5, 6 and EOS; what follows 3 still reads it as context
    assert lm.per_token([row], unjudged=3)[0] == pytest.approx(each[judged].mean(), abs=1e-5)
    assert lm.per_token([row], unjudged=3)[0] > lm.per_token([row])[0]
    eos_after = lm.log_probs(np.array([BOS_ID] * 2 + [3, 3, EOS_ID]))[-1]
    assert lm.per_token([[3, 3]], unjudged=3)[0] == pytest.approx(eos_after, abs=1e-5)


def test_pruning_keeps_the_contexts_of_what_it_keeps(tmp_path):
    sentences = _sentences(200, seed=4)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full = _file(tmp_path / "a", sentences, order=4)
    pruned = _file(tmp_path / "b", sentences, order=4, min_count=3)
    assert all(len(p) < len(f) for p, f in zip(pruned.keys[1:], full.keys[1:], strict=True))
    assert len(pruned.keys[0]) == len(full.keys[0])  # every unigram stays
    for n in range(2, 5):  # each key's context is a place in the order below
        assert int(pruned.keys[n - 1].max()) >> pruned.bits < len(pruned.keys[n - 2])
    for context in ([4], [4, 5, 6]):
        total = sum(math.exp(pruned.log_probs(np.array([BOS_ID] * 3 + context + [w]))[-1])
                    for w in [EOS_ID, *range(3, VOCAB)])
        # what pruning drops is counted only through the back-off weight (not renormalized)
        assert 0.5 < total <= 1.03
    scores = pruned.per_token(_sentences(20, seed=5))
    assert np.all(np.isfinite(scores)) and np.all(scores < 0)


def test_an_order_pruned_away_backs_off(tmp_path):
    pruned = _file(tmp_path, _sentences(40, seed=7), order=3, min_count=10_000)
    assert len(pruned.keys[2]) == 0 and len(pruned.keys[1]) == 0
    # what is left: each piece's unigram, times its predecessor's back-off weight as a context
    # of bigrams (kept with the unigram); no bigram context is left for the third order's weight

    def unigram(coded, piece):
        codes, values = coded
        return values[codes[np.searchsorted(pruned.keys[0], piece)]]

    rows = _sentences(5, seed=8)
    want = [np.mean([unigram(pruned.logp[0], w) + unigram(pruned.backoff[0], before)
                     for before, w in zip([BOS_ID, *r], [*r, EOS_ID], strict=True)])
            for r in rows]
    np.testing.assert_allclose(pruned.per_token(rows), want, rtol=1e-5)


def test_a_weight_multiplies_a_sentence_count(tmp_path):
    sentences = _sentences(30, seed=6)
    weights = np.where(np.arange(30) < 10, 3.0, 1.0)
    top = count_ngrams(sentences, weights, 3, bits=4)[-1]
    plain = count_ngrams(sentences, np.ones(30), 3, bits=4)[-1]
    np.testing.assert_array_equal(top.keys, plain.keys)
    assert top.counts.sum() == plain.counts.sum() + 2 * sum(len(s) + 1 for s in sentences[:10])
    np.testing.assert_array_equal(top.raw, plain.raw)  # pruning looks at times seen


def test_a_key_too_wide_for_a_table_is_not_found(tmp_path):
    lm = _file(tmp_path, _sentences(60, seed=1))
    assert lm.keys[1].dtype == np.uint16
    key = lm.keys[1][5].astype(np.uint64)
    found, _ = lm._find(2, np.array([key, key + np.uint64(1 << 16)], dtype=np.uint64))
    assert found.tolist() == [True, False]


def test_a_file_of_another_kind_is_refused(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\0" * 64)
    with pytest.raises(ValueError, match="not an n-gram file"):
        NgramModel(tmp_path / "x.bin")


def test_the_command_weights_domains_and_records_how(tmp_path, tiny_checkpoint, capsys):
    texts = ["Das ist ein Haus.", "Der Hund schläft.", "Haus Hund", "Ein Satz mehr."]
    (tmp_path / "train.de").write_text("\n".join(texts) + "\n", encoding="utf-8")
    (tmp_path / "train.domain").write_text("general\ngeneral\ndictionary\nsoftware\n")
    spm = tiny_checkpoint.parent / "spm.model"
    out = tmp_path / "lm.ngram.bin"
    assert main(["--train", str(tmp_path / "train"), "--lang", "de", "--tokenizer", str(spm),
                 "--out", str(out), "--order", "3", "--weight", "general=3",
                 "--weight", "dictionary=0"]) == 0
    assert "3-grams" in capsys.readouterr().out
    info = NgramModel(out).info
    assert (info["sentences"], info["order"], info["min_count"]) == (3, 3, 1)
    assert info["domain_weights"] == {"general": 3.0, "dictionary": 0.0}
    assert info["tokenizer_sha256"] == hashlib.sha256(spm.read_bytes()).hexdigest()
    with pytest.raises(SystemExit, match="not in"):
        build_file(str(tmp_path / "train"), "de", spm, out, domain_weights={"legal": 2.0})
    with pytest.raises(SystemExit, match="order and min_count must be >= 1"):
        build_file(str(tmp_path / "train"), "de", spm, out, order=0)


@pytest.mark.parametrize("bad", ["general", "general=x", "=3", "general=-1"])
def test_a_wrong_weight_is_refused(bad):
    with pytest.raises(SystemExit, match="DOMAIN=NUMBER"):
        parse_weights([bad])
    assert parse_weights(["a=2", "b=0.5"]) == {"a": 2.0, "b": 0.5}
