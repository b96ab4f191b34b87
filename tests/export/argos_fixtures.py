"""Tiny CTranslate2 Transformer models with random weights, built with CTranslate2's own spec
API the way its OpenNMT-py converter builds Argos Translate's models, and packaged as
.argosmodel files.

The vocabulary is in an order unlike the SentencePiece model's (OpenNMT-py's specials first,
then the pieces shuffled), lacks one of the model's pieces and has one token the model lacks.
The output bias favours EOS, so outputs end at different lengths, and keeps the padding and
BOS tokens out of the outputs, as trained models never emit them.
"""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path

import numpy as np

from bench.argos import fill_random, opennmt_positions

SPECIALS = ["<unk>", "<blank>", "<s>", "</s>"]  # OpenNMT-py's order
EXTRA_TOKEN = "\u2581zzqx"  # in the vocabulary, not in the SentencePiece model
D_MODEL, HEADS, D_FF, LAYERS = 32, 4, 64, 2


def vocabulary(sp_model: Path, seed: int, drop: int = 1) -> list[str]:
    """SentencePiece pieces in a shuffled order after OpenNMT-py's specials; `drop` pieces
    left out (they become unknown), EXTRA_TOKEN added."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
              if not sp.is_control(i) and not sp.is_unknown(i)]
    random.Random(seed).shuffle(pieces)
    return SPECIALS + pieces[drop:] + [EXTRA_TOKEN]


def build_ct2_model(out: Path, sp_model: Path, *, pre_norm: bool = True,
                    activation: str = "relu", shared: bool = True, quantization: str | None =
                    None, stored_positions: bool = True, eos_bias: float = 1.5,
                    seed: int = 0, **spec_options) -> Path:
    """A CTranslate2 model directory with random weights."""
    from ctranslate2.specs import TransformerSpec, common_spec

    act = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
           "swish": common_spec.Activation.SWISH}[activation]
    spec = TransformerSpec.from_config(LAYERS, HEADS, pre_norm=pre_norm, activation=act,
                                       **spec_options)
    source = vocabulary(sp_model, seed)
    target = source if shared else vocabulary(sp_model, seed + 1, drop=2)
    rng = np.random.default_rng(seed)
    fill_random(spec, rng, {"source": len(source), "target": len(target), "d_model": D_MODEL},
                D_FF, HEADS)
    if shared:  # one matrix: CTranslate2 stores it once, the others as aliases
        spec.decoder.embeddings.weight = spec.encoder.embeddings[0].weight
    spec.decoder.projection.weight = spec.decoder.embeddings.weight
    bias = (0.3 * rng.standard_normal(len(target))).astype(np.float32)
    bias[target.index("</s>")] += eos_bias
    for token in ("<blank>", "<s>"):
        bias[target.index(token)] = -20.0
    spec.decoder.projection.bias = bias
    if stored_positions and hasattr(spec.encoder, "position_encodings"):
        table = opennmt_positions(128, D_MODEL)
        spec.encoder.position_encodings.encodings = table
        spec.decoder.position_encodings.encodings = table
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    spec.validate()
    spec.optimize(quantization=quantization)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    return out


def package(model_dir: Path, sp_model: Path, out: Path, from_code: str = "en",
            to_code: str = "de", version: str = "1.0") -> Path:
    """An .argosmodel zip: one top directory with metadata.json, model/, sentencepiece.model,
    README.md."""
    name = f"translate-{from_code}_{to_code}-{version.replace('.', '_')}"
    metadata = {"package_version": version, "argos_version": "1.0", "from_code": from_code,
                "from_name": from_code, "to_code": to_code, "to_name": to_code,
                "type": "translate", "links": []}
    readme = f"# {from_code} -> {to_code}\n\nRandom weights for tests.\n\n## License\n\nCC0\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(f"{name}/metadata.json", json.dumps(metadata))
        z.writestr(f"{name}/README.md", readme)
        z.write(sp_model, f"{name}/sentencepiece.model")
        for file in sorted(model_dir.iterdir()):
            z.write(file, f"{name}/model/{file.name}")
    return out
