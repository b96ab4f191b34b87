"""The exported graphs reproduce the PyTorch model; the bundle holds what the manifest says."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from app.engine import TranslationOptions, Translator
from app.engine.bundle import load_bundle, sha256_file
from export import evaluate, tie
from export.__main__ import main as export_main
from export.bundle import HURRIED, write_bundle
from export.unbundle import main as unbundle_main
from export.verify import main as verify_main
from model.checkpoint import load_model, read_checkpoint
from model.config import ModelConfig
from model.transformer import Transformer


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    return load_model(tiny_checkpoint)[0]


def sessions(bundle, variant="fp32"):
    b = load_bundle(bundle, variant)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return (
        ort.InferenceSession(str(b.encoder_path), options, providers=["CPUExecutionProvider"]),
        ort.InferenceSession(str(b.decoder_path), options, providers=["CPUExecutionProvider"]),
    )


def random_batch(model, batch, length, seed=0):
    """(B, S) source ids ending in EOS, with rows of different lengths padded."""
    gen = torch.Generator().manual_seed(seed)
    c = model.config
    src = torch.randint(4, c.vocab_size, (batch, length), generator=gen)
    for row in range(batch):
        n = length - row % 3  # rows 1, 2 shorter: padded
        src[row, n - 1] = c.eos_id
        src[row, n:] = c.pad_id
    return src


@torch.no_grad()
def test_encoder_matches_pytorch_on_new_batch_and_length(model, tiny_bundle):
    encoder, _ = sessions(tiny_bundle)
    src = random_batch(model, batch=3, length=9)  # not the export's example shapes
    cross_k, cross_v, mask = encoder.run(None, {"src_ids": src.numpy()})
    memory, ref_mask = model.encode(src)
    ref = model.cross_kv(memory)
    c = model.config
    assert cross_k.shape == (c.n_decoder_layers, 3, c.n_heads, 9, c.head_dim)
    for layer, (k, v) in enumerate(ref):
        np.testing.assert_allclose(cross_k[layer], k.numpy(), atol=1e-5)
        np.testing.assert_allclose(cross_v[layer], v.numpy(), atol=1e-5)
    np.testing.assert_array_equal(mask, ref_mask[:, 0, 0].numpy())


@torch.no_grad()
def test_decoder_steps_match_pytorch_with_rows_at_different_positions(model, tiny_bundle):
    """The step graph over 2 sentences x 2 rows each, every row with its own target prefix and
    rows starting at different steps (so past lengths differ within a step): each row's full
    log-probs equal PyTorch's teacher-forced ones at that position, and the cache is written in
    place (nothing but the bound buffers changes)."""
    from app.engine.sessions import Seq2SeqSessions, SessionConfig
    from app.engine.step import DecodeState

    b = load_bundle(tiny_bundle, "fp32")
    c = model.config
    s = Seq2SeqSessions(b.encoder_path, b.decoder_path, SessionConfig(intra_op_threads=1),
                        c.n_decoder_layers)
    src = random_batch(model, batch=2, length=7, seed=1)
    state = DecodeState.start(*s.encode(src.numpy()), rows_per_sentence=2, max_len=8)
    buffers = [buf.ctypes.data for buf in state.keys + state.values]
    gen = torch.Generator().manual_seed(2)
    targets = torch.cat([torch.full((4, 1), c.bos_id),
                         torch.randint(4, c.vocab_size, (4, 5), generator=gen)], dim=1)  # (R, 6)
    memory, src_mask = model.encode(src.repeat_interleave(2, dim=0))  # row r: sentence r // 2
    logits, _ = model.decode_step(targets, torch.arange(6).expand(4, 6), model.cross_kv(memory),
                                  src_mask)
    ref = torch.log_softmax(logits, dim=-1).numpy()  # (R, 6, V)
    start = np.array([0, 2, 1, 0])  # the step at which each row begins
    for step in range(6):
        past = np.clip(step - start, 0, None)  # rows not begun yet re-decode position 0
        tokens = targets[np.arange(4), past].numpy()
        top, ids = s.step(state, tokens, past, past.astype(np.int32), c.vocab_size)
        full = np.empty_like(top)
        np.put_along_axis(full, ids, top, axis=1)  # back to vocabulary order
        for row in range(4):
            np.testing.assert_allclose(full[row], ref[row, past[row]], atol=1e-4)
        assert (np.diff(top, axis=1) <= 0).all()  # best first
    assert [buf.ctypes.data for buf in state.keys + state.values] == buffers


def test_bundle_contents(tiny_bundle, tiny_checkpoint):
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    state = read_checkpoint(tiny_checkpoint)
    config = ModelConfig.from_dict(state["config"])
    assert manifest["format_version"] == 3
    assert (manifest["name"], manifest["source_lang"], manifest["target_lang"]) == (
        "en-de",
        "en",
        "de",
    )
    arch = manifest["architecture"]
    assert arch["d_model"] == config.d_model and arch["n_heads"] == config.n_heads
    assert arch["head_dim"] == config.head_dim and arch["vocab_size"] == config.vocab_size
    assert manifest["special_tokens"] == {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
    assert manifest["scores"] == {}
    assert manifest["training"] == state["recipe"]
    assert set(manifest["variants"]) == {"fp32", "int8"}
    assert (tiny_bundle / "sentencepiece.model").read_bytes() == state["tokenizer"]
    for entry in manifest["variants"].values():
        for graph in ("encoder", "decoder"):
            assert sha256_file(tiny_bundle / entry[graph]["file"]) == entry[graph]["sha256"]
    card = (tiny_bundle / "MODEL_CARD.md").read_text()
    assert "en-de" in card and "fp32" in card and "int8" in card


def test_int8_graphs_are_quantized(tiny_bundle):
    for graph in ("encoder", "decoder"):
        ops = {n.op_type for n in onnx.load(str(tiny_bundle / f"{graph}.int8.onnx")).graph.node}
        assert "MatMulInteger" in ops or "DynamicQuantizeMatMul" in ops
        fp32_ops = {
            n.op_type for n in onnx.load(str(tiny_bundle / f"{graph}.fp32.onnx")).graph.node
        }
        assert "MatMulInteger" not in fp32_ops


def int8_weights(path) -> list[np.ndarray]:
    """The int8 weight matrices of a quantized graph."""
    return [onnx.numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
            if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 2]


def test_int8_weights_use_seven_bits(tiny_bundle):
    """Full-range int8 weights saturate ONNX Runtime's 16-bit pair sums on CPUs without VNNI."""
    manifest = json.loads((tiny_bundle / "manifest.json").read_text())
    assert manifest["variants"]["int8"]["quantization"]["weight_bits"] == 7
    for graph in ("decoder", "encoder"):
        weights = int8_weights(tiny_bundle / f"{graph}.int8.onnx")
        assert weights, graph
        # 2 x 255 x 64 fits the kernels' 16-bit pair sums; 2 x 255 x 127 does not
        assert max(int(np.abs(w.astype(np.int32)).max()) for w in weights) == 64


def test_fp16_variant_converts_and_agrees(tiny_checkpoint, tiny_bundle, tiny_sentences, tmp_path):
    out = write_bundle(tiny_checkpoint, tmp_path / "b16", variants=("fp16",), name="en-de")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["default_variant"] == "fp16"
    assert manifest["variants"]["fp16"]["providers"] == ["cuda"]
    decoder = onnx.load(str(out / "decoder.fp16.onnx"))
    types = {i.name: i.type.tensor_type.elem_type for i in decoder.graph.output}
    assert types["top_log_probs"] == onnx.TensorProto.FLOAT
    assert types["cache_k_0_out"] == onnx.TensorProto.FLOAT16
    # Meant for CUDA, but ONNX Runtime's CPU provider runs it too: outputs mostly agree with fp32
    # (half precision may flip a near tie).
    fp16 = Translator.from_dir(out, variant="fp16", intra_threads=1)
    fp32 = Translator.from_dir(tiny_bundle, variant="fp32", intra_threads=1)
    assert fp16.sessions.kv_dtype == np.float16
    for options in (TranslationOptions(beam_size=1), TranslationOptions(beam_size=4)):
        got = [r.text for r in fp16.translate_batch(tiny_sentences, options)]
        ref = [r.text for r in fp32.translate_batch(tiny_sentences, options)]
        assert sum(a == b for a, b in zip(got, ref, strict=True)) >= 0.75 * len(ref)


def test_cli_exports_and_verifies(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "bundles" / "en-de"
    args = ["--checkpoint", str(tiny_checkpoint), "--out", str(out), "--variants", "fp32,int8"]
    args += ["--threads", "1", "--capitalize-lowercase"]
    assert export_main(args) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["capitalize_lowercase"] is True  # and the card says so
    assert "capitalised before it is translated" in (out / "MODEL_CARD.md").read_text()
    fp32 = manifest["variants"]["fp32"]["verification"]
    assert fp32["greedy_agreement"] == 1.0 and fp32["beam_agreement"] == 1.0
    assert fp32["max_abs_logprob_diff"] <= 1e-3
    assert 0.0 <= manifest["variants"]["int8"]["verification"]["greedy_agreement"] <= 1.0
    assert "parity check passed" in capsys.readouterr().out


def test_a_checkpoint_bundle_or_file_that_is_not_there_is_named_without_a_traceback(
    tiny_checkpoint, tiny_bundle, tmp_path, capsys
):
    out = tmp_path / "en-de"
    assert export_main(["--checkpoint", str(tmp_path / "nope.pt"), "--out", str(out)]) == 1
    assert "nope.pt" in capsys.readouterr().err and not out.exists()
    assert export_main(["--checkpoint", str(tiny_checkpoint), "--out", str(out),
                        "--sentences", str(tmp_path / "nope.en")]) == 1
    assert "nope.en" in capsys.readouterr().err and not out.exists()
    assert export_main(["--checkpoint", str(tiny_checkpoint), "--out", str(out),
                        "--variants", "int4"]) == 1
    assert "unknown variants ['int4']" in capsys.readouterr().err
    check = ["--checkpoint", str(tiny_checkpoint), "--threads", "1"]
    assert verify_main([str(tmp_path / "nope"), *check]) == 1
    assert "not a bundle directory" in capsys.readouterr().err
    assert verify_main([str(tmp_path), *check]) == 1
    assert "missing manifest" in capsys.readouterr().err
    assert verify_main([str(tiny_bundle), "--checkpoint", str(tmp_path / "nope.pt")]) == 1
    assert "nope.pt" in capsys.readouterr().err
    assert evaluate.main([str(tmp_path / "nope"), "--data", str(tmp_path / "test")]) == 1
    assert "not a bundle directory" in capsys.readouterr().err
    assert evaluate.main([str(tiny_bundle), "--data", str(tmp_path / "nope")]) == 1
    assert "nope.en" in capsys.readouterr().err
    assert evaluate.main([str(tiny_bundle), "--data", str(tmp_path), "--variants", "fp16"]) == 1
    assert "has no variant fp16" in capsys.readouterr().err


def test_verify_fails_on_a_graph_from_other_weights(tiny_checkpoint, tiny_bundle, tmp_path):
    """A bundle whose fp32 decoder comes from different weights (checksums re-done, so it
    loads) must fail the parity check with a non-zero exit."""
    bad = tmp_path / "bad"
    shutil.copytree(tiny_bundle, bad)
    state = read_checkpoint(tiny_checkpoint)
    torch.manual_seed(123)
    other = Transformer(ModelConfig.from_dict(state["config"]))
    other_ckpt = tmp_path / "other.pt"
    torch.save({**state, "model": other.state_dict()}, other_ckpt)
    other_bundle = write_bundle(other_ckpt, tmp_path / "other", variants=("fp32",), name="en-de")
    shutil.copyfile(other_bundle / "decoder.fp32.onnx", bad / "decoder.fp32.onnx")
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["variants"]["fp32"]["decoder"]["sha256"] = sha256_file(bad / "decoder.fp32.onnx")
    (bad / "manifest.json").write_text(json.dumps(manifest))
    assert verify_main([str(bad), "--checkpoint", str(tiny_checkpoint), "--threads", "1"]) == 1
    good = [str(tiny_bundle), "--checkpoint", str(tiny_checkpoint), "--threads", "1"]
    assert verify_main(good) == 0


def test_unbundle_rebuilds_the_checkpoint_weights_exactly(tiny_checkpoint, tiny_bundle, tmp_path):
    out = tmp_path / "rebuilt.pt"
    assert unbundle_main([str(tiny_bundle), "--out", str(out)]) == 0
    original, rebuilt = read_checkpoint(tiny_checkpoint), read_checkpoint(out)
    # The bundle does not record dropout (a training setting): the recipe's, else the default.
    assert {**rebuilt["config"], "dropout": 0.0} == {**original["config"], "dropout": 0.0}
    assert rebuilt["tokenizer"] == original["tokenizer"]
    assert rebuilt["model"].keys() == original["model"].keys()
    for name, tensor in original["model"].items():
        assert torch.equal(rebuilt["model"][name], tensor), name
    assert rebuilt.get("step") == original.get("step")
    assert rebuilt["recovered_from"]["checkpoint_sha256"] == sha256_file(tiny_checkpoint)


def test_unbundle_reads_an_embedding_stored_once(tiny_checkpoint, tiny_bundle, tmp_path):
    """A bundle whose fp32 graphs read the tied embedding from the output projection (export.tie)
    has no table of its own to find: it is the projection's matrix."""
    bundle = tmp_path / "tied"
    shutil.copytree(tiny_bundle, bundle)
    assert tie.main([str(bundle), "--variants", "fp32"]) == 0
    out = tmp_path / "rebuilt.pt"
    assert unbundle_main([str(bundle), "--out", str(out)]) == 0
    original, rebuilt = read_checkpoint(tiny_checkpoint), read_checkpoint(out)
    assert rebuilt["model"].keys() == original["model"].keys()
    for name, tensor in original["model"].items():
        assert torch.equal(rebuilt["model"][name], tensor), name


def test_unbundle_needs_the_fp32_graphs(tiny_bundle, tmp_path, capsys):
    only_int8 = tmp_path / "int8"
    shutil.copytree(tiny_bundle, only_int8)
    manifest = json.loads((only_int8 / "manifest.json").read_text())
    del manifest["variants"]["fp32"]
    manifest["default_variant"] = "int8"
    (only_int8 / "manifest.json").write_text(json.dumps(manifest))
    assert unbundle_main([str(only_int8), "--out", str(tmp_path / "x.pt")]) == 1
    assert "no fp32 variant" in capsys.readouterr().err
    assert not (tmp_path / "x.pt").exists()


def test_evaluate_records_domain_scores_and_examples_in_the_card(
    tiny_bundle, tiny_sentences, tmp_path
):
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    data = tmp_path / "general"
    data.with_suffix(".en").write_text("\n".join(tiny_sentences[:4]) + "\n", encoding="utf-8")
    data.with_suffix(".de").write_text("\n".join(tiny_sentences[:4]) + "\n", encoding="utf-8")
    examples = tmp_path / "everyday.txt"
    examples.write_text("\n".join(tiny_sentences[4:6]) + "\n", encoding="utf-8")
    before = json.loads((bundle / "manifest.json").read_text())
    common = [str(bundle), "--variants", "fp32", "--beam-size", "1", "--threads", "1", "--record"]
    assert evaluate.main([*common, "--data", str(data), "--domain", "general"]) == 0
    assert evaluate.main([*common, "--examples", str(examples)]) == 0

    manifest = json.loads((bundle / "manifest.json").read_text())
    row = manifest["domain_scores"]["general"]
    assert row["data"] == str(data) and row["sentences"] == 4
    assert 0 <= row["fp32"]["greedy"]["bleu"] <= 100
    assert manifest["scores"] == before["scores"]  # the main table is left alone
    assert manifest["default_variant"] == before["default_variant"]
    rows = manifest["examples"]["rows"]
    assert [r["source"] for r in rows] == tiny_sentences[4:6]
    translator = Translator.from_dir(bundle, variant=manifest["default_variant"])
    expected = translator.translate_batch(tiny_sentences[4:6], TranslationOptions(beam_size=1))
    assert [r["translation"] for r in rows] == [r.text for r in expected]
    card = (bundle / "MODEL_CARD.md").read_text()
    assert "| general |" in card and "## Everyday examples" in card
    assert f"| {rows[0]['source']} | {rows[0]['translation']} |" in card

    # A written split typed in a hurry: a row of its own, its sources lower-cased and unmarked.
    written = tmp_path / "written"
    written.with_suffix(".en").write_text(
        "".join(f"{s.capitalize()}.\n" for s in tiny_sentences[:4]), encoding="utf-8")
    written.with_suffix(".de").write_text(
        "".join(f"{s}.\n" for s in tiny_sentences[:4]), encoding="utf-8")
    hurried = ["--data", str(written), "--domain", "general, hurried", "--hurried",
               "--output-dir", str(tmp_path / "hurried")]
    assert evaluate.main([*common, *hurried]) == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["domain_scores"]["general, hurried"]["hurried"] is True
    assert "hurried" not in manifest["domain_scores"]["general"]
    expected = translator.translate_batch(tiny_sentences[:4], TranslationOptions(beam_size=1))
    assert (tmp_path / "hurried/fp32.de").read_text().splitlines() == [r.text for r in expected]
    card = (bundle / "MODEL_CARD.md").read_text()
    assert f"| general, hurried | `{written}`{HURRIED} |" in card
    # the written row is not replaced by scores typed in a hurry, nor the other way round
    with pytest.raises(SystemExit, match="'general' holds written scores"):
        evaluate.main([*common, *hurried[:2], "--domain", "general", "--hurried"])
    with pytest.raises(SystemExit, match="'general, hurried' holds typed-in-a-hurry scores"):
        evaluate.main([*common, *hurried[:4]])
    assert json.loads((bundle / "manifest.json").read_text()) == manifest

    # written all in capitals: scored, upper-cased on both sides, and never recorded
    shouted = ["--data", str(written), "--capitals", "--output-dir", str(tmp_path / "caps")]
    assert evaluate.main([*common[:-1], *shouted]) == 0  # common without its --record
    expected = translator.translate_batch([f"{s.capitalize()}.".upper() for s in
                                           tiny_sentences[:4]], TranslationOptions(beam_size=1))
    assert (tmp_path / "caps/fp32.de").read_text().splitlines() == [r.text for r in expected]
    with pytest.raises(SystemExit):
        evaluate.main([*common, *shouted])
    assert json.loads((bundle / "manifest.json").read_text()) == manifest


def test_tuned_length_penalty_becomes_the_bundles_default(tiny_bundle, tiny_sentences, tmp_path,
                                                          capsys):
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    data = tmp_path / "dev"
    data.with_suffix(".en").write_text("\n".join(tiny_sentences[:6]) + "\n", encoding="utf-8")
    data.with_suffix(".de").write_text("\n".join(tiny_sentences[:6]) + "\n", encoding="utf-8")
    common = [str(bundle), "--data", str(data), "--beam-size", "2", "--threads", "1", "--record"]
    assert evaluate.main([*common, "--tune-length-penalty", "0.5,1.7", "--min-gain", "0"]) == 0

    manifest = json.loads((bundle / "manifest.json").read_text())
    tuning = manifest["decoding_tuning"]
    assert tuning["data"] == str(data) and tuning["sentences"] == 6
    assert tuning["variant"] == manifest["default_variant"] and tuning["beam_size"] == 2
    bleu = {float(v): b for v, b in tuning["bleu"].items()}
    assert set(bleu) == {0.5, 1.7}
    chosen = manifest["decoding"]["length_penalty"]
    assert bleu[chosen] == max(bleu.values())
    assert "The length penalty was chosen on" in (bundle / "MODEL_CARD.md").read_text()
    assert Translator.from_dir(bundle).default_options.length_penalty == chosen
    # a value that gains less than --min-gain over the current default does not replace it,
    # even where it would win the tie-break (closest to 1.0)
    manifest["decoding"]["length_penalty"] = 1.7
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert evaluate.main([*common, "--tune-length-penalty", "0.5,1.7", "--min-gain", "101"]) == 0
    assert json.loads((bundle / "manifest.json").read_text())["decoding"]["length_penalty"] == 1.7
    assert "which stays" in capsys.readouterr().out or bleu[1.7] > bleu[0.5]
    assert evaluate.main([*common, "--tune-length-penalty", "0.5,1.7", "--min-gain", "0"]) == 0
    chosen = json.loads((bundle / "manifest.json").read_text())["decoding"]["length_penalty"]

    # without --length-penalty, scores are taken (and labelled) with the bundle's default
    assert evaluate.main([*common, "--variants", "fp32"]) == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["scores"]["test_set"]["length_penalty"] == chosen
    # and without --beam-size, with the bundle's beam size
    manifest["decoding"]["beam_size"] = 1
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    assert evaluate.main([str(bundle), "--data", str(data), "--variants", "fp32", "--threads",
                          "1", "--record"]) == 0
    assert "greedy" in json.loads((bundle / "manifest.json").read_text())["scores"]["fp32"]
    capsys.readouterr()
    test = tmp_path / "test"
    for suffix in (".en", ".de"):
        test.with_suffix(suffix).write_text(data.with_suffix(suffix).read_text())
    assert evaluate.main([str(bundle), "--data", str(test), "--beam-size", "2",
                          "--tune-length-penalty", "1.0"]) == 0
    assert "looks like a test split" in capsys.readouterr().out


def test_requantize_rebuilds_int8_from_the_fp32_graphs(tiny_bundle, tiny_sentences, tmp_path,
                                                        monkeypatch):
    from export import requantize, variants

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    # the int8 graphs of an older export: 8-bit weights
    monkeypatch.setattr(variants, "WEIGHT_BITS", 8)
    assert requantize.main([str(bundle)]) == 0
    old = json.loads((bundle / "manifest.json").read_text())["variants"]["int8"]
    assert old["quantization"]["weight_bits"] == 8
    monkeypatch.setattr(variants, "WEIGHT_BITS", 7)

    assert requantize.main([str(bundle)]) == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    entry = manifest["variants"]["int8"]
    assert entry["quantization"]["weight_bits"] == 7
    assert entry["decoder"]["sha256"] != old["decoder"]["sha256"]
    assert "int8" not in manifest["scores"] and "verification" not in entry  # measured again later
    assert manifest["variants"]["fp32"] == json.loads(
        (tiny_bundle / "manifest.json").read_text())["variants"]["fp32"]
    weights = int8_weights(bundle / "decoder.int8.onnx")
    assert max(int(np.abs(w.astype(np.int32)).max()) for w in weights) == 64
    translator = Translator.from_dir(bundle, variant="int8")  # checksums hold
    assert all(r.text for r in translator.translate_batch(tiny_sentences[:3]))
    assert requantize.main([str(tmp_path / "missing")]) == 1


def test_residual_norms_are_standard_add_and_layer_normalization(model, tiny_bundle):
    """Every post-norm residual is an Add and a LayerNormalization of opset 17 (no contrib
    SkipLayerNormalization: its CPU kernel is slower, see export/graphs.py), in every variant."""
    c = model.config
    norms = {"encoder": 2 * c.n_encoder_layers, "decoder": 3 * c.n_decoder_layers}
    for variant in ("fp32", "int8"):
        vb = load_bundle(tiny_bundle, variant)
        for graph, path in (("encoder", vb.encoder_path), ("decoder", vb.decoder_path)):
            ops = [n.op_type for n in onnx.load(str(path)).graph.node]
            assert "SkipLayerNormalization" not in ops, (variant, graph)
            assert ops.count("LayerNormalization") == norms[graph], (variant, graph)


@pytest.mark.parametrize("vocab", [8000, 80, 100])  # whole blocks; padded to whole blocks
def test_block_top_k_equals_one_top_k_node(vocab):
    """export.graphs.block_top_k gives TopK's values and ids exactly, ties to the lower id, also
    where k exceeds the number of blocks, rows are all equal or the vocabulary is padded."""
    from onnx import TensorProto, helper

    from export.graphs import OPSET, _Builder, block_top_k

    g = _Builder()
    block_top_k(g, "scores", vocab, "k", ("values", "ids"))
    graph = helper.make_graph(
        g.nodes, "top_k",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["R", vocab]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["R", "k"]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["R", "k"])],
        initializer=g.initializers,
    )
    blocks = ort.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        .SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(vocab)
    scores = rng.standard_normal((6, vocab)).astype(np.float32)
    scores[0, [3, vocab - 1]] = 9.0  # a tie for the best, in blocks far apart
    scores[1, :] = -1.5  # every entry equal: the k lowest ids
    scores[2] = np.round(scores[2])  # many ties among the best
    scores[3, 40:60] = -np.inf
    for k in (1, 2, 8, 16, vocab):
        values, ids = blocks.run(None, {"scores": scores, "k": np.array([k], np.int64)})
        # the reference: by value descending, then id ascending
        want = np.stack([np.lexsort((np.arange(vocab), -row))[:k] for row in scores])
        np.testing.assert_array_equal(ids, want, err_msg=f"k={k}")
        np.testing.assert_array_equal(values, np.take_along_axis(scores, want, 1))


def _op_count(path: Path, op_type: str) -> int:
    return sum(n.op_type == op_type for n in onnx.load(str(path)).graph.node)


def _alone_and_together(bundle: Path, texts: list[str]) -> tuple[list, list]:
    """Greedy hypotheses (text, score) of texts one at a time and all in one running batch, on
    the step path (no fused single-sentence search: the same graphs either way)."""
    translator = Translator.from_dir(bundle, variant="int8", intra_threads=1, workers=1,
                                     max_batch_size=len(texts), fused=False)
    options = dataclasses.replace(translator.default_options, return_scores=True)
    alone = [translator.translate_batch([t], options)[0] for t in texts]
    together = translator.translate_batch(texts, options)
    return [(r.text, r.score) for r in alone], [(r.text, r.score) for r in together]


def test_calibrate_gives_int8_fixed_activation_scales(tiny_bundle, tiny_sentences, tmp_path):
    """export.calibrate: every DynamicQuantizeLinear becomes a QuantizeLinear with constants,
    the manifest says so (checksums hold), and a sentence's int8 result no longer depends on its
    batch-mates: the same text and score alone as in one batch, where run-time scales differ."""
    from export import calibrate

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    sentences = tmp_path / "dev.en"
    sentences.write_text("\n".join(tiny_sentences) + "\n\n")
    dynamic = {g: _op_count(bundle / f"{g}.int8.onnx", "DynamicQuantizeLinear")
               for g in ("encoder", "decoder")}
    assert min(dynamic.values()) > 0
    texts = tiny_sentences[:8]
    alone, together = _alone_and_together(bundle, texts)
    assert alone != together  # run-time scales: batch-mates change the scores

    assert calibrate.main([str(bundle), "--sentences", str(sentences)]) == 0
    for graph, count in dynamic.items():
        path = bundle / f"{graph}.int8.onnx"
        assert _op_count(path, "DynamicQuantizeLinear") == 0
        assert _op_count(path, "QuantizeLinear") == count
    manifest = json.loads((bundle / "manifest.json").read_text())
    quantization = manifest["variants"]["int8"]["quantization"]
    assert quantization["method"] == "static activations"
    assert quantization["calibration"]["count"] == len(tiny_sentences)
    assert "int8" not in manifest["scores"]  # measured again by export.evaluate
    alone, together = _alone_and_together(bundle, texts)  # loads: checksums hold
    assert alone == together and all(text for text, _ in alone)
    # a sentence alone takes the fused search (one Loop), with the same fixed scales
    from app.engine.fused import greedy_loop
    loop = onnx.load_from_string(greedy_loop(bundle / "decoder.int8.onnx")).graph.node[-1]
    body = next(a.g for a in loop.attribute if a.name == "body")
    assert sum(n.op_type == "QuantizeLinear" for n in body.node) == dynamic["decoder"]
    assert not any(n.op_type == "DynamicQuantizeLinear" for n in body.node)
    translator = Translator.from_dir(bundle, variant="int8", intra_threads=1)
    assert translator.fused is not None  # fusable: MatMulIntegerToFloat counts as int8
    assert translator.translate_batch(texts[:1])[0].text
    empty = tmp_path / "empty.en"
    empty.write_text("\n \n")
    assert calibrate.main([str(bundle), "--sentences", str(empty)]) == 1


def test_the_cards_corpus_summary_names_the_dictionary_and_the_domains(tmp_path):
    corpus = {
        "pair": "en-de",
        "counts": {"train": 30, "dev": 4, "test": 5},
        "domains": {"software": {"train": 10, "dev": 2, "test": 3},
                    "general": {"train": 20, "dev": 2, "test": 2}},
        "sources": {"trans-de-en": {"new_unique_pairs": 20, "domain": "general"},
                    "gimp-data": {"new_unique_pairs": 10, "domain": "software"}},
        "packages": {"trans-de-en": {"licence": "GPL-2+"}, "gimp-data": {"licence": "GPL-3"}},
    }
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(corpus))
    summary = evaluate.corpus_summary(path)
    assert "Ding German-English dictionary" in summary["description"]
    assert "software: 10 train, 2 dev, 3 test; general: 20 train" in summary["description"]
    assert [row["source"] for row in summary["top_sources"]] == ["trans-de-en", "gimp-data"]
    corpus["sources"].pop("trans-de-en")
    corpus.pop("domains")
    path.write_text(json.dumps(corpus))
    description = evaluate.corpus_summary(path)["description"]
    assert "dictionary" not in description and "per domain" not in description
    assert "LibreOffice" not in description and "gettext catalogs" in description
