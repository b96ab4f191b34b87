"""export.tie: a bundle exported without `share` rewritten to store each weight once."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import onnx

from app.engine import Translator
from app.engine.bundle import load_bundle
from export import tie
from export.graphs import OUTPUT_W


def _hypotheses(bundle, variant, texts):
    """{beam size: [(text, score)]} of texts, greedy and beam 3."""
    translator = Translator.from_dir(bundle, variant=variant, intra_threads=1, workers=1)
    found = {}
    for beam in (1, 3):
        options = dataclasses.replace(translator.default_options, beam_size=beam,
                                      return_scores=True)
        found[beam] = [(r.text, r.score) for r in translator.translate_batch(texts, options)]
    return found


def _stored_bytes(bundle, entry):
    """Bytes of the variant's initializers, each place in its weights file counted once."""
    places, inline = set(), 0
    for graph in ("encoder", "decoder"):
        model = onnx.load(str(bundle / entry[graph]["file"]), load_external_data=False)
        for init in model.graph.initializer:
            if init.data_location == onnx.TensorProto.EXTERNAL:
                place = {e.key: e.value for e in init.external_data}
                places.add((place["offset"], int(place["length"])))
            else:
                inline += len(init.SerializeToString())
    return inline + sum(length for _, length in places)


def _tables(path, vocab, d_model):
    """Names of the graph's initializers shaped like the embedding or its transpose."""
    inits = onnx.load(str(path), load_external_data=False).graph.initializer
    return sorted(i.name for i in inits if sorted(i.dims) == sorted([vocab, d_model]))


def test_tie_stores_the_embedding_once_and_keeps_fp32_exact(tiny_bundle, tiny_sentences,
                                                           tmp_path, capsys):
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    vocab, d = manifest["architecture"]["vocab_size"], manifest["architecture"]["d_model"]
    manifest["scores"] = {"int8": {"beam4": {"bleu": 1.0, "chrf": 1.0}},
                          "fp32": {"beam4": {"bleu": 2.0, "chrf": 2.0}}}
    manifest["variants"]["int8"]["verification"] = {"passed": True}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    texts = tiny_sentences[:12]
    before = {v: _hypotheses(bundle, v, texts) for v in ("fp32", "int8")}
    sizes = {v: _stored_bytes(bundle, manifest["variants"][v]) for v in ("fp32", "int8")}
    # without share: the encoder's table, and the decoder's scaled table and projection
    assert len(_tables(bundle / "decoder.int8.onnx", vocab, d)) == 2

    assert tie.main([str(bundle), "--variants", "fp32,int8"]) == 0
    assert "2 embedding Gathers rewritten" in capsys.readouterr().out
    after = json.loads((bundle / "manifest.json").read_text())
    # fp32: both graphs read the projection's matrix; int8: both read one int8 table, and the
    # decoder's projection keeps its own int8 matrix
    tables = {("fp32", "encoder"): [OUTPUT_W], ("fp32", "decoder"): [OUTPUT_W],
              ("int8", "encoder"): [tie.EMBEDDING_INT8],
              ("int8", "decoder"): sorted([tie.EMBEDDING_INT8, f"{OUTPUT_W}_quantized"])}
    for variant, added in (("fp32", 0), ("int8", vocab * d)):
        entry = after["variants"][variant]
        assert entry["weights"]["file"] == f"weights.{variant}.bin"
        for graph in ("encoder", "decoder"):
            found = _tables(bundle / entry[graph]["file"], vocab, d)
            assert found == tables[variant, graph], (variant, graph)
        load_bundle(bundle, variant)  # checksums of graphs and weights file hold
        # two float tables fewer (int8: one int8 table more), what both graphs read stored once
        assert _stored_bytes(bundle, entry) < sizes[variant] - 2 * vocab * d * 4 + added, variant
    # the int8 table: the projection's int8 matrix and scales, transposed; within half a step
    # of the float embedding
    def initializers(graph):
        model = onnx.load(str(bundle / f"{graph}.int8.onnx"), load_external_data=False)
        return {i.name: onnx.numpy_helper.to_array(i, str(bundle)) for i in model.graph.initializer}

    encoder, decoder = initializers("encoder"), initializers("decoder")
    q, scale = encoder[tie.EMBEDDING_INT8], encoder[tie.EMBEDDING_SCALE]
    np.testing.assert_array_equal(q, decoder[f"{OUTPUT_W}_quantized"].T)
    np.testing.assert_array_equal(scale[:, 0], decoder[f"{OUTPUT_W}_scale"])
    table = onnx.numpy_helper.to_array(next(
        i for i in onnx.load(str(tiny_bundle / "encoder.fp32.onnx")).graph.initializer
        if tuple(i.dims) == (vocab, d)))
    assert np.all(np.abs(q * scale - table) <= scale * 0.5001)

    # fp32: the same table, read another way: bit for bit the same scores
    assert _hypotheses(bundle, "fp32", texts) == before["fp32"]
    assert after["scores"]["fp32"] == manifest["scores"]["fp32"]
    # int8: the embedding is now the projection's int8 matrix: close, measured again
    assert "int8" not in after["scores"] and "verification" not in after["variants"]["int8"]
    for beam, got in _hypotheses(bundle, "int8", texts).items():
        same = sum(g[0] == b[0] for g, b in zip(got, before["int8"][beam], strict=True))
        assert same >= len(texts) * 3 // 4, (beam, same)
        assert all(text for text, _ in got)
        diffs = [abs(g[1] - b[1]) for g, b in zip(got, before["int8"][beam], strict=True)
                 if g[0] == b[0]]
        assert np.median(diffs) < 0.05, diffs

    assert tie.main([str(bundle), "--variants", "int8"]) == 1  # already stored once
    assert "already stores its weights once" in capsys.readouterr().err


def test_tie_refuses_a_table_that_is_not_the_projection(tiny_bundle, tmp_path):
    """A (V, D) table that differs from the projection is not tied: the graph keeps it."""
    from onnx import numpy_helper

    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_bundle, bundle)
    manifest = load_bundle(bundle, "fp32").manifest
    vocab, d = manifest["architecture"]["vocab_size"], manifest["architecture"]["d_model"]
    encoder = onnx.load(str(bundle / "encoder.fp32.onnx"))
    decoder = onnx.load(str(bundle / "decoder.fp32.onnx"))
    for init in encoder.graph.initializer:
        if tuple(init.dims) == (vocab, d):
            table = numpy_helper.to_array(init).copy()
            table[5, 3] += 1e-3
            init.CopyFrom(numpy_helper.from_array(table, init.name))
    assert tie.tie_embeddings(encoder, decoder, vocab, d) == 1  # the decoder's only
    assert len(_tables_of(encoder, vocab, d)) == 1 and OUTPUT_W not in {
        i.name for i in encoder.graph.initializer}


def _tables_of(model, vocab, d_model):
    return [i.name for i in model.graph.initializer if sorted(i.dims) == sorted([vocab, d_model])]
