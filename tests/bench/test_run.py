"""bench.run, bench.backends and bench.common on the tiny model: every engine decodes by the same
rules (greedy ids identical to PyTorch for fp32), the roofline arithmetic, and one complete run
that prints the table and writes the JSON. The peers (CTranslate2, Transformers) take part when
the bench extra is installed; without it they are skipped, and the run says so."""

from __future__ import annotations

import importlib.util
import json
import shutil
import time
from pathlib import Path

import pytest

from bench import backends, common
from bench import run as bench_run

HAVE_PEERS = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "ctranslate2"))
needs_peers = pytest.mark.skipif(
    not HAVE_PEERS, reason="the bench extra (transformers, ctranslate2) is not installed"
)


@pytest.fixture(scope="module")
def sentences(tmp_path_factory):
    """Unseen toy sentences and their word-by-word references, as files."""
    from tests.conftest import toy_pairs

    pairs = toy_pairs(24, seed=11)
    root = tmp_path_factory.mktemp("sentences")
    (root / "test.en").write_text("\n".join(en for en, _ in pairs) + "\n", encoding="utf-8")
    (root / "test.de").write_text("\n".join(de for _, de in pairs) + "\n", encoding="utf-8")
    return root / "test.en", root / "test.de"


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    """texts -> model.search.greedy_search ids, with given length rules."""
    torch = pytest.importorskip("torch", reason="torch (the train extra) is not installed")
    from model.checkpoint import load_model
    from model.search import greedy_search

    torch.set_num_threads(1)
    model, tokenizer, _ = load_model(tiny_checkpoint)

    def run(texts, a=10, b=1.5):
        sources = tokenizer.encode_batch(texts)
        return greedy_search(model, sources, max_len_offset=a, max_len_ratio=b)

    return run


@pytest.fixture(scope="module")
def peer_dirs(tiny_checkpoint, tmp_path_factory):
    if not HAVE_PEERS:
        pytest.skip("the bench extra (transformers, ctranslate2) is not installed")
    from bench.convert import convert

    return convert(tiny_checkpoint, tmp_path_factory.mktemp("peers"))


def make(engine, tiny_bundle, peer_dirs=None, threads=1):
    spec = {"engine": engine, "threads": threads, "max_positions": 64, "bundle": str(tiny_bundle)}
    if engine.startswith("ct2-"):
        spec["model_dir"] = str(peer_dirs[engine])
    elif engine.startswith("hf-"):
        spec["model_dir"] = str(peer_dirs["hf"])
    return backends.make_backend(spec)


def texts_of(path):
    return common.read_lines(path)


def test_ort_backend_greedy_is_pytorch_greedy(tiny_bundle, sentences, reference):
    texts = texts_of(sentences[0])
    out = make("ort-fp32", tiny_bundle).translate(texts, beam=1)
    assert [o.tokens for o in out] == reference(texts)
    assert all(isinstance(o.text, str) for o in out)


@needs_peers
@pytest.mark.parametrize("engine", ["ct2-fp32", "hf-fp32"])
@pytest.mark.parametrize("a, b", [(10, 1.5), (1, 0.5)], ids=["default-limits", "tight-limits"])
def test_peer_backends_greedy_is_pytorch_greedy(
    engine, a, b, tiny_bundle, peer_dirs, sentences, reference, monkeypatch
):
    """Batched with one limit per batch (the largest), then cut to each sentence's own limit:
    for greedy search exactly the per-sentence rule, which the tight limits exercise."""
    monkeypatch.setattr(backends, "MAX_LEN_OFFSET", a)
    monkeypatch.setattr(backends, "MAX_LEN_RATIO", b)
    texts = texts_of(sentences[0])
    backend = make(engine, tiny_bundle, peer_dirs)
    backend.batch_size = 8
    assert [o.tokens for o in backend.translate(texts, beam=1)] == reference(texts, a, b)


@needs_peers
def test_ct2_backend_in_our_worker_layout(tiny_bundle, peer_dirs, sentences, reference):
    """With 2 threads CTranslate2 gets our engine's layout: 2 workers of one thread each,
    batches of 16 submitted together; the outputs stay PyTorch's greedy ones, in order."""
    texts = texts_of(sentences[0])
    backend = make("ct2-fp32", tiny_bundle, peer_dirs, threads=2)
    assert (backend.workers, backend.batch_size) == (2, 16)
    assert backend.translator.num_translators == 2
    backend.batch_size = 4  # several batches in flight at once
    assert [o.tokens for o in backend.translate(texts, beam=1)] == reference(texts)
    # its batch-1 latency is also timed on one worker with both threads
    assert backend.layout == "2 worker(s) x 1 thread(s)"
    single = backend.batch1_alternative()()
    assert (single.layout, single.translator.num_translators) == ("1 worker(s) x 2 thread(s)", 1)
    assert [single.translate([t], beam=1)[0].tokens for t in texts[:3]] == reference(texts[:3])


@needs_peers
@pytest.mark.parametrize("engine", ["ct2-int8", "hf-fp32", "ct2-fp32"])
def test_peer_backends_beam_search_respects_the_limit(engine, tiny_bundle, peer_dirs, sentences):
    backend = make(engine, tiny_bundle, peer_dirs)
    texts = texts_of(sentences[0])
    for text, out in zip(texts, backend.translate(texts, beam=4), strict=True):
        assert len(out.tokens) <= backend.limit(backend.encode([text])[0])
        assert out.text.strip()


def test_measure_reports_throughput_latency_and_rss(tiny_bundle, sentences):
    texts = texts_of(sentences[0])
    spec = {
        "engine": "ort-int8",
        "threads": 1,
        "max_positions": 64,
        "bundle": str(tiny_bundle),
        "texts": texts,
        "latency_texts": texts[:3],
        "beams": [1, 4],
    }
    result = backends.measure(spec)
    assert result["peak_rss_mb"] > 10
    for beam in ("1", "4"):
        s = result["searches"][beam]
        assert s["sentences"] == len(texts) and s["tokens"] >= len(texts)
        assert s["tokens_per_s"] > 0 and len(s["latency_s"]) == 3
        assert len(s["hypotheses"]) == len(texts)
    assert len(result["searches"]["1"]["tokens_out"]) == len(texts)


class _Sleepy(backends.Backend):
    """A backend whose single-sentence calls take `pause` seconds; its alternative layout
    (if any) takes `quicker` seconds."""

    def __init__(self, pause: float, quicker: float | None) -> None:
        self.pause, self.quicker, self.batch_size = pause, quicker, 32
        self.built: list[str] = []

    @property
    def layout(self) -> str:
        return f"{self.pause}s"

    def translate(self, texts, beam):
        if len(texts) == 1:
            time.sleep(self.pause)
        return [backends.Output(text, [1, 2]) for text in texts]

    def batch1_alternative(self):
        if self.quicker is None:
            return None
        return lambda: _Sleepy(self.quicker, None)


@pytest.mark.parametrize(("quicker", "kept"), [(0.001, "0.001s"), (0.02, "0.01s"), (None, "0.01s")])
def test_measure_keeps_the_quicker_batch1_layout(monkeypatch, quicker, kept):
    monkeypatch.setattr(backends, "make_backend", lambda spec: _Sleepy(0.01, quicker))
    spec = {"engine": "x", "texts": ["a b", "c"], "latency_texts": ["a b", "c", "d"],
            "beams": [1, 4]}
    result = backends.measure(spec)
    for beam in ("1", "4"):
        search = result["searches"][beam]
        assert search["latency_layout"] == kept and len(search["latency_s"]) == 3
        assert search["tokens"] == 2 * 3  # throughput: the first layout's outputs


def test_decoder_step_bytes_by_hand():
    arch = {"d_model": 4, "d_ff": 8, "vocab_size": 10, "n_decoder_layers": 2}
    # per layer: 6 (4x4) projections + (4x8) + (8x4) = 160 weights; biases 6*4 + 8 + 4 = 36;
    # three LayerNorms 24 -> 60 vectors; output projection 10 x 4 = 40
    step = common.decoder_step_bytes(arch)
    assert step["parameters"] == 2 * (160 + 60) + 40
    assert step["fp32"] == 4 * step["parameters"]
    # int8: weights 1 byte + one fp32 scale per output channel (6*4 + 8 + 4 = 36), vectors fp32;
    # projection 40 bytes + 10 scales
    assert step["int8"] == 2 * (160 + 4 * 36 + 4 * 60) + 40 + 4 * 10


def test_roofline_bounds_follow_bandwidth():
    arch = {"d_model": 32, "d_ff": 64, "vocab_size": 80, "n_decoder_layers": 2}
    roof = common.roofline(arch, threads=1)
    assert roof["dram_copy_gb_s"] > 0 and roof["cache_copy_gb_s"] > 0
    expected = roof["dram_copy_gb_s"] * 1e9 / roof["step_bytes"]["fp32"]
    assert roof["fp32_dram_steps_per_s"] == pytest.approx(expected)
    assert roof["int8_dram_steps_per_s"] > roof["fp32_dram_steps_per_s"]


def test_percentile_and_pairs(tmp_path):
    assert common.percentile([1, 2, 3, 4], 50) == 2.5
    assert common.percentile(list(range(101)), 99) == 99
    src, ref = tmp_path / "a", tmp_path / "b"
    src.write_text("one\n\nthree\n")
    ref.write_text("eins\nzwei\ndrei\n")
    assert common.read_pairs(src, ref, None) == (["one", "three"], ["eins", "drei"])
    ref.write_text("eins\n")
    with pytest.raises(ValueError, match="lines"):
        common.read_pairs(src, ref, None)


def test_missing_peers_are_skipped_with_a_reason(monkeypatch):
    assert set(bench_run.peers_available(None)) == {"ct2-fp32", "ct2-int8", "hf-fp32"}
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "ctranslate2" else real(name)
    )
    skipped = bench_run.peers_available(Path("ckpt.pt"))
    assert "ctranslate2 not installed" in skipped["ct2-int8"]
    assert "hf-fp32" not in skipped or "transformers" in skipped["hf-fp32"]


def test_a_checkpoint_of_other_weights_is_refused(tiny_bundle, tiny_checkpoint, tmp_path):
    torch = pytest.importorskip("torch", reason="torch (the train extra) is not installed")
    from app.engine.bundle import read_manifest

    manifest = read_manifest(tiny_bundle)
    bench_run.check_same_weights(tiny_checkpoint, tiny_bundle, manifest)  # its own: accepted
    state = torch.load(tiny_checkpoint, map_location="cpu", weights_only=False)
    name = "encoder_layers.0.feed_forward.w_1.weight"
    state["model"][name] = state["model"][name] + 1e-3  # another model, one tensor apart
    other = tmp_path / "other.pt"
    torch.save(state, other)
    with pytest.raises(SystemExit, match="1 of .* encoder tensors differ.*export.unbundle"):
        bench_run.check_same_weights(other, tiny_bundle, manifest)


@pytest.mark.slow
@pytest.mark.timeout(900)  # five engine processes and a server; slow on a busy machine
def test_run_prints_the_table_and_writes_json(
    tiny_bundle, tiny_checkpoint, sentences, tmp_path, capsys
):
    engines = ["ort-fp32", "ort-int8", "ct2-fp32", "ct2-int8", "hf-fp32"]
    out = tmp_path / "bench.json"
    # a bundle whose engine capitalises the (all lower-case) toy sentences: the peers and the
    # PyTorch reference must be given them as the engine reads them
    bundle = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "capitalize_lowercase": True}))
    code = bench_run.main(
        [
            "--bundle",
            str(bundle),
            "--checkpoint",
            str(tiny_checkpoint),
            "--sentences",
            str(sentences[0]),
            "--refs",
            str(sentences[1]),
            "--limit",
            "12",
            "--latency-limit",
            "3",
            "--threads",
            "1",
            "--repeat",
            "1",
            "--engines",
            ",".join(engines),
            "--service-seconds",
            "0.5",
            "--service-requests",
            "20",
            "--memory-seconds",  # bench.service_memory has tests of its own
            "0",
            "--json",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    data = json.loads(out.read_text())
    ran = {r["engine"]: r for r in data["engines"]}
    assert all("error" not in r for r in ran.values()), ran
    # Transformers alone (the dev extra has it) runs hf-fp32; CTranslate2 needs the bench extra.
    expected = [e for e in engines if e not in bench_run.peers_available(tiny_checkpoint)]
    assert (len(expected) == len(engines)) == HAVE_PEERS
    assert sorted(ran) == sorted(expected)
    assert sorted(data["skipped"]) == sorted(set(engines) - set(expected))
    for name in ("ort-fp32", "ct2-fp32", "hf-fp32"):
        if name in ran:  # fp32 greedy: token ids identical to PyTorch on every sentence
            assert ran[name]["searches"]["1"]["greedy_identical"] == 12
    for r in ran.values():
        for s in r["searches"].values():
            assert s["bleu"] >= 0 and s["chrf"] > 0 and s["latency_ms"]["p99"] > 0
    levels = data["service"]["levels"]
    assert [row["clients"] for row in levels] == [1, 8, 32, 64]
    assert all(row["errors"] == 0 and row["requests"] > 0 for row in levels)
    assert data["roofline"]["step_bytes"]["fp32"] > data["roofline"]["step_bytes"]["int8"]
    assert "| ort-fp32 |" in printed and "Roofline" in printed and "| 64 |" in printed
    served = data["service"]["variant"]  # its share of that variant's offline beam rate
    offline = ran[f"ort-{served}"]["searches"]["4"]["sentences_per_s"]
    row = next(r for r in levels if r["clients"] == 32)
    assert f"{100 * row['requests_per_s'] / offline:.0f} % of {offline:.1f}" in printed
    for row in levels:  # the busiest levels also against offline passes just before and after
        assert (row["offline_per_s"] is not None) == (row["clients"] in (32, 64))
    beside = row["offline_per_s"]
    assert f"{100 * row['requests_per_s'] / beside:.0f} % of {beside:.1f} beside it" in printed
    if HAVE_PEERS:
        assert "vs ct2-int8" in printed and "| ct2-int8 |" in printed
        pair = data["paired"]  # ort-int8 against ct2-int8, pass by pass
        assert (pair["a"], pair["b"]) == ("ort-int8", "ct2-int8") and "error" not in pair
        assert len(pair["searches"]["1"]["ratios"]) == 6
        assert "ort-int8 against ct2-int8 in alternation" in printed
    else:
        assert data["paired"] is None
        assert "skipped:" in printed and "ct2-int8" in printed


def _raw_search(tokens_per_s: float, latency_s: list[float]) -> dict:
    return {"sentences": 2, "passes_s": [1.0], "tokens": int(tokens_per_s), "seconds": 1.0,
            "tokens_per_s": tokens_per_s, "sentences_per_s": 2.0, "latency_s": latency_s,
            "latency_tokens": 10, "hypotheses": ["ein hund", "eine katze"],
            "tokens_out": [[5, 6], [7, 8]]}


def test_results_are_typed_records_with_one_json_shape():
    refs = ["ein hund", "eine katze"]
    base = bench_run.EngineResult("ct2-int8", searches={
        "1": bench_run.SearchResult.from_worker(
            {**_raw_search(200.0, [0.01, 0.01]), "latency_layout": "1 worker(s) x 2 thread(s)"},
            refs, None),
        "4": bench_run.SearchResult.from_worker(
            {**_raw_search(100.0, [0.02]), "latency_layout": "2 worker(s) x 1 thread(s)"},
            refs, None),
    }, peak_rss_mb=50.0)
    ours = bench_run.EngineResult("ort-fp32", searches={
        "1": bench_run.SearchResult.from_worker(_raw_search(100.0, [0.02, 0.03]), refs,
                                                [[5, 6], [7, 9]]),
        "4": bench_run.SearchResult.from_worker(_raw_search(50.0, [0.04]), refs, None),
    }, peak_rss_mb=80.0)
    assert ours.greedy.greedy_identical == 1 and ours.greedy.chrf == pytest.approx(100.0)
    assert ours.greedy.batch1_steps_per_s == pytest.approx(10 / 0.05)
    failed = bench_run.EngineResult("hf-fp32", error="exit 1: boom")
    settings = bench_run.RunSettings("b", None, "s", 2, 2, 1, [1, 4], 1, 32, "10 + 1.5 x source",
                                     1.0, {})
    roof = {"step_bytes": {"fp32": 2**20, "int8": 2**19, "parameters": 1e6}, "threads": 1,
            "dram_copy_gb_s": 1.0, "cache_copy_gb_s": 2.0, "fp32_dram_steps_per_s": 1000.0,
            "int8_dram_steps_per_s": 2000.0, "fp32_cache_steps_per_s": 2000.0,
            "int8_cache_steps_per_s": 4000.0}
    run = bench_run.BenchRun({"cpu": "x"}, settings, [base, ours, failed], {}, None, roof)
    text = bench_run.report(run)
    assert "| ort-fp32 | 100 | 50 |" in text and "0.50x, 0.50x" in text  # against ct2-int8
    assert "| hf-fp32 | failed: exit 1: boom |" in text and "| ort-fp32 | 200 | 20.0% |" in text
    assert ("ct2-int8 greedy on 1 worker(s) x 2 thread(s), beam 4 on 2 worker(s) x 1 thread(s)"
            in text)
    data = json.loads(json.dumps(run.to_json()))
    engines = {r["engine"]: r for r in data["engines"]}
    assert engines["hf-fp32"] == {"engine": "hf-fp32", "error": "exit 1: boom"}
    assert "error" not in engines["ort-fp32"]
    assert engines["ort-fp32"]["searches"]["1"]["greedy_identical"] == 1


def test_rounds_keep_each_engines_fastest_throughput_and_lowest_p50():
    refs = ["ein hund", "eine katze"]

    def result(greedy_tok_s: float, greedy_latency: float, rss: float) -> bench_run.EngineResult:
        return bench_run.EngineResult("ort-int8", peak_rss_mb=rss, searches={
            "1": bench_run.SearchResult.from_worker(
                _raw_search(greedy_tok_s, [greedy_latency] * 3), refs, None),
            "4": bench_run.SearchResult.from_worker(_raw_search(50.0, [0.04]), refs, None),
        })

    slow_but_quick = result(100.0, 0.01, 80.0)
    fast_but_slow = result(300.0, 0.05, 90.0)
    best = bench_run.best_of([slow_but_quick, fast_but_slow,
                              bench_run.EngineResult("ort-int8", error="exit 1")])
    assert best.greedy.tokens_per_s == 300.0 and best.greedy.latency_ms["p50"] == 10.0
    assert best.peak_rss_mb == 90.0 and best.greedy.passes_s == [1.0, 1.0]
    assert bench_run.best_of([slow_but_quick]) is slow_but_quick


def test_fp32_translations_do_not_depend_on_their_batch_mates(tiny_bundle, sentences):
    from app.engine import Translator
    from bench.batch_invariance import differences

    texts = texts_of(sentences[0])
    translator = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1,
                                     max_batch_size=len(texts), workers=1)
    assert len(texts) >= 8 and differences(translator, texts) == 0


def test_worker_env_leaves_ctranslate2_its_own_thread_counts(monkeypatch):
    """CTranslate2 sizes its thread pools per worker (intra_threads): its workers get no
    OMP_NUM_THREADS / MKL_NUM_THREADS, not even inherited ones, which on Intel MKL would override
    intra_threads; the other engines get the bench's thread count."""
    monkeypatch.setenv("MKL_NUM_THREADS", "7")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    ct2 = common.worker_env(2, "ct2-int8")
    assert "MKL_NUM_THREADS" not in ct2 and "OMP_NUM_THREADS" not in ct2
    for engine in ("ort-int8", "hf-fp32"):
        env = common.worker_env(2, engine)
        assert env["MKL_NUM_THREADS"] == env["OMP_NUM_THREADS"] == "2"
    assert ct2["TOKENIZERS_PARALLELISM"] == "false"
