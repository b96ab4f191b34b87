"""A reranking language model in a bundle (a neural one or an n-gram one): the neural graph
against PyTorch, the manifest entry, the weight tuned on dev, and the engine's ranking by score
plus weight x language model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from app.engine import Translator
from app.engine.bundle import BundleError, load_bundle
from app.engine.ngram import NgramModel
from app.engine.rerank import Reranker, keeps, lm_rows, name_pieces
from app.engine.search import Hypothesis
from app.engine.types import TranslationOptions
from export.lm import WEIGHTS, build_lm_graph, export_lm
from model.lm import LanguageModel, LMShape, LMTrainer, load_lm_config
from model.ngram import build_file
from tests.conftest import toy_pairs


@pytest.fixture(scope="module")
def toy_lm(tiny_checkpoint, tmp_path_factory) -> Path:
    """A language model of the toy German, on the tiny bundle's tokenizer."""
    root = tmp_path_factory.mktemp("toy_lm")
    (root / "train.de").write_text("\n".join(t for _, t in toy_pairs(400, seed=5)) + "\n",
                                   encoding="utf-8")
    (root / "dev.de").write_text("\n".join(t for _, t in toy_pairs(30, seed=6)) + "\n",
                                 encoding="utf-8")
    cfg = load_lm_config(None, [
        f"train={root / 'train'}", f"dev={root / 'dev'}",
        f"tokenizer={tiny_checkpoint.parent / 'spm.model'}", f"out_dir={root / 'run'}",
        "d_model=32", "n_heads=2", "n_layers=2", "d_ff=64", "dropout=0.0", "batch_tokens=400",
        "warmup_steps=20", "lr_scale=2.0", "max_steps=60", "threads=1"])
    return LMTrainer(cfg).run()


@pytest.fixture(scope="module")
def toy_ngram(tiny_checkpoint, tmp_path_factory) -> Path:
    """A 3-gram model of the same toy German (model/ngram.py)."""
    root = tmp_path_factory.mktemp("toy_ngram")
    (root / "train.de").write_text("\n".join(t for _, t in toy_pairs(400, seed=5)) + "\n",
                                   encoding="utf-8")
    build_file(str(root / "train"), "de", tiny_checkpoint.parent / "spm.model",
               root / "lm.ngram.bin", order=3)
    return root / "lm.ngram.bin"


@pytest.fixture(params=["neural", "ngram"])
def reranking_bundle(request, tiny_bundle, tmp_path) -> Path:
    """The tiny bundle with a language model of either kind."""
    bundle = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, bundle)
    # a weight that lets the language model decide: the ranking visibly changes
    export_lm(request.getfixturevalue("toy_lm" if request.param == "neural" else "toy_ngram"),
              bundle, [], weight=5.0)
    return bundle


def test_graph_scores_as_pytorch_does():
    import onnxruntime as ort

    torch.manual_seed(0)
    model = LanguageModel(LMShape(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3)
    model.eval()
    session = ort.InferenceSession(build_lm_graph(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    ids = lm_rows([[5, 6, 7, 8, 9, 10], [11, 12], [13]], 1, 2, 0)
    got = session.run(None, {"ids": ids})[0]
    want = model.log_probs(torch.from_numpy(ids)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    later = ids.copy()
    later[0, 5] = 20  # the last token of row 0: only its own term changes
    changed = session.run(None, {"ids": later})[0]
    assert changed[0] != pytest.approx(got[0], abs=1e-3)
    np.testing.assert_allclose(changed[1:], got[1:], rtol=1e-6)


def test_the_bundle_holds_the_model_and_its_entry(reranking_bundle):
    manifest = json.loads((reranking_bundle / "manifest.json").read_text())
    entry = manifest["rerank"]
    assert (entry["weight"], entry["candidates"]) == (5.0, manifest["decoding"]["beam_size"])
    card = (reranking_bundle / "MODEL_CARD.md").read_text()
    if entry["model"]["kind"] == "neural":
        name = "lm.int8.onnx"
        assert entry["model"]["step"] == 60
        assert entry["model"]["int8_max_diff_per_token"] <= 0.05
        assert "2 layers, d_model 32, trained 60 steps" in card
    else:
        name = "lm.ngram.bin"
        assert (entry["model"]["order"], entry["model"]["sentences"]) == (3, 400)
        assert "tokenizer_sha256" not in entry["model"]  # the bundle's own, checked at export
        assert f"3-gram Kneser-Ney model of the translation model's pieces, counted on " \
               f"`{entry['model']['corpus']}` (400 sentences)" in card
    assert "plus 5.0 x the log-probability per token" in card
    assert entry["language_model"]["file"] == name
    assert [p.name for p in reranking_bundle.glob("lm.*")] == [name]
    assert load_bundle(reranking_bundle).language_model_path == reranking_bundle / name


def test_a_language_model_replaces_the_other_kind(tiny_bundle, toy_lm, toy_ngram, tmp_path):
    bundle = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, bundle)
    export_lm(toy_lm, bundle, [], weight=1.0)
    export_lm(toy_ngram, bundle, [], weight=0.5)
    assert sorted(p.name for p in bundle.glob("lm.*")) == ["lm.ngram.bin"]
    reranker = Translator.from_dir(bundle).reranker
    assert isinstance(reranker.model, NgramModel) and reranker.weight == 0.5


def _hypotheses(translator: Translator, sentences: list[str], options: TranslationOptions):
    return translator.translate_ids(translator.encode(sentences), options)


def test_the_engine_ranks_by_score_plus_weighted_language_model(reranking_bundle,
                                                                tiny_sentences):
    translator = Translator.from_dir(reranking_bundle)
    reranker = translator.reranker
    assert reranker is not None and reranker.weight == 5.0
    options = TranslationOptions(beam_size=4, num_alternatives=3, return_scores=True)
    plain = TranslationOptions(beam_size=4, num_alternatives=3, return_scores=True,
                               rerank=False)
    one = TranslationOptions(beam_size=4)
    results = translator.translate_batch(tiny_sentences, options)
    changed = 0
    for sentence, hyps, result in zip(tiny_sentences, _hypotheses(translator, tiny_sentences,
                                                                  plain), results, strict=True):
        lm = reranker.per_token([h.tokens for h in hyps])
        combined = np.array([h.normalized for h in hyps]) + 5.0 * lm
        order = np.argsort(-combined, kind="stable")
        texts = [translator.result([hyps[i]], one, translator.source(sentence)).text
                 for i in order]
        assert [result.text, *result.alternatives] == texts
        # the score stays the translation model's own
        assert result.score == pytest.approx(hyps[order[0]].normalized, abs=1e-6)
        changed += int(order[0] != 0)
        # alone (the fused search, where the sessions have it): the same
        assert translator.translate_batch([sentence], options)[0] == result
    assert changed  # the language model moved some sentence's best hypothesis

    # rerank=False: the search's own order and scores
    base = translator.translate_batch(tiny_sentences, plain)
    for hyps, result in zip(_hypotheses(translator, tiny_sentences, plain), base, strict=True):
        assert result.score == pytest.approx(hyps[0].normalized, abs=1e-6)


def test_a_source_s_names_are_every_piece_of_its_words_with_a_capital_or_a_digit():
    # pieces 10-19 begin a word; 10, 11 and 20 have a capital letter or a digit
    marked, starts = frozenset({10, 11, 20}), frozenset(range(10, 20))
    assert name_pieces((12, 30, 10, 31, 32, 13, 20, 33), marked, starts) == {10, 31, 32, 13, 20, 33}
    assert name_pieces((30, 11), marked, starts) == {11}  # a text may begin inside a word
    assert name_pieces((12, 13, 30), marked, starts) == frozenset()


def test_a_hypothesis_that_drops_a_copied_name_ranks_after_those_that_keep_it(toy_ngram):
    reranker = Reranker(toy_ngram, weight=1.0, candidates=4)
    hyps = [Hypothesis([5, 7, 8], -1.0, -0.2),  # the search's best: it copied 7 and 8
            Hypothesis([5, 9], -1.2, -0.3),      # dropped them: the language model's favourite
            Hypothesis([6, 7, 8], -1.5, -0.4),   # kept them, and reads better than the best
            Hypothesis([6, 8], -1.6, -0.5)]      # dropped 7
    lm = {(5, 7, 8): -3.0, (5, 9): -0.5, (6, 7, 8): -2.0, (6, 8): -1.0}
    reranker.per_token = lambda token_lists: np.array([lm[tuple(t)] for t in token_lists])
    names = frozenset({7, 8, 40})  # 40: a name of the source the search did not copy
    assert keeps([h.tokens for h in hyps], names).tolist() == [True, False, True, False]
    order = reranker.order(hyps, names)
    assert [h.tokens for h in order] == [[6, 7, 8], [5, 7, 8], [5, 9], [6, 8]]
    # without names to keep, score plus weight x language model alone
    assert [h.tokens for h in reranker.order(hyps)] == [[5, 9], [6, 8], [6, 7, 8], [5, 7, 8]]


def test_a_running_batch_reranks_as_a_call_does(reranking_bundle, tiny_sentences):
    translator = Translator.from_dir(reranking_bundle)
    options = TranslationOptions(beam_size=4)
    batch = translator.start_batch(options)
    batch.admit(list(range(len(tiny_sentences))), tiny_sentences)
    done = {}
    while batch.running:
        done.update(batch.step())
    want = translator.translate_batch(tiny_sentences, options)
    assert [done[i].text for i in range(len(tiny_sentences))] == [r.text for r in want]


def test_the_search_keeps_the_candidates_only_where_it_reranks(reranking_bundle, tiny_bundle):
    translator = Translator.from_dir(reranking_bundle)
    assert translator.n_best(TranslationOptions(beam_size=4)) == 4
    assert translator.n_best(TranslationOptions(beam_size=2)) == 2
    assert translator.n_best(TranslationOptions(beam_size=4, rerank=False)) == 1
    assert translator.n_best(TranslationOptions(beam_size=1)) == 1
    assert Translator.from_dir(tiny_bundle).reranker is None


@pytest.mark.parametrize("kind", ["toy_lm", "toy_ngram"])
def test_tuning_records_every_weight_and_keeps_a_gain_only(tiny_bundle, kind, request,
                                                           tmp_path):
    toy_lm = request.getfixturevalue(kind)
    bundle = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, bundle)
    pairs = [*toy_pairs(24, seed=8), ("", "")]  # a blank line translates to nothing
    (tmp_path / "dev.en").write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    (tmp_path / "dev.de").write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    entry = export_lm(toy_lm, bundle, [str(tmp_path / "dev")])
    tuning = entry["tuning"]
    assert tuning["sentences"] == 25 and set(tuning["bleu"]) == {str(w) for w in WEIGHTS}
    best = max(WEIGHTS, key=lambda w: (tuning["bleu"][str(w)], -w))
    gained = tuning["bleu"][str(best)] >= tuning["bleu"]["0.0"] + tuning["min_gain"]
    assert entry["weight"] == (best if gained else 0.0)
    saved = json.loads((bundle / "manifest.json").read_text())["rerank"]
    assert saved["weight"] == entry["weight"] and saved["tuning"] == tuning
    assert (Translator.from_dir(bundle).reranker is None) == (entry["weight"] == 0.0)


def test_a_language_model_of_other_pieces_is_refused(tiny_bundle, toy_lm, tmp_path):
    state = torch.load(toy_lm, weights_only=False)
    shipped = Path(__file__).parents[2] / "bundles" / "en-de" / "sentencepiece.model"
    state["tokenizer"] = shipped.read_bytes()
    other = tmp_path / "other.pt"
    torch.save(state, other)
    bundle = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, bundle)
    with pytest.raises(SystemExit, match="reads another tokenizer"):
        export_lm(other, bundle, [], weight=0.3)
    (tmp_path / "train.de").write_text("Das ist ein Satz.\n", encoding="utf-8")
    build_file(str(tmp_path / "train"), "de", shipped, tmp_path / "other.bin", order=2)
    with pytest.raises(SystemExit, match="counted the pieces of another tokenizer"):
        export_lm(tmp_path / "other.bin", bundle, [], weight=0.3)
    assert not list(bundle.glob("lm.*"))


@pytest.mark.parametrize("change, message", [
    ({"weight": -1}, "'rerank.weight' must be a number >= 0"),
    ({"candidates": 1}, "'rerank.candidates' must be an integer >= 2"),
    ({"language_model": {"file": "../lm.onnx", "sha256": "0"}}, "a path inside the bundle"),
])
def test_a_wrong_entry_is_refused(reranking_bundle, change, message):
    path = reranking_bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["rerank"].update(change)
    path.write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=message):
        load_bundle(reranking_bundle)


def test_a_missing_or_changed_file_is_refused(reranking_bundle):
    (lm,) = reranking_bundle.glob("lm.*")
    lm.write_bytes(lm.read_bytes()[:-1])
    with pytest.raises(BundleError, match="sha256 mismatch"):
        load_bundle(reranking_bundle)
    lm.unlink()
    with pytest.raises(BundleError, match="is missing"):
        load_bundle(reranking_bundle)


def test_bench_rerank_times_and_scores_both(reranking_bundle, tmp_path, capsys):
    from bench.rerank import main

    pairs = toy_pairs(12, seed=9)
    (tmp_path / "test.en").write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")
    assert main(["--bundle", str(reranking_bundle), "--data", str(tmp_path / "test"),
                 "--single", "3", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "12 sentences" in out and "round 2/2" in out
    rows = [line for line in out.splitlines() if line.startswith("| with")]
    assert len(rows) == 2 and "throughput with/without" in out


def test_worker_processes_rerank_as_this_process_does(reranking_bundle, tiny_sentences):
    translator = Translator.from_dir(reranking_bundle, variant="fp32", workers=2,
                                     worker_processes=True)
    try:
        translator.worker_processes.start(2)
        options = TranslationOptions(beam_size=4, num_alternatives=1)
        texts = {i: text for i, text in enumerate(tiny_sentences)}
        found: dict = {}
        for beside, out in ((True, found), (False, expected := {})):
            batch = translator.start_batch(options, beside=beside)
            assert type(batch).__name__ == ("ProcessBatch" if beside else "RunningBatch")
            try:
                batch.admit(list(texts), list(texts.values()))
                while batch.running:
                    out.update(batch.step())
            finally:
                batch.close()
        assert found == expected
        plain = translator.translate_batch(tiny_sentences, TranslationOptions(
            beam_size=4, num_alternatives=1, rerank=False))
        assert [found[i].text for i in texts] != [r.text for r in plain]  # it did rerank
    finally:
        translator.close()


def test_the_service_reranks_and_says_so(reranking_bundle, tiny_sentences, tmp_path):
    import httpx

    from app.http.app import create_app
    from tests.app.conftest import real_settings
    from tests.app.fakes import running

    translator = Translator.from_dir(reranking_bundle)
    want = {flag: [r.text for r in translator.translate_batch(
        tiny_sentences, TranslationOptions(beam_size=4, rerank=flag))] for flag in (True, False)}
    assert want[True] != want[False]
    for server_reranks in (True, False):
        app = create_app(real_settings(reranking_bundle, files_dir=tmp_path / "files",
                                       rerank=server_reranks))
        with running(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
            (model,) = client.get("/v1/models").json()["models"]
            assert model["rerank"] == ({"weight": 5.0, "candidates": 4} if server_reranks
                                       else None)
            for flag in (True, False):
                r = client.post("/v1/translate", json={
                    "text": tiny_sentences, "source": "en", "target": "de",
                    "options": {"beam_size": 4, "rerank": flag}})
                got = [t["text"] for t in r.json()["translations"]]
                assert got == want[flag and server_reranks]
