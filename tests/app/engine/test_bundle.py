"""A broken bundle is refused with a message that names the broken file."""

from __future__ import annotations

import json
import shutil

import pytest

from app.engine import BundleError, Translator, find_bundles, load_bundle


@pytest.fixture
def bundle(tiny_bundle, tmp_path):
    copy = tmp_path / "en-de"
    shutil.copytree(tiny_bundle, copy)
    return copy


def edit_manifest(bundle, change):
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    path.write_text(json.dumps(manifest))


def test_valid_bundle_loads_each_variant(tiny_bundle):
    for variant in ("fp32", "int8"):
        b = load_bundle(tiny_bundle, variant)
        assert b.variant == variant and b.encoder_path.name == f"encoder.{variant}.onnx"
    assert load_bundle(tiny_bundle).variant == "fp32"  # the default variant


def test_bad_checksum_names_the_file(bundle):
    path = bundle / "decoder.int8.onnx"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"decoder\.int8\.onnx: sha256 mismatch"):
        load_bundle(bundle, "int8")
    load_bundle(bundle, "fp32")  # the other variant's files are intact
    with pytest.raises(BundleError, match=r"decoder\.int8\.onnx"):
        Translator.from_dir(bundle, variant="int8")


def test_missing_file_names_it(bundle):
    (bundle / "sentencepiece.model").unlink()
    with pytest.raises(BundleError, match=r"sentencepiece\.model: file listed .* is missing"):
        load_bundle(bundle)


def test_missing_or_unparsable_manifest(bundle, tmp_path):
    (bundle / "manifest.json").write_text("{not json")
    with pytest.raises(BundleError, match=r"manifest\.json: not valid JSON"):
        load_bundle(bundle)
    (bundle / "manifest.json").unlink()
    with pytest.raises(BundleError, match=r"manifest\.json: missing manifest"):
        load_bundle(bundle)
    with pytest.raises(BundleError, match="not a bundle directory"):
        load_bundle(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.pop("architecture"), r"'architecture' must be an object"),
        (lambda m: m.update(format_version=99), r"format_version 99: this engine runs format 3"),
        (lambda m: m.update(format_version=1), r"Re-export it .*python -m export\.unbundle"),
        (lambda m: m["architecture"].update(d_model="big"), r"'architecture\.d_model'"),
        (lambda m: m["variants"]["int8"].pop("decoder"), r"'variants\.int8\.decoder'"),
        (lambda m: m["tokenizer"].update(file="../../etc/passwd"), r"inside the bundle"),
        (lambda m: m.update(default_variant="fp8"), r"default_variant 'fp8' is not one of"),
        (lambda m: m.update(variants={}), r"'variants' must be a non-empty object"),
        (lambda m: m.update(capitalize_lowercase="yes"),
         r"'capitalize_lowercase' must be true or false, got 'yes'"),
        (lambda m: m.update(masked_symbols=["±"]),
         r"'masked_symbols' must be a string of characters, got \['±'\]"),
    ],
)
def test_wrong_manifest_is_refused(bundle, change, message):
    edit_manifest(bundle, change)
    with pytest.raises(BundleError, match=message) as info:
        load_bundle(bundle)
    assert "manifest.json" in str(info.value)


def test_unknown_variant_lists_the_available_ones(bundle):
    with pytest.raises(BundleError, match=r"no variant 'fp16'; available: \['fp32', 'int8'\]"):
        load_bundle(bundle, "fp16")


def test_find_bundles(bundle, tmp_path):
    (tmp_path / "not-a-bundle").mkdir()
    assert find_bundles(tmp_path) == [bundle]
    assert find_bundles(tmp_path / "missing") == []


def test_graphs_must_match_the_manifest_architecture(bundle):
    edit_manifest(bundle, lambda m: m["architecture"].update(n_heads=4, head_dim=8))
    with pytest.raises(BundleError, match=r"decoder\.fp32\.onnx: cache shape .* does not match"):
        Translator.from_dir(bundle, intra_threads=1)


def test_tokenizer_must_match_the_manifest(bundle):
    edit_manifest(bundle, lambda m: m["architecture"].update(vocab_size=1000))
    with pytest.raises(BundleError, match=r"sentencepiece\.model: vocabulary size"):
        Translator.from_dir(bundle, variant="int8", intra_threads=1)


def test_older_length_rule_names_still_load(bundle):
    """Manifests written before the rename: max_len_a was the offset, max_len_b the ratio."""
    def legacy(m):
        d = m["decoding"]
        d["max_len_a"], d["max_len_b"] = d.pop("max_len_offset"), d.pop("max_len_ratio")
        d["max_len_a"], d["max_len_b"] = 7, 0.5

    edit_manifest(bundle, legacy)
    options = Translator.from_dir(bundle, intra_threads=1).default_options
    assert (options.max_len_offset, options.max_len_ratio) == (7, 0.5)


def test_graph_names_are_checked_against_the_schema(bundle):
    edit_manifest(bundle, lambda m: m["graphs"]["decoder"]["inputs"].reverse())
    with pytest.raises(BundleError, match=r"manifest\.json: 'graphs\.decoder\.inputs'"):
        load_bundle(bundle)
    edit_manifest(bundle, lambda m: m.pop("graphs"))
    with pytest.raises(BundleError, match=r"manifest\.json: 'graphs' must be an object"):
        load_bundle(bundle)


def test_a_graph_with_other_names_is_refused(bundle):
    """The files must have the names the manifest promises (a graph swapped for another)."""
    shutil.copy(bundle / "encoder.fp32.onnx", bundle / "decoder.fp32.onnx")
    with pytest.raises(BundleError, match=r"decoder\.fp32\.onnx: graph inputs/outputs"):
        Translator.from_dir(bundle, verify_checksums=False)


def test_cuda_without_a_named_variant_loads_one_made_for_cuda(bundle):
    """The shipped default, int8, lists only the CPU: on CUDA the fp32 graphs load instead (its
    quantized products would run on the CPU between copies); on the CPU the default stays."""
    from app.engine.bundle import variant_for

    edit_manifest(bundle, lambda m: m.update(default_variant="int8"))
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["variants"]["int8"]["providers"] == ["cpu"]
    assert load_bundle(bundle).variant == "int8"
    assert load_bundle(bundle, provider="cuda").variant == "fp32"
    assert load_bundle(bundle, "int8", provider="cuda").variant == "int8"  # named: as asked
    # this onnxruntime may have no CUDA provider: the sessions then fall back to the CPU, but the
    # variant is still chosen for CUDA
    assert Translator.from_dir(bundle, provider="cuda", workers=1).variant == "fp32"
    # a manifest without provider lists runs its default anywhere; none made for CUDA: default
    edit_manifest(bundle, lambda m: [v.pop("providers") for v in m["variants"].values()])
    assert load_bundle(bundle, provider="cuda").variant == "int8"
    manifest["variants"]["fp32"]["providers"] = ["cpu"]
    assert variant_for(manifest, "cuda") == "int8"
