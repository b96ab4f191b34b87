"""An Argos Translate package of a bundle's weights, for LibreTranslate to serve the same model.

    python -m bench.lt_package --bundle bundles/en-de --out /tmp/lt-home/packages/en_de

The bundle's fp32 weights are rebuilt into a checkpoint (export.unbundle), converted to a
CTranslate2 int8 model by bench.convert (what Argos packages ship), and laid out as
argostranslate 1.12 (LibreTranslate 1.9.6's fork) reads an installed package: `metadata.json`,
`model/` (CTranslate2's model.bin, config.json, vocabulary), `sentencepiece.model`, and
`minisbd/<lang>.onnx`, the sentence splitter it runs before translating.

The sentence splitter is a stand-in. LibreTranslate 1.9.6 splits sentences with MiniSBD models
(small int8 ONNX graphs of a character tagger) that it downloads on first use; model hubs cannot
be reached here. The stand-in has MiniSBD's interface (inputs `units` and `features`, per
character scores for "no boundary / token end / sentence end", its config and vocabulary in
the graph's metadata) and marks a sentence end at '.', '!' or '?' before a space. It runs in the
same ONNX Runtime that LibreTranslate loads for MiniSBD either way; what it leaves out is the
tagger's own weights and compute, which are small next to the translation model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

PUNCTUATION = (".", "!", "?")
UNITS = ["<PAD>", "<UNK>", " ", *PUNCTUATION]  # every other character is <UNK> to the splitter


def sentence_splitter(path: Path, lang: str) -> Path:
    """A MiniSBD-shaped ONNX graph: a sentence end at a full stop, '!' or '?' followed by a
    space, a token end before every space."""
    import onnx
    from onnx import TensorProto, helper

    space, first_mark = UNITS.index(" "), UNITS.index(PUNCTUATION[0])
    nodes = [
        helper.make_node("Equal", ["units", "space_id"], ["is_space"]),  # (B, T)
        helper.make_node("GreaterOrEqual", ["units", "mark_id"], ["is_mark"]),
        helper.make_node("Cast", ["is_space"], ["is_space_f"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["is_mark"], ["is_mark_f"], to=TensorProto.FLOAT),
        # the next character's space flag: shift left by one, a pad at the end
        helper.make_node("Slice", ["is_space_f", "one", "big", "axis1"], ["next_tail"]),
        helper.make_node("Slice", ["is_space_f", "zero", "one", "axis1"], ["first_col"]),
        helper.make_node("Mul", ["first_col", "zero_f"], ["pad_col"]),  # (B, 1)
        helper.make_node("Concat", ["next_tail", "pad_col"], ["next_space"], axis=1),  # (B, T)
        helper.make_node("Mul", ["is_mark_f", "next_space"], ["sentence_end"]),
        helper.make_node("Add", ["sentence_end", "sentence_end"], ["end_score"]),
        helper.make_node("Mul", ["next_space", "zero_f"], ["zeros"]),
        helper.make_node("Add", ["zeros", "half"], ["none_score"]),
        # scores per class: none, token end, sentence end, MWT token end, MWT sentence end
        helper.make_node("Unsqueeze", ["none_score", "axis2"], ["s0"]),
        helper.make_node("Unsqueeze", ["next_space", "axis2"], ["s1"]),
        helper.make_node("Unsqueeze", ["end_score", "axis2"], ["s2"]),
        helper.make_node("Unsqueeze", ["zeros", "axis2"], ["s3"]),
        helper.make_node("Concat", ["s0", "s1", "s2", "s3", "s3"], ["scores_raw"], axis=2),
        # features (B, T, F) join the graph so its input is used: a zero contribution
        helper.make_node("ReduceSum", ["features", "axis2"], ["feature_sum"], keepdims=1),
        helper.make_node("Mul", ["feature_sum", "zero_f"], ["feature_zero"]),
        helper.make_node("Add", ["scores_raw", "feature_zero"], ["scores"]),  # (B, T, 5)
    ]
    consts = [
        helper.make_tensor("space_id", TensorProto.INT64, [], [space]),
        helper.make_tensor("mark_id", TensorProto.INT64, [], [first_mark]),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("one", TensorProto.INT64, [1], [1]),
        helper.make_tensor("big", TensorProto.INT64, [1], [2**62]),
        helper.make_tensor("axis1", TensorProto.INT64, [1], [1]),
        helper.make_tensor("axis2", TensorProto.INT64, [1], [2]),
        helper.make_tensor("zero_f", TensorProto.FLOAT, [], [0.0]),
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
    ]
    graph = helper.make_graph(
        nodes, "sentence_splitter",
        [helper.make_tensor_value_info("units", TensorProto.INT64, ["B", "T"]),
         helper.make_tensor_value_info("features", TensorProto.FLOAT, ["B", "T", "F"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", "T", 5])],
        initializer=consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    config = {"skip_newline": False, "max_seqlen": 1000, "batch_size": 32,
              "feat_funcs": ["space_before"], "use_dictionary": False, "num_dict_feat": 0}
    vocab = {"lang": lang, "idx": 0, "cutoff": 0, "lower": False,
             "_unit2id": {u: i for i, u in enumerate(UNITS)}, "_id2unit": UNITS}
    helper.set_model_props(model, {"lang_code": lang, "config": json.dumps(config),
                                   "vocab": json.dumps(vocab), "lexicon": "null"})
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def write_package(ct2_model: Path, tokenizer: Path, out: Path, source: str, target: str,
                  name: str) -> Path:
    """Lay out an installed Argos package around a CTranslate2 model directory."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ct2_model, out / "model", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("sentencepiece.model"))
    shutil.copyfile(tokenizer, out / "sentencepiece.model")
    sentence_splitter(out / "minisbd" / f"{source}.onnx", source)
    (out / "metadata.json").write_text(json.dumps({
        "package_version": "1.0", "argos_version": "1.9.0", "from_code": source,
        "from_name": source, "to_code": target, "to_name": target, "type": "translate",
        "code": name, "name": name, "target_prefix": "",
    }, indent=1) + "\n")
    return out


def from_bundle(bundle: Path, out: Path) -> Path:
    """The bundle's weights as CTranslate2 int8 in an Argos package at out (needs torch,
    transformers and ctranslate2: the bench extra)."""
    from bench.convert import CT2_INT8_DIR, TOKENIZER_FILE, convert
    from export.unbundle import unbundle

    manifest = json.loads((bundle / "manifest.json").read_text())
    with tempfile.TemporaryDirectory(prefix="lt-package-") as tmp_name:
        tmp = Path(tmp_name)
        checkpoint = unbundle(bundle, tmp / "weights.pt")
        paths = convert(checkpoint, tmp / "peers")
        if CT2_INT8_DIR not in paths:
            raise SystemExit("ctranslate2 is not installed: pip install -e '.[bench]'")
        return write_package(paths[CT2_INT8_DIR], paths[CT2_INT8_DIR] / TOKENIZER_FILE, out,
                             manifest["source_lang"], manifest["target_lang"], manifest["name"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bundle", type=Path, default=Path("bundles/en-de"))
    p.add_argument("--out", type=Path, required=True, help="the package directory to write")
    args = p.parse_args(argv)
    print(from_bundle(args.bundle, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
