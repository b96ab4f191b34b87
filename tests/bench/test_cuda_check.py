"""bench.cuda_check's CPU fallback on the tiny model: every part runs for real (our engine in fp32
and fp16, CTranslate2 int8 where installed, the service), the report says no GPU was used, the
JSON and the Markdown table have their shapes, and the parity figures are measured ones (fp32 on
the CPU against fp32 on the CPU agrees on every sentence; a changed output is counted)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from bench import cuda_check, cuda_prepare
from bench.backends import Output

HAVE_CT2 = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "ctranslate2"))


@pytest.fixture(scope="module")
def carry(tiny_checkpoint, tiny_bundle, tmp_path_factory):
    """A carried folder as --prepare writes it (without wheels): test sentences with
    references, the fp16 bundle, and a CTranslate2 model where the bench extra is installed."""
    from export.bundle import write_bundle
    from tests.conftest import toy_pairs

    root = tmp_path_factory.mktemp("carry")
    pairs = toy_pairs(12, seed=5)
    (root / "test.en").write_text("\n".join(en for en, _ in pairs) + "\n", encoding="utf-8")
    (root / "test.de").write_text("\n".join(de for _, de in pairs) + "\n", encoding="utf-8")
    write_bundle(tiny_checkpoint, root / "bundle-fp16", variants=("fp16",), name="en-de")
    if HAVE_CT2:
        cuda_prepare.make_ct2_model(tiny_bundle, root / "ct2-model", "int8")
    return root


@pytest.mark.slow
def test_cpu_fallback_runs_every_part_and_says_no_gpu_was_used(carry, tiny_bundle, tmp_path):
    out = tmp_path / "out"
    code = cuda_check.main([
        "--out", str(out), "--provider", "cpu", "--bundle", str(tiny_bundle),
        "--carry", str(carry), "--batches", "4,8", "--latency-sentences", "2", "--clients", "2",
        "--service-seconds", "1", "--threads", "1"])
    report = json.loads((out / "cuda_check.json").read_text())
    table = (out / "cuda_check.md").read_text()
    parts = report["parts"]
    assert code == 0, {k: v.get("error") for k, v in parts.items()}
    assert report["gpu_used"] is False and report["headline"].startswith("NO GPU WAS USED")
    assert table.startswith("# CUDA check: NO GPU WAS USED") and "--provider cpu" in table
    assert set(parts) == set(cuda_check.PARTS) and all(p["ok"] for p in parts.values())
    assert parts["environment"]["provider"] == "cpu" and not parts["environment"]["gpu_used"]

    rows = {(r["variant"], r["beam"]): r for r in parts["parity"]["rows"]}
    assert set(rows) == {(v, b) for v in ("fp32", "fp16") for b in (1, 4)}
    for beam in (1, 4):  # the same engine twice on the CPU: every sentence alike
        assert rows["fp32", beam]["identical_to_cpu_fp32"] == 1.0
        assert rows["fp32", beam]["sentences"] == report["sentences"] == 12
        assert rows["fp32", beam]["bleu"] == rows["fp32", beam]["cpu_fp32_bleu"] is not None
        assert 0.0 <= rows["fp16", beam]["identical_to_fp32"] <= 1.0
        assert rows["fp16", beam]["bleu_minus_fp32"] == pytest.approx(
            rows["fp16", beam]["bleu"] - rows["fp32", beam]["bleu"], abs=0.011)
    assert parts["parity"]["differences"]["fp32 beam 1"] == []

    localized = parts["localize"]  # the plain sessions on the CPU against the CPU: no gap
    assert localized["harness_matches_cpu_engine"] is True
    assert {(r["variant"], r["setting"]) for r in localized["rows"]} == {
        (v, s) for v in ("fp32", "fp16") for s in cuda_check.LOCALIZE_SETTINGS}
    for r in localized["rows"]:
        if r["variant"] == "fp32":
            assert r["encoder_max_diff"] == 0.0 and r["step_top1_agreement"] == [1.0, 1.0]
        assert r["src_mask_equal"] and len(r["step_max_logprob_diff"]) == 2
    assert "| fp32 | fused attention off | 0.0 | 100.00%, 100.00% |" in table

    speed = parts["speed"]
    for engine in ("ort-fp32", "ort-fp16"):
        found = {(r["batch"], r["beam"]) for r in speed[engine]["throughput"]}
        assert found == {(b, k) for b in (4, 8) for k in (1, 4)}
        assert all(r["tokens"] > r["sentences"] and r["tokens_per_s"] > 0
                   for r in speed[engine]["throughput"])
        assert speed[engine]["latency"]["1"]["sentences"] == 2
        assert speed[engine]["memory_kind"] == "peak_rss" and speed[engine]["memory_mib"] > 0
    for r in speed["ort-fp32"]["throughput"]:  # each pass scored: the engine parity measured
        assert r["bleu"] == rows["fp32", r["beam"]]["bleu"]
    assert "| ort-fp16 | 8 |" in table

    for variant in ("fp32", "fp16"):  # profiled passes: the encoder's and decoder's sessions
        profiled = parts["profile"][variant]
        assert profiled["sessions"] >= 2 and [p["beam"] for p in profiled["passes"]] == [1, 4]
        assert all(0 < p["inside_runs_s"] < p["seconds"] for p in profiled["passes"])
        ops = {r["op"] for r in profiled["by_op"]}
        assert "MatMul" in ops and profiled["copies_seconds"] == 0  # the CPU copies nothing
        assert {r["provider"] for r in profiled["by_op"]} == {"CPUExecutionProvider"}
    assert f"Profile, ours fp16, batch {cuda_check.PROFILE_BATCH}" in table

    if HAVE_CT2:
        ct2 = parts["ctranslate2"]["ct2-int8"]  # on the CPU: int8 only
        assert len(ct2["throughput"]) == 4 and "| ct2-int8 | 4 |" in table
    else:
        assert "skipped" in parts["ctranslate2"]

    service = parts["service"]["rows"]
    assert [r["clients"] for r in service] == [2]
    assert service[0]["requests"] > 0 and service[0]["errors"] == 0
    assert parts["service"]["host_peak_rss_mib"] > 0 and "| service clients |" in table
    assert "CPUExecutionProvider" in parts["parity"]["provider_options"]


def test_agreement_counts_changed_outputs_and_shows_where_they_part():
    same = [Output("a b", [5, 6]), Output("c", [7])]
    changed = [Output("a x", [5, 9]), Output("c", [7])]
    assert cuda_check.agreement(same, same) == 1.0
    assert cuda_check.agreement(same, changed) == 0.5
    found = cuda_check.differences(["s0", "s1"], same, changed)
    assert found == [{"index": 0, "source": "s0", "position": 1, "cpu": "a b", "check": "a x"}]


def test_cuda_asked_for_but_absent_falls_back_and_says_why(tiny_bundle, tmp_path):
    """--provider auto on a machine whose onnxruntime has no CUDA provider: the CPU fallback,
    with the reason in the headline."""
    usable, reason = cuda_check.cuda_status()
    if usable:
        pytest.skip("this machine has a usable CUDA provider")
    (tmp_path / "s.en").write_text("the red car\n", encoding="utf-8")
    args = cuda_check.parse_args(["--out", str(tmp_path), "--bundle", str(tiny_bundle),
                                  "--src", str(tmp_path / "s.en")])
    cfg = cuda_check.config_from_args(args)
    assert cfg.provider == "cpu" and cfg.no_gpu_reason == reason
    assert reason in cuda_check.headline(cfg) and cfg.references is None
    assert cfg.batches == cuda_check.CPU_SIZES["batches"]


def test_prepare_cuts_the_payload_into_parts_that_join_back(tiny_bundle, carry, tmp_path):
    """bench.cuda_prepare without the network (no wheels): the sentences and the fp32 bundle,
    cut into parts of the size asked, with checksums, and the device calls that carry them (the
    last one runs the check); joined as bench/cuda_check.sh joins them, the tar gives the files
    back byte for byte."""
    import hashlib
    import io
    import tarfile

    dest = tmp_path / ".cuda"
    what = cuda_prepare.Preparation(sentences=5, bundle=True, wheels=False, part_mib=0.4)
    report = cuda_prepare.prepare(dest, tiny_bundle, carry / "test.en", carry / "test.de", what)
    parts = sorted(dest.glob("part-*"))
    assert [p.name for p in parts] == report["parts"] and len(parts) >= 2
    assert all(p.stat().st_size <= 0.4 * 2**20 for p in parts)
    sums = dict(reversed(line.split("  ")) for line in
                (dest / "parts.sha256").read_text().splitlines())
    assert sums == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in parts}
    calls = report["calls"]
    assert [c["command"].split()[-1] for c in calls] == ["stage"] * (len(parts) - 1) + ["run"]
    assert calls[-1]["carry"] == [f".cuda/{parts[-1].name}", ".cuda/parts.sha256"]
    out = tmp_path / "joined"
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as joined:
        joined.extractall(out, filter="data")
    assert (out / "test.en").read_text().splitlines() == \
        (carry / "test.en").read_text().splitlines()[:5]
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    for graph in ("encoder", "decoder"):
        name = manifest["variants"]["fp32"][graph]["file"]
        assert (out / "bundle" / name).read_bytes() == (tiny_bundle / name).read_bytes()
    assert not (out / "bundle" / manifest["variants"]["int8"]["encoder"]["file"]).exists()
    from app.engine.bundle import load_bundle

    assert load_bundle(out / "bundle", "fp32").variant == "fp32"  # loads and checks its sums


def test_the_copied_bundle_leaves_its_language_model_behind(tiny_bundle, tiny_checkpoint,
                                                            tmp_path):
    import shutil

    from app.engine.bundle import load_bundle
    from export.lm import export_lm
    from model.ngram import build_file

    bundle = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, bundle)
    (tmp_path / "train.de").write_text("Das ist ein Haus.\nDer Hund schläft.\n")
    build_file(str(tmp_path / "train"), "de", tiny_checkpoint.parent / "spm.model",
               tmp_path / "lm.ngram.bin", order=2)
    export_lm(tmp_path / "lm.ngram.bin", bundle, [], weight=0.5)
    out = cuda_prepare.copy_bundle(bundle, tmp_path / "copy")
    assert not (out / "lm.ngram.bin").exists()
    assert "rerank" not in json.loads((out / "manifest.json").read_text())
    assert load_bundle(out, "fp32").language_model_path is None  # loads and checks its sums


def test_a_part_past_its_budget_stops_and_keeps_what_it_measured(tiny_bundle):
    """The budget runs out while the first batch size is measured: its passes are kept, the
    latency and the next batch size are not run, and the result says where it stopped."""
    import time

    class Fake:  # one token per word
        layout = ""

        def translate(self, texts, beam):
            return [Output(t, [1] * len(t.split())) for t in texts]

    cfg = cuda_check.CheckConfig(provider="cpu", bundle=tiny_bundle, sources=("a b", "c"),
                                 batches=(4, 8), latency_sentences=1)
    budget, made = cuda_check.Budget(3600), []

    def make(batch):
        made.append(batch)
        budget.end = time.monotonic() - 1
        return Fake()

    found = cuda_check.speed(make, cfg, budget, "fake")
    assert made == [4] and found["latency"] == {}
    assert [(r["batch"], r["beam"], r["tokens"]) for r in found["throughput"]] == \
        [(4, 1, 5), (4, 4, 5)]  # 3 words + an EOS per sentence
    assert "before fake batch-1 latency" in found["stopped"]


@pytest.mark.parametrize("setting", ["no graph optimizations", "fused attention off"])
def test_the_engine_under_a_localize_setting_is_compared_with_the_cpu(carry, tiny_bundle,
                                                                      setting):
    """What localize runs on a GPU when a setting mends the plain sessions: the engine under
    that setting against the CPU engine (here both on the CPU: every sentence alike)."""
    cfg = cuda_check.config_from_args(cuda_check.parse_args([
        "--provider", "cpu", "--bundle", str(tiny_bundle), "--carry", str(carry),
        "--threads", "1"]))
    found = cuda_check._engine_under(cfg, setting, cuda_check.Budget(60))
    assert found["setting"] == setting and found["sentences"] == len(cfg.sources) == 12
    assert found["identical_to_cpu_fp32"] == 1.0 and found["bleu"] is not None


def test_node_by_node_names_the_first_node_whose_output_parts(tiny_bundle, monkeypatch):
    """localize's node-by-node comparison (run on a GPU when the plain sessions part from the
    CPU): every node output of both graphs compared; here the checked side is the CPU with
    one node's output changed, and that node, only it, is named."""
    import numpy as np

    import app.engine.sessions as sessions_module
    from app.engine import Translator

    cpu = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1)
    src = cpu.source_array(cpu.encode(["hello world", "a b c"]))
    reference = cuda_check._plain_run(cpu.sessions, "cpu", {}, src, cpu.start_id, None)
    same = cuda_check._node_by_node(cpu.sessions, "cpu", src, cpu.start_id, reference)
    assert same["encoder"]["nodes"] > 50 and same["decoder"]["nodes"] > 50
    assert same["encoder"]["parted"] == same["decoder"]["parted"] == 0

    import onnx

    decoder = onnx.load(str(cpu.sessions.decoder_path), load_external_data=False)
    changed = next(n for n in decoder.graph.node if n.op_type == "LayerNormalization")
    made, original = [], sessions_module.create_session

    class Changed:  # the second session of each graph (the "provider" side) is off at one node
        def __init__(self, session):
            self.session = session

        def get_outputs(self):
            return self.session.get_outputs()

        def run(self, names, feeds):
            out = self.session.run(names, feeds)
            at = [o.name for o in self.session.get_outputs()].index(changed.output[0])
            if at < len(out) and made[-1] == "decoder":
                out[at] = out[at] + np.abs(out[at]).max()
            return out

    def creating(path, config, *args, **kwargs):
        session = original(path, config, *args, **kwargs)
        graph = "decoder" if "top_ids" in [o.name for o in session.get_outputs()] else "encoder"
        made.append(graph)
        return Changed(session) if len([m for m in made if m == graph]) == 2 else session

    monkeypatch.setattr(sessions_module, "create_session", creating)
    found = cuda_check._node_by_node(cpu.sessions, "cpu", src, cpu.start_id, reference)
    assert found["encoder"]["parted"] == 0
    first = found["decoder"]["first"][0]
    assert (first["node"], first["op"], first["output"]) == (
        changed.name, "LayerNormalization", changed.output[0])
    assert found["decoder"]["parted"] == 1 and first["gap"] > 0


def test_missing_test_sentences_are_one_line_naming_the_file(tiny_bundle, tmp_path, capsys):
    """Without the corpus (a fresh clone has no data/), a clear message, not a traceback."""
    missing = tmp_path / "nowhere.en"
    code = cuda_check.main(["--out", str(tmp_path), "--bundle", str(tiny_bundle),
                            "--src", str(missing), "--provider", "cpu"])
    err = capsys.readouterr().err
    assert code == 2 and str(missing) in err and "--src" in err and "Traceback" not in err
