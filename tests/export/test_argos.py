"""Argos Translate packages built from random CTranslate2 weights (tests/export/argos_fixtures.py)
import with `nmt import`, and the bundles translate like `ctranslate2.Translator` on the same
model: greedy and beam-4 output identical on every one of 60 inputs, for pre-norm and post-norm,
ReLU and GELU, shared and separate vocabularies, float32, float16 and int8 model.bin. What
cannot be run is refused, naming the field."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ctranslate2", reason="ctranslate2 (the dev extra) is not installed")

from app.cli import main as nmt_main  # noqa: E402
from app.engine import Translator  # noqa: E402
from export import argos  # noqa: E402
from export.ct2_model import CT2FormatError, read_model_bin  # noqa: E402
from tests.export import argos_fixtures as fx  # noqa: E402

INPUTS = 60


@pytest.fixture(scope="module")
def sp_model(tmp_path_factory) -> Path:
    from model.tokenizer import train_tokenizer
    from tests.conftest import toy_pairs

    texts = [t for pair in toy_pairs(600) for t in pair]
    return train_tokenizer(texts, tmp_path_factory.mktemp("argos_sp") / "sp.model", vocab_size=80)


@pytest.fixture(scope="module")
def texts(sp_model) -> list[str]:
    """Random runs of the model's pieces, and a few with characters it has never seen."""
    found = argos.sample_texts(sp_model, INPUTS - 4, seed=7)
    return found + ["Ωmega the car", "ñandú", "the 🚗 dog", "open the window ✓"]


def make_package(tmp: Path, sp_model: Path, name: str, codes=("en", "de"), **options) -> Path:
    model_dir = fx.build_ct2_model(tmp / f"{name}-ct2", sp_model, **options)
    return fx.package(model_dir, sp_model, tmp / f"{name}.argosmodel", *codes)


def varied_package(tmp: Path, sp_model: Path, name: str, texts: list[str], **options) -> Path:
    """make_package with the smallest EOS bias (of a few) at which CTranslate2's greedy outputs
    of texts end at varied lengths: some at EOS, some at the limit (random post-norm models
    favour one token by a wider margin than pre-norm ones, so they need a larger bias)."""
    import ctranslate2
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    tokens = [sp.encode(t, out_type=str) for t in texts]
    model_dir = tmp / f"{name}-ct2"
    for bias in (0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0):
        shutil.rmtree(model_dir, ignore_errors=True)
        fx.build_ct2_model(model_dir, sp_model, eos_bias=bias, **options)
        peer = ctranslate2.Translator(str(model_dir), compute_type="float32")
        lengths = [len(r.hypotheses[0]) for r in peer.translate_batch(
            tokens, beam_size=1, max_decoding_length=20, min_decoding_length=0)]
        if len(set(lengths)) >= 3 and 0.1 * len(lengths) < lengths.count(20) < 0.9 * len(
                lengths):
            return fx.package(model_dir, sp_model, tmp / f"{name}.argosmodel")
    raise AssertionError(f"no EOS bias varies the output lengths of {name}")


def ct2_outputs(model_dir: Path, sp_model: Path, translator: Translator, texts: list[str],
                beam: int, length_penalty: float) -> list[list[int]]:
    """CTranslate2's output tokens as our target ids, each text with our length limit."""
    import ctranslate2
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    peer = ctranslate2.Translator(str(model_dir), compute_type="float32", intra_threads=1)
    options = replace(translator.default_options, beam_size=beam)
    limits = translator.output_limits(translator.encode(texts), options)
    vocab = translator.tokenizer
    out = []
    for text, limit in zip(texts, limits, strict=True):
        (result,) = peer.translate_batch([sp.encode(text, out_type=str)], beam_size=beam,
                                         length_penalty=length_penalty,
                                         max_decoding_length=int(limit), min_decoding_length=0)
        out.append([vocab.target_ids[p] for p in result.hypotheses[0]])
    return out


def ours(bundle: Path, texts: list[str], beam: int, length_penalty: float, variant="fp32"):
    translator = Translator.from_dir(bundle, variant=variant, intra_threads=1, workers=1)
    options = replace(translator.default_options, beam_size=beam, length_penalty=length_penalty)
    return translator, translator.translate_batch(texts, options)


def assert_like_ctranslate2(bundle: Path, model_dir: Path, sp_model: Path, texts: list[str]):
    """Greedy and beam 4 (no length penalty) identical to CTranslate2 on every text; with
    LibreTranslate's length penalty 0.2, beam 4 agrees on most (the two normalize a
    hypothesis's score by different lengths, CTranslate2's without EOS, and stop the search by
    different rules)."""
    for beam, lp in ((1, 1.0), (4, 0.0), (4, 0.2)):
        translator, results = ours(bundle, texts, beam, lp)
        theirs = ct2_outputs(model_dir, sp_model, translator, texts, beam, lp)
        got = [list(r.tokens) for r in results]
        if lp == 0.2:
            same = sum(a == b for a, b in zip(got, theirs, strict=True))
            assert same >= 0.8 * len(texts), f"beam {beam}, length penalty {lp}: {same}"
            continue
        assert got == theirs, f"beam {beam}"
        # decoded alike (an unknown piece as the source's: Translator.result)
        assert [r.text for r in results] == [translator.decode(ids, translator.unknowns(text))
                                             for ids, text in zip(theirs, texts, strict=True)]
        lengths = [len(ids) for ids in theirs]
        limits = translator.output_limits(translator.encode(texts), translator.default_options)
        ended = sum(n + 1 < limit for n, limit in zip(lengths, limits, strict=True))
        assert len(set(lengths)) >= 3 and 0 < ended < len(texts), lengths  # lengths vary


@pytest.mark.slow
def test_prenorm_package_imports_with_nmt_import_and_matches_ctranslate2(
        sp_model, texts, tmp_path, capfd):
    path = varied_package(tmp_path, sp_model, "pre", texts, pre_norm=True)
    out = tmp_path / "bundle"
    sentences = tmp_path / "sentences.txt"  # for calibration and the agreement checks
    sentences.write_text("\n".join(texts[:24]) + "\n")
    assert nmt_main(["import", str(path), "--out", str(out), "--sentences", str(sentences)]) == 0
    assert_like_ctranslate2(out, tmp_path / "pre-ct2", sp_model, texts)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["decoding"]["beam_size"] == 4 and manifest["decoding"]["length_penalty"] == 0.2
    assert manifest["architecture"]["pre_norm"] is True
    checks = manifest["import_checks"]
    assert checks["fp32_vs_ctranslate2"]["rate"] == 1.0
    int8 = checks["int8_vs_fp32"]  # recorded; random weights make it low, so not required
    assert int8["sentences"] == 24 and int8["rate"] == round(int8["identical"] / 24, 4)
    assert checks["texts"] == str(sentences)
    assert manifest["variants"]["int8"]["quantization"]["method"] == "static activations"
    card = (out / "MODEL_CARD.md").read_text()
    assert "Import checks" in card
    assert "translate-en_de-1_0" in card and "CC0" in card and "pre-norm" in card
    # int8 translates (its agreement is reported, not required)
    _, results = ours(out, texts[:8], 1, 1.0, variant="int8")
    assert all(isinstance(r.text, str) for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("name, options", [
    ("post-gelu-separate-fp16", dict(pre_norm=False, activation="gelu", shared=False,
                                     quantization="float16")),
    ("pre-gelu-int8", dict(pre_norm=True, activation="gelu", quantization="int8")),
    ("post-relu-builtin-positions", dict(pre_norm=False, stored_positions=False, seed=3)),
])
def test_architecture_variants_match_ctranslate2(name, options, sp_model, texts, tmp_path):
    path = varied_package(tmp_path, sp_model, name, texts, **options)
    out = argos.import_package(path, tmp_path / "bundle", variants=("fp32",))
    assert_like_ctranslate2(out, tmp_path / f"{name}-ct2", sp_model, texts)
    vocab = json.loads((out / "vocab.json").read_text())
    assert vocab["source_tokens"][:4] == fx.SPECIALS  # CTranslate2's order, not SentencePiece's
    assert (vocab["source_tokens"] == vocab["target_tokens"]) == options.get("shared", True)


def test_unknown_pieces_become_unk_as_in_ctranslate2(sp_model, tmp_path):
    import sentencepiece as spm

    path = make_package(tmp_path, sp_model, "unk")
    out = argos.import_package(path, tmp_path / "bundle", variants=("fp32",))
    translator = Translator.from_dir(out, intra_threads=1)
    tok = translator.tokenizer
    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    dropped = [p for p in (sp.id_to_piece(i) for i in range(sp.get_piece_size()))
               if p not in tok.vocab and not p.startswith("<")]
    assert dropped  # the fixture's vocabulary lacks one piece of the model
    ids = tok.encode([sp.decode_pieces([dropped[0]])])[0]
    assert tok.unk_id in ids
    # a token the SentencePiece model lacks decodes as argostranslate decodes it
    extra = tok.target_ids[fx.EXTRA_TOKEN]
    surface = sp.decode_pieces([fx.EXTRA_TOKEN]).replace("\u2581", " ").replace("_", " ")
    assert tok.decode([extra]) == (surface[1:] if surface.startswith(" ") else surface)


def _refused(tmp_path: Path, path: Path, capfd) -> str:
    """The importer's command line, in this process (`nmt import` runs the same in a child)."""
    assert argos.main([str(path), "--out", str(tmp_path / "refused")]) == 2
    return capfd.readouterr().err


@pytest.mark.parametrize("options, field", [
    (dict(with_relative_position=True), "relative_position_keys"),
    (dict(multi_query_attention=True), "multi_query_attention"),
    (dict(alignment_layer=0, alignment_heads=2), "decoder/alignment_layer"),
    (dict(layernorm_embedding=True), "layernorm_embedding"),
])
def test_what_we_cannot_run_is_refused_naming_the_field(options, field, sp_model, tmp_path,
                                                        capfd):
    path = make_package(tmp_path, sp_model, "bad", **options)
    err = _refused(tmp_path, path, capfd)
    assert field in err and "cannot be imported" in err
    assert not (tmp_path / "refused" / "manifest.json").exists()


def test_target_prefix_and_bad_dtypes_are_refused(sp_model, tmp_path, capfd):
    path = make_package(tmp_path, sp_model, "prefix")
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        z.extractall(tmp_path / "unpacked")
    root = tmp_path / "unpacked" / names[0].split("/")[0]
    meta = json.loads((root / "metadata.json").read_text())
    (root / "metadata.json").write_text(json.dumps({**meta, "target_prefix": "__de__"}))
    assert "target_prefix" in _refused(tmp_path, root, capfd)

    # a model.bin whose weight is int32: the reader names the variable and the dtype
    binary = _model_bin(tmp_path / "model.bin", [
        ("encoder/embeddings_0/weight", 3, np.arange(6, dtype=np.int32).reshape(2, 3))])
    model = read_model_bin(binary)
    with pytest.raises(CT2FormatError, match="encoder/embeddings_0/weight has dtype int32"):
        model.dequantized("encoder/embeddings_0/weight")
    binary.write_bytes(binary.read_bytes()[:-10])
    with pytest.raises(CT2FormatError, match="truncated"):
        read_model_bin(binary)


def test_argos_packages_directory_imports_each_once(sp_model, tmp_path, capfd):
    installed = tmp_path / "packages"
    for name, options in (("good", {}), ("bad", dict(with_relative_position=True))):
        path = make_package(tmp_path, sp_model, name, **options)
        with zipfile.ZipFile(path) as z:
            z.extractall(installed / name)
        (installed / name / "translate-en_de-1_0").rename(installed / f"{name}-pkg")
        (installed / name).rmdir()
    meta = json.loads((installed / "bad-pkg" / "metadata.json").read_text())
    (installed / "bad-pkg" / "metadata.json").write_text(json.dumps({**meta, "to_code": "fr"}))
    bundles = tmp_path / "bundles"
    args = ["--argos-packages", str(installed), "--out", str(bundles), "--variants", "fp32"]
    assert argos.main(args) == 1  # one refusal
    lines = capfd.readouterr().out.strip().splitlines()
    assert lines[0].startswith("bad-pkg: refused:") and "relative_position_keys" in lines[0]
    assert lines[1] == f"good-pkg: imported into {bundles / 'en-de'}"
    assert (bundles / "en-de" / "manifest.json").is_file()
    assert argos.main(args) == 1
    lines = capfd.readouterr().out.strip().splitlines()
    assert "skipped, already imported" in lines[1]


def test_default_package_directory_follows_argos_settings(monkeypatch, tmp_path):
    monkeypatch.delenv("ARGOS_PACKAGES_DIR", raising=False)
    monkeypatch.delenv("SNAP", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert argos.argos_packages_dir() == tmp_path / "argos-translate" / "packages"
    monkeypatch.setenv("ARGOS_PACKAGES_DIR", str(tmp_path / "elsewhere"))
    assert argos.argos_packages_dir() == tmp_path / "elsewhere"


def test_argostranslate_loader_accepts_the_test_packages(sp_model, tmp_path):
    import importlib.util

    if importlib.util.find_spec("argostranslate") is None:
        pytest.skip("argostranslate is not installed (it installs with `pip install --no-deps "
                    "argostranslate`; its own dependencies would pull in torch)")
    path = make_package(tmp_path, sp_model, "loader")
    env = {**os.environ, **{k: str(tmp_path / k) for k in ("XDG_DATA_HOME", "XDG_CONFIG_HOME",
                                                            "XDG_CACHE_HOME")}}
    env.pop("ARGOS_PACKAGES_DIR", None)
    # unpacked as install_from_path does (which also imports the translator and its
    # sentence splitter, stanza, absent here), then read by the package loader
    code = ("import sys, zipfile; from pathlib import Path; import argostranslate.package as p;"
            "from argostranslate import settings;"
            "zipfile.ZipFile(sys.argv[1]).extractall(settings.package_data_dir);"
            "(pkg,) = p.get_installed_packages();"
            "print(pkg.from_code, pkg.to_code, pkg.package_version,"
            " pkg.tokenizer.encode('the red car')[:2])")
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    import sentencepiece as spm

    pieces = spm.SentencePieceProcessor(model_file=str(sp_model)).encode("the red car",
                                                                         out_type=str)
    assert done.stdout.strip() == f"en de 1.0 {pieces[:2]}"
    installed = tmp_path / "XDG_DATA_HOME" / "argos-translate" / "packages"
    (unpacked,) = installed.iterdir()
    out = argos.import_package(unpacked, tmp_path / "bundle", variants=("fp32",))
    assert (out / "manifest.json").is_file()


@pytest.mark.slow
def test_imported_package_is_served_on_both_apis(tiny_bundle, sp_model, texts, tmp_path):
    import httpx

    from app.config import Settings
    from app.http.app import create_app
    from tests.app.fakes import running

    models = tmp_path / "models"
    models.mkdir()
    shutil.copytree(tiny_bundle, models / "en-de")
    fx_texts = texts[:3]
    path = make_package(tmp_path, sp_model, "served", codes=("fr", "es"))
    argos.import_package(path, variants=("fp32",), out=models / "fr-es")
    translator, expected = ours(models / "fr-es", fx_texts, 4, 0.2)
    app = create_app(Settings(models_dir=models, threads=1, max_wait_ms=2))
    with running(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        r = client.post("/v1/translate", json={"text": fx_texts, "source": "fr", "target": "es"})
        assert r.status_code == 200, r.text
        assert [t["text"] for t in r.json()["translations"]] == [e.text.strip() for e in expected]
        r = client.post("/translate", json={"q": fx_texts[0], "source": "fr", "target": "es"})
        assert r.status_code == 200, r.text
        assert r.json()["translatedText"] == expected[0].text.strip()
        langs = {x["code"] for x in client.get("/languages").json()}
        assert {"fr", "es", "en", "de"} <= langs


def test_bare_ctranslate2_directory_needs_the_sentencepiece_model_and_languages(
        sp_model, tmp_path, capfd):
    model_dir = fx.build_ct2_model(tmp_path / "bare", sp_model)
    assert argos.main([str(model_dir), "--out", str(tmp_path / "b")]) == 2
    assert "--sp-model" in capfd.readouterr().err
    out = argos.import_package(model_dir, tmp_path / "b", variants=("fp32",), sp_model=sp_model,
                               source_lang="it", target_lang="pt")
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["source_lang"], manifest["target_lang"]) == ("it", "pt")
    assert manifest["imported_from"]["format"] == "ctranslate2"


def _model_bin(path: Path, variables: list[tuple[str, int, np.ndarray]]) -> Path:
    """A model.bin (binary version 6) of (name, dtype id, array) variables, no aliases."""
    def string(text: str) -> bytes:
        data = text.encode() + b"\0"
        return struct.pack("<H", len(data)) + data

    out = struct.pack("<I", 6) + string("TransformerSpec") + struct.pack("<II", 7, len(variables))
    for name, type_id, array in variables:
        raw = array.tobytes()
        out += string(name) + struct.pack("<B", array.ndim)
        out += struct.pack(f"<{array.ndim}I", *array.shape)
        out += struct.pack("<BI", type_id, len(raw)) + raw
    path.write_bytes(out + struct.pack("<I", 0))
    return path


def test_reader_dequantizes_bfloat16_int16_and_int8(tmp_path):
    x = np.array([[1.5, -2.25], [0.125, 3.0]], np.float32)
    bf16 = (x.view(np.uint32) >> 16).astype(np.uint16)  # these values are exact in bfloat16
    q8 = np.array([[10, -20, 30], [1, 2, -3]], np.int8)
    model = read_model_bin(_model_bin(tmp_path / "model.bin", [
        ("a", 5, bf16),
        ("b", 2, np.array([100, -300], np.int16)), ("b_scale", 0, np.array(50.0, np.float32)),
        ("c", 1, q8), ("c_scale", 0, np.array([10.0, 2.0], np.float32)),
        ("d", 4, x.astype(np.float16)),
    ]))
    np.testing.assert_array_equal(model.dequantized("a"), x)
    np.testing.assert_allclose(model.dequantized("b"), [2.0, -6.0])
    np.testing.assert_allclose(model.dequantized("c"), q8 / np.array([[10.0], [2.0]]))
    np.testing.assert_array_equal(model.dequantized("d"), x)
    assert (model.spec, model.revision, model.dtypes["a"]) == ("TransformerSpec", 7, "bfloat16")
