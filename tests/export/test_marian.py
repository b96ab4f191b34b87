"""export.marian: tiny Marian models built with transformers (tests/marian.py), imported into
bundles, and decoded by our ONNX engine with the same token ids as MarianMTModel.generate.

The beam comparison runs generate with length_penalty 0: there our engine's rules and
generate's coincide (see README, "Import an OPUS-MT model"); with length_penalty 1 they may
differ and the agreement is only reported."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch", reason="torch (the train extra) is not installed")
transformers = pytest.importorskip(
    "transformers", reason="transformers (the bench extra) is not installed"
)

from app.engine.translator import Translator  # noqa: E402
from app.engine.types import TranslationOptions  # noqa: E402
from export.marian import UnsupportedModel, generation_config, import_marian  # noqa: E402
from tests.conftest import toy_pairs  # noqa: E402
from tests.marian import SPECS  # noqa: E402

LIMIT = 24  # tokens generated at most, EOS included, on both sides
TEXTS = [en for en, _ in toy_pairs(50, seed=11)]  # not the training sentences' seeds


def hf_model(hf_dir):
    from transformers import MarianMTModel

    hf = MarianMTModel.from_pretrained(hf_dir, local_files_only=True).eval()
    hf.generation_config = generation_config(hf.config)  # no forced EOS, no banned pad
    return hf


@torch.no_grad()
def hf_generate(hf, sources, beams: int, length_penalty: float) -> list[list[int]]:
    """generate's ids per source (without the start token, EOS and padding), one at a time."""
    eos = hf.config.eos_token_id
    out = []
    for ids in sources:
        src = torch.tensor([ids + [eos]])  # (1, S)
        row = hf.generate(
            input_ids=src,
            attention_mask=torch.ones_like(src),
            generation_config=generation_config(
                hf.config, num_beams=beams, length_penalty=length_penalty,
                early_stopping=False, max_new_tokens=LIMIT,
            ),
        )[0, 1:].tolist()  # (1 + T,) -> (T,)
        out.append(row[: row.index(eos)] if eos in row else row)
    return out


def ours(translator, sources, beams: int, length_penalty: float) -> list[list[int]]:
    options = TranslationOptions(
        beam_size=beams, length_penalty=length_penalty, max_len_offset=LIMIT, max_len_ratio=0.0
    )
    return [h[0].tokens for h in translator.translate_ids(sources, options)]


@pytest.fixture(scope="module", params=[s.name for s in SPECS])
def imported(request, marian_bundles):
    torch.set_num_threads(1)
    hf_dir, bundle = marian_bundles[request.param]
    translator = Translator.from_dir(bundle, "fp32", intra_threads=1)
    return hf_model(hf_dir), translator, translator.encode(TEXTS), bundle


def test_greedy_and_beam_ids_equal_transformers(imported):
    hf, translator, sources, bundle = imported
    greedy = ours(translator, sources, 1, 1.0)
    assert greedy == hf_generate(hf, sources, 1, 1.0)
    beam = ours(translator, sources, 4, 0.0)
    assert beam == hf_generate(hf, sources, 4, 0.0)
    # the comparison is not vacuous: outputs of many lengths, most ended by EOS
    lengths = {len(ids) for ids in greedy + beam}
    assert len(lengths) >= 5 and sum(len(ids) < LIMIT for ids in greedy) >= 25
    assert beam != greedy  # beam search found other outputs for some inputs

    lp1 = ours(translator, sources, 4, 1.0)
    same_lp1 = sum(a == b for a, b in zip(lp1, hf_generate(hf, sources, 4, 1.0), strict=True))
    int8 = Translator.from_dir(bundle, "int8", intra_threads=1)
    same_int8 = sum(a == b for a, b in zip(ours(int8, sources, 1, 1.0), greedy, strict=True))
    print(
        f"\n{translator.name}: fp32 greedy and beam 4 (length penalty 0) identical to "
        f"Transformers on {len(sources)}/{len(sources)}; beam 4 with length penalty 1: "
        f"{same_lp1}/{len(sources)}; int8 greedy = fp32 greedy on {same_int8}/{len(sources)}"
    )


def test_tokenizer_and_text_match_marian_tokenizer(imported, marian_bundles):
    from transformers import MarianTokenizer

    hf, translator, sources, _ = imported
    hf_dir = marian_bundles[translator.name][0]
    files = ("source.spm", "target.spm", "vocab.json")
    tok = MarianTokenizer(*(str(hf_dir / f) for f in files))
    assert sources == [tok(t).input_ids[:-1] for t in TEXTS]  # theirs ends with EOS
    outputs = ours(translator, sources[:10], 1, 1.0)
    assert [translator.decode(ids) for ids in outputs] == [
        tok.decode(ids, skip_special_tokens=True) for ids in outputs
    ]
    greedy = TranslationOptions(max_len_offset=LIMIT, max_len_ratio=0.0)
    texts = [r.text for r in translator.translate_batch(TEXTS[:10], greedy)]
    assert texts == [translator.decode(ids) for ids in outputs] and any(texts)


def test_manifest_records_marian_options_and_parity(marian_bundles):
    for spec in SPECS:
        manifest = json.loads((marian_bundles[spec.name][1] / "manifest.json").read_text())
        assert manifest["format_version"] == 3
        assert (manifest["source_lang"], manifest["target_lang"]) == spec.langs
        arch = manifest["architecture"]
        assert (arch.get("activation", "relu"), arch["positional_layout"], arch["output_bias"]) == (
            spec.activation, "halves", True
        )
        assert arch["d_model"] == spec.d_model and arch["n_encoder_layers"] == spec.layers[0]
        special = manifest["special_tokens"]
        assert special["decoder_start_id"] == special["pad_id"] == arch["vocab_size"] - 1
        assert set(manifest["tokenizer"]) == {"source", "target", "vocab"}
        from model.checkpoint import load_model

        bundle = marian_bundles[spec.name][1]
        config = load_model(bundle.parent / f"{spec.name}.pt")[0].config  # --checkpoint kept it
        assert config.decoder_start_id == special["decoder_start_id"]
        assert config.activation == spec.activation and config.positional_layout == "halves"
        fp32 = manifest["variants"]["fp32"]["verification"]
        assert fp32["passed"] and fp32["greedy_agreement"] == 1.0
        assert "greedy_agreement" in manifest["variants"]["int8"]["verification"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda c: c.update(normalize_before=True), "normalize_before"),
        (lambda c: c.update(static_position_embeddings=False), "static_position_embeddings"),
        (lambda c: c.update(scale_embedding=False), "scale_embedding"),
        (lambda c: c.update(decoder_vocab_size=c["vocab_size"] + 5), "decoder_vocab_size"),
        (lambda c: c.update(share_encoder_decoder_embeddings=False),
         "share_encoder_decoder_embeddings"),
        (lambda c: c.update(activation_function="gelu_new"), "activation_function"),
        (lambda c: c.update(decoder_ffn_dim=c["encoder_ffn_dim"] * 2), "decoder_ffn_dim"),
        (lambda c: c.update(pad_token_id=1), "pad_token_id"),
    ],
)
def test_models_that_do_not_fit_are_refused_naming_the_field(
    marian_bundles, tmp_path, edit, field
):
    hf_dir = shutil.copytree(marian_bundles[SPECS[0].name][0], tmp_path / "hf")
    config = json.loads((hf_dir / "config.json").read_text())
    edit(config)
    (hf_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModel, match=field):
        import_marian(hf_dir, tmp_path / "out.pt")
    assert not (tmp_path / "out.pt").exists()


def test_multi_target_and_separate_vocabularies_are_refused(marian_bundles, tmp_path):
    hf_dir = shutil.copytree(marian_bundles[SPECS[0].name][0], tmp_path / "hf")
    shutil.copyfile(hf_dir / "vocab.json", hf_dir / "target_vocab.json")
    with pytest.raises(UnsupportedModel, match="separate_vocabs"):
        import_marian(hf_dir, tmp_path / "out.pt")
    (hf_dir / "target_vocab.json").unlink()
    vocab = json.loads((hf_dir / "vocab.json").read_text())
    vocab[">>fra<<"] = vocab.pop("<pad>")
    vocab["<pad>"] = len(vocab)
    (hf_dir / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(UnsupportedModel, match=r"vocab.json.*>>fra<<"):
        import_marian(hf_dir, tmp_path / "out.pt")


def test_learned_positions_are_refused(marian_bundles, tmp_path):
    """A position table that is not the sinusoidal one (stored in the weights) is refused."""
    from safetensors.torch import load_file, save_file

    hf_dir = shutil.copytree(marian_bundles[SPECS[0].name][0], tmp_path / "hf")
    weights = load_file(hf_dir / "model.safetensors")
    d_model = weights["model.shared.weight"].shape[1]
    for key in ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"):
        weights[key] = torch.randn(64, d_model)
    save_file(weights, hf_dir / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnsupportedModel, match="embed_positions"):
        import_marian(hf_dir, tmp_path / "out.pt")


def test_an_imported_bundle_unbundles_to_a_checkpoint_that_verifies(marian_bundles, tmp_path):
    """export.unbundle reads the Marian options back from the manifest and the graphs."""
    from export.unbundle import unbundle
    from export.verify import verify_bundle
    from model.checkpoint import load_model

    bundle = marian_bundles[SPECS[1].name][1]
    checkpoint = unbundle(bundle, tmp_path / "rebuilt.pt")
    config = load_model(checkpoint)[0].config
    assert (config.activation, config.positional_layout, config.output_bias) == (
        SPECS[1].activation, "halves", True
    )
    report = verify_bundle(bundle, checkpoint, threads=1)
    assert report.ok, report.summary()
    assert report.variants["fp32"]["greedy_agreement"] == 1.0
