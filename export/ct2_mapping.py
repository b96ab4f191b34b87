"""A CTranslate2 TransformerSpec model (export.ct2_model) -> our ModelConfig and state dict.

What CTranslate2 stores for the models Argos Translate ships (OpenNMT-py Transformers, and
OPUS-MT ones converted from Marian) maps onto options of our layer classes: pre- or post-norm
(`*/pre_norm`), the final encoder/decoder LayerNorms of pre-norm models, ReLU / GELU / swish
(`*/activation`), the position table (`*/position_encodings/encodings`, or CTranslate2's own
sinusoids when none is stored), scaled or unscaled embeddings (`*/scale_embeddings`), shared or
separate vocabularies, a tied or separate output projection and its bias. Fused projections
are split: self-attention `linear_0` is Q|K|V, cross-attention `linear_1` is K|V.

Every variable must be consumed by the mapping or be a flag at its default; anything else
(relative positions, multi-query attention, several source embeddings, alignment heads, GLU
feed-forwards, RMS norms, an embedding LayerNorm, ...) is refused with a message naming the
variable or config field, never mapped approximately.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from export.ct2_model import CT2Model

SPEC = "TransformerSpec"
MAX_REVISION = 7
ACTIVATIONS = {0: "relu", 2: "swish", 3: "gelu"}  # CTranslate2's Activation enum -> ours
ACTIVATION_NAMES = {1: "GELUTanh", 4: "GELUSigmoid", 5: "Tanh", 6: "Sigmoid"}
BUILTIN_POSITIONS = 1024  # positions of CTranslate2's generated table (it grows without limit)
PAD_TOKENS = ("<blank>", "<pad>")  # OpenNMT-py's padding token, Marian's
# flags that may be present at these values (their defaults); others are refused
DEFAULT_FLAGS = {
    "encoder/multi_query_attention": False,
    "encoder/embeddings_merge": 0,
    "decoder/alignment_layer": -1,
    "decoder/alignment_heads": 1,
    "decoder/alibi": False,
    "decoder/alibi_use_positive_positions": False,
    "decoder/scale_alibi": False,
    "decoder/start_from_zero_embedding": False,
}
# config.json keys that must hold these values (else the model needs what we cannot run)
CONFIG_RULES = {
    "multi_query_attention": (False, "multi-query attention is not supported"),
    "add_source_bos": (False, "a BOS token added to the source is not supported"),
}


class UnsupportedCT2Model(ValueError):
    """A CTranslate2 model our architecture cannot run; the message names the field."""


def refuse(field: str, why: str) -> UnsupportedCT2Model:
    return UnsupportedCT2Model(f"{field}: {why}; this model cannot be imported")


def ct2_positions(n: int, depth: int) -> np.ndarray:
    """CTranslate2's generated sinusoids (its generate_sinusoidal_position_encoding): row i is
    position i + 1, sines in the first half of the dimensions, cosines in the second, in
    float32 as it computes them."""
    increment = np.float32(math.log(10000.0) / (depth // 2 - 1))
    timescales = np.exp(-increment * np.arange(depth // 2, dtype=np.float32))  # (D/2,)
    scaled = np.arange(1, n + 1, dtype=np.float32)[:, None] * timescales[None, :]  # (P, D/2)
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


class _Reader:
    """Reads variables of a CT2Model, remembering which ones were used."""

    def __init__(self, model: CT2Model) -> None:
        self.model = model
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return self.model.has(name)

    def weight(self, name: str) -> np.ndarray:
        stored = self.model.resolve(name)
        self.used.add(stored)
        for scale in (f"{stored}_scale", f"{name}_scale"):
            if self.model.has(scale):
                self.used.add(self.model.resolve(scale))
        return self.model.dequantized(name)

    def optional(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A bias that may be absent: zeros then."""
        return self.weight(name) if self.has(name) else np.zeros(shape, np.float32)

    def flag(self, name: str, default: Any = None) -> Any:
        if self.has(name):
            self.used.add(self.model.resolve(name))
        return self.model.scalar(name, default)


def _norm(r: _Reader, scope: str, ours: str, d: int, state: dict) -> None:
    if not r.has(f"{scope}/gamma"):
        raise refuse(f"{scope}/gamma", "missing")
    if not r.has(f"{scope}/beta"):
        raise refuse(f"{scope}/beta", "missing: RMS normalization is not supported")
    state[f"{ours}.weight"] = r.weight(f"{scope}/gamma").reshape(d)
    state[f"{ours}.bias"] = r.weight(f"{scope}/beta").reshape(d)


def _linear(r: _Reader, scope: str, out: int, inp: int) -> tuple[np.ndarray, np.ndarray]:
    w = r.weight(f"{scope}/weight")
    if w.shape != (out, inp):
        raise refuse(f"{scope}/weight", f"shape {list(w.shape)}, expected {[out, inp]}")
    return w, r.optional(f"{scope}/bias", (out,)).reshape(out)


def _put(state: dict, ours: str, w: np.ndarray, b: np.ndarray) -> None:
    state[f"{ours}.weight"], state[f"{ours}.bias"] = w, b


def _attention(r: _Reader, scope: str, ours: str, d: int, cross: bool, state: dict) -> None:
    if r.has(f"{scope}/queries_scale"):
        raise refuse(f"{scope}/queries_scale", "a stored query scale is not supported")
    names = ("w_q", "w_k", "w_v")
    if cross:  # linear_0 = Q, linear_1 = K|V, linear_2 = output
        _put(state, f"{ours}.w_q", *_linear(r, f"{scope}/linear_0", d, d))
        w, b = _linear(r, f"{scope}/linear_1", 2 * d, d)
        parts, out = names[1:], f"{scope}/linear_2"
    else:  # linear_0 = Q|K|V, linear_1 = output
        w, b = _linear(r, f"{scope}/linear_0", 3 * d, d)
        parts, out = names, f"{scope}/linear_1"
    for i, name in enumerate(parts):
        _put(state, f"{ours}.{name}", w[i * d:(i + 1) * d], b[i * d:(i + 1) * d])  # (D, D), (D,)
    _put(state, f"{ours}.w_o", *_linear(r, out, d, d))


def _ffn(r: _Reader, scope: str, ours: str, d: int, state: dict) -> int:
    if r.has(f"{scope}/linear_0_noact/weight"):
        raise refuse(f"{scope}/linear_0_noact", "gated (GLU) feed-forward layers are not supported")
    d_ff = r.model.raw(f"{scope}/linear_0/weight").shape[0]
    _put(state, f"{ours}.w_1", *_linear(r, f"{scope}/linear_0", d_ff, d))
    _put(state, f"{ours}.w_2", *_linear(r, f"{scope}/linear_1", d, d_ff))
    return d_ff


def _layers(model: CT2Model, stack: str) -> int:
    count = 0
    while any(name.startswith(f"{stack}/layer_{count}/") for name in model.variables):
        count += 1
    return count


def _embedding_scale(r: _Reader, stack: str, d: int) -> bool:
    """Whether the stack multiplies embeddings by sqrt(d) (CTranslate2's build_embeddings_scale:
    a flag, or the scale value itself)."""
    for name in (f"{stack}/scale_embeddings", f"{stack}/embeddings/multiply_by_sqrt_depth"):
        if r.has(name):
            stored = r.model.dtypes[r.model.resolve(name)]
            value = r.flag(name)
            if stored == "int8":  # a boolean flag
                return bool(value)
            if math.isclose(value, 1.0):
                return False
            if math.isclose(value, math.sqrt(d), rel_tol=1e-6):
                return True
            raise refuse(name, f"an embedding scale of {value} (only 1 or sqrt(d_model) = "
                         f"{math.sqrt(d):.4g} are supported)")
    return True


def _positions(r: _Reader, d: int) -> np.ndarray:
    tables = []
    for stack in ("encoder", "decoder"):
        name = f"{stack}/position_encodings/encodings"
        tables.append(r.weight(name) if r.has(name) else None)
    if (tables[0] is None) != (tables[1] is None):
        raise refuse("encoder/decoder position_encodings",
                     "one stack stores a table, the other not")
    if tables[0] is None:
        return ct2_positions(BUILTIN_POSITIONS, d)
    if tables[0].shape != tables[1].shape or not np.array_equal(tables[0], tables[1]):
        raise refuse("decoder/position_encodings/encodings",
                     "differs from the encoder's (one table for both is supported)")
    if tables[0].ndim != 2 or tables[0].shape[1] != d:
        raise refuse("encoder/position_encodings/encodings",
                     f"shape {list(tables[0].shape)}, expected [positions, {d}]")
    return tables[0]


def _check_structure(model: CT2Model) -> None:
    if model.spec != SPEC:
        raise refuse("model.bin spec", f"{model.spec!r}; only {SPEC} (encoder-decoder) models "
                     "are supported")
    if model.revision > MAX_REVISION:
        raise refuse("model.bin spec revision", f"{model.revision} is newer than the "
                     f"{MAX_REVISION} this importer knows")
    for key, (value, why) in CONFIG_RULES.items():
        if bool(model.config.get(key, value)) != value:
            raise refuse(f"config.json {key}", why)
    markers = {
        "relative_position_keys": "relative position representations (max_relative_positions) "
                                  "are not supported",
        "relative_attention_bias": "relative attention bias is not supported",
        "rotary_dim": "rotary position embeddings are not supported",
        "num_heads_kv": "multi-query / grouped-query attention is not supported",
        "encoder/embeddings_1/": "several source embeddings (source features) are not supported",
        "layernorm_embedding": "a LayerNorm on the embeddings is not supported",
        "project_in": "input/output projections around the decoder are not supported",
        "input_layer_norm": "this layer norm layout is not supported",
        "scale_outputs": "a scale on the decoder outputs is not supported",
        "layer_scalar": "layer scalars are not supported",
        "sliding_window": "sliding-window attention is not supported",
    }
    names = list(model.variables) + list(model.aliases)
    for marker, why in markers.items():
        found = next((n for n in names if marker in n), None)
        if found is not None:
            raise refuse(found, why)


def _check_flags(r: _Reader) -> dict[str, Any]:
    """The flags both stacks must agree on, and the defaults that must hold."""
    for name, default in DEFAULT_FLAGS.items():
        value = r.flag(name, default)
        if value != default:
            why = ("alignment heads used for output (a model trained with guided alignment) "
                   "are not supported" if "alignment" in name else "is not supported")
            raise refuse(name, f"{value!r}: {why}")
    flags = {}
    for key in ("pre_norm", "activation", "num_heads"):
        enc, dec = r.flag(f"encoder/{key}"), r.flag(f"decoder/{key}")
        if enc is None or dec is None:
            raise refuse(f"encoder/{key}", "missing")
        if enc != dec:
            raise refuse(f"decoder/{key}", f"{dec!r} differs from the encoder's {enc!r}")
        flags[key] = enc
    if flags["activation"] not in ACTIVATIONS:
        name = ACTIVATION_NAMES.get(flags["activation"], flags["activation"])
        raise refuse("encoder/activation", f"{name} is not supported (ReLU, GELU, swish are)")
    return flags


def _special_ids(config: dict, source: list[str], target: list[str]) -> dict[str, int]:
    """pad/bos/eos/unk ids (one id per role for both vocabularies) and the decoder start."""
    def index(tokens: list[str], token: str, field: str) -> int:
        if token not in tokens:
            raise refuse(f"config.json {field}", f"{token!r} is not in the vocabulary")
        return tokens.index(token)

    tokens = {"bos": config.get("bos_token", "<s>"), "eos": config.get("eos_token", "</s>"),
              "unk": config.get("unk_token", "<unk>")}
    pad = next((t for t in PAD_TOKENS if t in source and t in target), None)
    if pad is None:
        raise refuse("vocabulary", f"no padding token ({' or '.join(PAD_TOKENS)})")
    tokens["pad"] = pad
    ids = {}
    for role, token in tokens.items():
        field = f"{role}_token" if role != "pad" else "vocabulary"
        ids[f"{role}_id"] = index(target, token, field)
        if role in ("pad", "unk") and index(source, token, field) != ids[f"{role}_id"]:
            raise refuse(f"source vocabulary {token}", f"id {source.index(token)} differs from "
                         f"the target's {ids[f'{role}_id']} (one id per special token is "
                         "supported)")
    start = config.get("decoder_start_token", tokens["bos"])
    if start is None:
        raise refuse("config.json decoder_start_token", "null (a target prefix given by the "
                     "caller) is not supported")
    ids["decoder_start_id"] = index(target, start, "decoder_start_token")
    return ids


def to_ours(model: CT2Model, source: list[str], target: list[str]
            ) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, str]]:
    """(ModelConfig fields, state dict as float32 arrays, special token strings)."""
    _check_structure(model)
    r = _Reader(model)
    flags = _check_flags(r)
    state: dict[str, np.ndarray] = {}
    enc_emb_name = next((n for n in ("encoder/embeddings/weight", "encoder/embeddings_0/weight")
                         if r.has(n)), None)
    if enc_emb_name is None:
        raise refuse("encoder/embeddings", "missing")
    src_table, tgt_table = r.weight(enc_emb_name), r.weight("decoder/embeddings/weight")
    d = tgt_table.shape[1]
    if src_table.shape[0] != len(source) or tgt_table.shape[0] != len(target):
        raise refuse("vocabulary", f"{len(source)} source / {len(target)} target tokens, the "
                     f"embeddings {src_table.shape[0]} / {tgt_table.shape[0]} rows")
    shared = (model.resolve(enc_emb_name) == model.resolve("decoder/embeddings/weight")
              or (source == target and np.array_equal(src_table, tgt_table)))
    state["embeddings.lut.weight"] = tgt_table
    if not shared:
        state["source_embeddings.lut.weight"] = src_table
    scaled = {_embedding_scale(r, s, d) for s in ("encoder", "decoder")}
    if len(scaled) > 1:
        raise refuse("decoder/scale_embeddings", "differs from the encoder's")
    projection = r.weight("decoder/projection/weight")
    if projection.shape != tgt_table.shape:
        raise refuse("decoder/projection/weight", f"shape {list(projection.shape)}, expected "
                     f"{list(tgt_table.shape)}")
    tied = (model.resolve("decoder/projection/weight") == model.resolve("decoder/embeddings/weight")
            or np.array_equal(projection, tgt_table))
    if not tied:
        state["output_weight"] = projection
    has_bias = r.has("decoder/projection/bias")
    if has_bias:
        state["output_bias"] = r.weight("decoder/projection/bias").reshape(-1)
    state["positional.table"] = _positions(r, d)

    n_enc, n_dec = _layers(model, "encoder"), _layers(model, "decoder")
    d_ff = set()
    for i in range(n_enc):
        scope, ours = f"encoder/layer_{i}", f"encoder_layers.{i}"
        _norm(r, f"{scope}/self_attention/layer_norm", f"{ours}.attn_norm.norm", d, state)
        _attention(r, f"{scope}/self_attention", f"{ours}.self_attn", d, False, state)
        _norm(r, f"{scope}/ffn/layer_norm", f"{ours}.ff_norm.norm", d, state)
        d_ff.add(_ffn(r, f"{scope}/ffn", f"{ours}.feed_forward", d, state))
    for i in range(n_dec):
        scope, ours = f"decoder/layer_{i}", f"decoder_layers.{i}"
        _norm(r, f"{scope}/self_attention/layer_norm", f"{ours}.self_norm.norm", d, state)
        _attention(r, f"{scope}/self_attention", f"{ours}.self_attn", d, False, state)
        _norm(r, f"{scope}/attention/layer_norm", f"{ours}.cross_norm.norm", d, state)
        _attention(r, f"{scope}/attention", f"{ours}.cross_attn", d, True, state)
        _norm(r, f"{scope}/ffn/layer_norm", f"{ours}.ff_norm.norm", d, state)
        d_ff.add(_ffn(r, f"{scope}/ffn", f"{ours}.feed_forward", d, state))
    if len(d_ff) != 1:
        raise refuse("ffn/linear_0/weight", f"layers of different sizes {sorted(d_ff)}")
    pre_norm = bool(flags["pre_norm"])
    for stack in ("encoder", "decoder"):
        present = r.has(f"{stack}/layer_norm/gamma")
        if pre_norm and not present:
            raise refuse(f"{stack}/layer_norm", "missing: pre-norm models without final "
                         "LayerNorms (no_final_norm) are not supported")
        if not pre_norm and present:
            raise refuse(f"{stack}/layer_norm", "a final LayerNorm in a post-norm model is not "
                         "supported")
        if present:
            _norm(r, f"{stack}/layer_norm", f"{stack}_norm", d, state)

    unused = sorted(n for n in model.variables if n not in r.used)
    if unused:
        raise refuse(f"model.bin variable {unused[0]}",
                     f"not part of the architecture this importer maps ({len(unused)} such)")
    eps = model.config.get("layer_norm_epsilon")
    special = _special_ids(model.config, source, target)
    fields = dict(
        vocab_size=len(target),
        d_model=d,
        n_heads=int(flags["num_heads"]),
        n_encoder_layers=n_enc,
        n_decoder_layers=n_dec,
        d_ff=d_ff.pop(),
        dropout=0.0,
        max_positions=state["positional.table"].shape[0],
        activation=ACTIVATIONS[flags["activation"]],
        positional_layout="stored",
        output_bias=has_bias,
        pre_norm=pre_norm,
        layer_norm_eps=1e-5 if eps is None else float(eps),  # CTranslate2's default with beta
        scale_embeddings=scaled.pop(),
        source_vocab_size=None if shared else len(source),
        tied_output=tied,
        **special,
    )
    tokens = {"pad": target[special["pad_id"]], "bos": target[special["bos_id"]],
              "eos": target[special["eos_id"]], "unk": target[special["unk_id"]]}
    return fields, state, tokens
