"""A bundle's two graphs, written node by node from the model's weights with ONNX Runtime's
fused attention ops (the math is the model's, model/layers.py: post-norm or pre-norm layers with
final norms, scaled (or unscaled) tied embeddings plus sinusoidal or stored positions, separate
source embeddings or output projection, the same activation and output bias options).

Encoder graph:  src_ids (B, S) int64
             -> cross_k, cross_v (L, B, H, S, Dh) float: every decoder layer's cross-attention
                keys/values of the memory; src_mask (B, S) bool (True at real tokens)

Decoder step graph (format 3): one call advances every row of a running batch by one token. The
self-attention cache is one preallocated buffer per layer and kind, (R, H, M, Dp), that the engine
binds as both the past input and the present output: GroupQueryAttention writes the new key/value
of row r at position past_lengths[r] in place, so no step copies the cache, and rows may be at
different positions (a row joins a running batch with past_length 0). Cross-attention
keys/values are stored once per sentence, (N, H, S, Dh): the R = N x K rows of a step are the K
beams of N sentences, so the beams of a sentence are its queries. The search tail runs in the
graph: log-softmax over the vocabulary and the top-k per row, so V-wide arrays never reach Python.

Inputs:   tokens, positions (R,) int64; past_lengths (R,) int32; total_length () int32 (the
          longest past + 1); top_k (1,) int64; cache_k_<i>, cache_v_<i> (R, H, M, Dp), Dp the
          head size rounded up to a multiple of 8 (cache_head_dim); cross_k_<i>, cross_v_<i>
          (N, H, S, Dh); cross_mask (N, S) int32 (1 at real tokens)
Outputs:  top_log_probs (R, k) float32, top_ids (R, k) int64 (best first, lower id on ties);
          cache_k_<i>_out, cache_v_<i>_out (the same buffers as the inputs)

Parameters keep the model's names (PARAM_PREFIX + name; a linear layer's weight, stored
transposed for MatMul, is named by its bias), so export.unbundle reads them back.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from app.engine.bundle import graph_names
from app.engine.step import cache_head_dim
from model.transformer import Transformer

OPSET = 17
MS_DOMAIN = "com.microsoft"
PARAM_PREFIX = "model."  # parameter names: the model's, under this prefix
QKV = "qkv"  # the fused Q, K, V projection of a self-attention, in place of w_q, w_k, w_v
OUTPUT_W = "output_w"  # the output projection's matrix, (D, V)
POSITIONS = "positions_table"  # (P, D), the same in both graphs


class _Builder:
    """Collects nodes and initializers; each method adds a few nodes and returns the output name."""

    def __init__(self, float16: bool = False) -> None:
        self.float_type = np.float16 if float16 else np.float32  # of weights and activations
        self.onnx_float = TensorProto.FLOAT16 if float16 else TensorProto.FLOAT
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, hint: str, value: np.ndarray, exact_name: bool = False) -> str:
        """An initializer; floating-point values in the graph's float type."""
        name = hint if exact_name else self.name(hint)
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype(self.float_type)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs):
        outputs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, domain=domain, **attrs))
        return outputs[0] if n_out == 1 else outputs

    def linear(self, x: str, layer: torch.nn.Linear, path: str) -> str:
        """x (..., Din) @ W^T + b, the weight stored (Din, Dout) for MatMul. The bias keeps the
        model's parameter name (PARAM_PREFIX + path), which names the weight for export.unbundle."""
        w = self.const(f"{path}.weight_t", layer.weight.detach().float().numpy().T, True)
        b = self.const(f"{PARAM_PREFIX}{path}.bias", layer.bias.detach().float().numpy(), True)
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def norm(self, x: str, norm: torch.nn.LayerNorm, path: str) -> str:
        """LayerNorm(x) with the model's parameter names."""
        scale = self.const(f"{PARAM_PREFIX}{path}.weight", norm.weight.detach().float().numpy(),
                           True)
        bias = self.const(f"{PARAM_PREFIX}{path}.bias", norm.bias.detach().float().numpy(), True)
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=float(norm.eps))

    def pre(self, x: str, residual, path: str) -> str:
        """What a sub-layer reads: x (post-norm), or LayerNorm(x) (pre-norm); residual is the
        model's ResidualNorm at `path`."""
        return self.norm(x, residual.norm, f"{path}.norm") if residual.pre_norm else x

    def layer_norm(self, x: str, out: str, residual, path: str) -> str:
        """The residual around a sub-layer's output: LayerNorm(x + out) post-norm, x + out
        pre-norm (residual: the model's ResidualNorm at `path`)."""
        if residual.pre_norm:
            return self.op("Add", [x, out])
        # standard Add + LayerNormalization: quicker than ONNX Runtime's fused
        # SkipLayerNormalization CPU kernel (the CPU sessions keep them apart; other providers
        # may fuse them)
        return self.norm(self.op("Add", [x, out]), residual.norm, f"{path}.norm")

    def feed_forward(self, x: str, layer, path: str, activation: str) -> str:
        """A layer's feed-forward sub-layer with its residual and norm."""
        h = self.pre(x, layer.ff_norm, f"{path}.ff_norm")
        ff = self.linear(h, layer.feed_forward.w_1, f"{path}.feed_forward.w_1")
        ff = self.linear(self.activation(ff, activation), layer.feed_forward.w_2,
                         f"{path}.feed_forward.w_2")
        return self.layer_norm(x, ff, layer.ff_norm, f"{path}.ff_norm")

    def model(self, name: str, names: dict[str, list[str]], shapes: dict) -> onnx.ModelProto:
        """The checked model of the nodes so far; shapes: name -> (element type, dims)."""
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(n, *shapes[n]) for n in names["inputs"]],
            [helper.make_tensor_value_info(n, *shapes[n]) for n in names["outputs"]],
            initializer=self.initializers,
        )
        proto = helper.make_model(
            graph, producer_name="nmt-service export.graphs",
            opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)],
        )
        onnx.checker.check_model(proto)
        return proto

    def activation(self, x: str, kind: str) -> str:
        if kind == "relu":
            return self.op("Relu", [x])
        if kind == "swish":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        # exact (erf) GELU, as torch.nn.functional.gelu computes it
        half = self.const("half", np.array(0.5, np.float32))
        one = self.const("one", np.array(1.0, np.float32))
        inv_sqrt2 = self.const("inv_sqrt2", np.array(1 / math.sqrt(2), np.float32))
        erf = self.op("Erf", [self.op("Mul", [x, inv_sqrt2])])
        return self.op("Mul", [self.op("Mul", [x, half]), self.op("Add", [erf, one])])


TOP_K_BLOCK = 32  # vocabulary entries per block of block_top_k


def block_top_k(g: _Builder, scores: str, vocab: int, k: str, outputs: tuple[str, str]) -> None:
    """outputs = (values, ids) of the k best entries of each row of scores (R, V), best first and
    the lower id first among equal values: the same as one TopK node, found in two stages.

    ONNX Runtime's TopK scans a row one entry at a time (even for k = 1), while ReduceMax is
    vectorized. So: the row is cut into
    blocks of TOP_K_BLOCK entries (padded with -inf), the k blocks with the highest maxima are
    found (a TopK over V / TOP_K_BLOCK values), and a TopK over their k x TOP_K_BLOCK entries
    gives the result. Each of the k best entries lies in one of those blocks: a block ranked
    below k others has k entries (their maxima) ranked above its own best. Taking the chosen
    blocks in ascending order keeps ties resolved by the lower id. Quicker for batches, the same
    for one row (BENCHMARKS.md)."""
    blocks = -(-vocab // TOP_K_BLOCK)
    if blocks * TOP_K_BLOCK > vocab:  # pad the row to whole blocks with -inf
        pads = g.const("top_k_pads", np.array([0, 0, 0, blocks * TOP_K_BLOCK - vocab]))
        minus_inf = g.name("minus_inf")  # float32 as the scores, also in a float16 graph
        g.initializers.append(numpy_helper.from_array(np.array(-np.inf, np.float32), minus_inf))
        scores = g.op("Pad", [scores, pads, minus_inf])
    grid = g.op("Reshape", [scores, g.const("blocks", np.array([0, blocks, TOP_K_BLOCK]))])
    best = g.op("ReduceMax", [grid], axes=[-1], keepdims=0)  # (R, blocks)
    kb = g.op("Min", [k, g.const("block_count", np.array([blocks]))])  # (1,): k <= blocks
    _, chosen = g.op("TopK", [best, kb], n_out=2, axis=-1)  # (R, kb) block indices
    chosen, _ = g.op("TopK", [chosen, kb], n_out=2, axis=-1, largest=0)  # ascending
    index = g.op("Expand", [g.op("Unsqueeze", [chosen, g.const("axis2", np.array([2]))]),
                            g.const("block_shape", np.array([1, 1, TOP_K_BLOCK]))])
    picked = g.op("GatherElements", [grid, index], axis=1)  # (R, kb, block)
    picked = g.op("Reshape", [picked, g.const("rows_flat", np.array([0, -1]))])  # (R, kb*block)
    at = g.name("top_k_at")
    g.nodes.append(helper.make_node("TopK", [picked, k], [outputs[0], at], axis=-1))  # (R, k)
    size = g.const("block_size", np.array(TOP_K_BLOCK))
    block = g.op("GatherElements", [chosen, g.op("Div", [at, size])], axis=1)  # (R, k)
    offset = g.op("Mod", [at, size])
    g.nodes.append(helper.make_node("Add", [g.op("Mul", [block, size]), offset], [outputs[1]]))


def _pad_heads(w: torch.Tensor, heads: int, padded: int, dim: int) -> torch.Tensor:
    """Pad each head's block of size Dh along `dim` (of size H * Dh) with zeros to `padded`."""
    shape = list(w.shape)
    split = shape[:dim] + [heads, shape[dim] // heads] + shape[dim + 1 :]
    w = w.reshape(split)  # (..., H, Dh, ...)
    pad = [0, 0] * (w.dim() - dim - 2) + [0, padded - split[dim + 1]]
    w = torch.nn.functional.pad(w, pad)  # (..., H, Dp, ...)
    return w.reshape(shape[:dim] + [heads * padded] + shape[dim + 1 :])


def _self_attention(layer, heads: int, padded: int) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """The self-attention's Q, K and V projections as one (D -> 3 H Dp) linear layer, and its
    output projection taking (H Dp) inputs: both with heads padded to Dp dimensions (no padding
    when Dp = Dh)."""
    attn = layer.self_attn
    d = attn.w_q.in_features
    qkv = torch.nn.Linear(d, 3 * heads * padded)
    out = torch.nn.Linear(heads * padded, d)
    with torch.no_grad():
        parts = (attn.w_q, attn.w_k, attn.w_v)
        qkv.weight.copy_(torch.cat([_pad_heads(p.weight, heads, padded, 0) for p in parts]))
        qkv.bias.copy_(torch.cat([_pad_heads(p.bias, heads, padded, 0) for p in parts]))
        out.weight.copy_(_pad_heads(attn.w_o.weight, heads, padded, 1))
        out.bias.copy_(attn.w_o.bias)
    return qkv, out


def projection_table(g: _Builder, model: Transformer) -> str:
    """The output projection's weight, transposed (D, V) for MatMul: the initializer OUTPUT_W."""
    return g.const(OUTPUT_W, model.projection.detach().float().numpy().T, True)


def gather_columns(g: _Builder, table: str, ids: str, scale: float, rank: int) -> str:
    """Embeddings of ids (rank 1 or 2) read from the columns of a (D, V) table, times scale:
    (D, *ids) -> (*ids, D). How a graph that shares its embedding with the output projection
    reads it, so the matrix is stored once (see export.shared)."""
    x = g.op("Transpose", [g.op("Gather", [table, ids], axis=1)],
             perm=[*range(1, rank + 1), 0])  # (*ids, D)
    if scale != 1.0:
        x = g.op("Mul", [x, g.const("emb_scale", np.array(scale, np.float32))])
    return x


def shares_embedding(model: Transformer, share: bool) -> bool:
    """Whether a graph reads its target-side (and, shared, source-side) embedding from the
    output projection: asked for, and the projection is that embedding."""
    return share and model.config.tied_output


@torch.no_grad()
def build_step_graph(model: Transformer, float16: bool = False,
                     share: bool = False) -> onnx.ModelProto:
    """The decoder step graph; float16: weights, activations and caches in half precision
    (for the CUDA provider), the log-softmax and top-k still in float32. share: the token
    embedding is read from the output projection's matrix (tied models), not a copy of its own."""
    c = model.config
    names = graph_names(c.n_decoder_layers)["decoder"]
    g = _Builder(float16)
    d, heads, head_dim = c.d_model, c.n_heads, c.d_model // c.n_heads
    padded = cache_head_dim(head_dim)
    scale = {} if padded == head_dim else {"scale": 1 / math.sqrt(head_dim)}

    # embeddings: the scaled token table and the position table, (R,) -> (R, 1, D)
    table = model.embeddings.weight.float().numpy()  # (V, D)
    output_w = projection_table(g, model)  # (D, V)
    if shares_embedding(model, share):
        emb = gather_columns(g, output_w, "tokens", model.embeddings.scale, 1)  # (R, D)
    else:
        scaled = (torch.from_numpy(table) * model.embeddings.scale).numpy()  # the model's product
        emb = g.op("Gather", [g.const("embedding", scaled), "tokens"])  # (R, D)
    pos = g.op("Gather", [g.const(POSITIONS, model.positional.table.numpy(), True), "positions"])
    x = g.op("Unsqueeze", [g.op("Add", [emb, pos]), g.const("axis1", np.array([1]))])  # (R, 1, D)

    # the row grid of cross-attention: (R, 1, D) <-> (N, K, D), N from the cross cache
    n_sent = g.op("Slice", [g.op("Shape", ["cross_k_0"]), g.const("zero", np.array([0])),
                            g.const("one", np.array([1]))])  # (1,) = N
    grid_shape = g.op("Concat", [n_sent, g.const("grid_tail", np.array([-1, d]))], axis=0)
    rows_shape = g.const("rows_shape", np.array([-1, 1, d]))

    for i, layer in enumerate(model.decoder_layers):
        p = f"decoder_layers.{i}"
        qkv_proj, out_proj = _self_attention(layer, heads, padded)
        h = g.pre(x, layer.self_norm, f"{p}.self_norm")
        qkv = g.linear(h, qkv_proj, f"{p}.self_attn.{QKV}")  # (R, 1, 3 H Dp)
        attn, _, _ = g.op(
            "GroupQueryAttention",
            [qkv, "", "", f"cache_k_{i}", f"cache_v_{i}", "past_lengths", "total_length"],
            n_out=3, domain=MS_DOMAIN, num_heads=heads, kv_num_heads=heads, **scale,
        )  # (R, 1, H Dp), the caches written in place
        g.nodes[-1].output[1:] = [f"cache_k_{i}_out", f"cache_v_{i}_out"]
        attn = g.linear(attn, out_proj, f"{p}.self_attn.w_o")
        x = g.layer_norm(x, attn, layer.self_norm, f"{p}.self_norm")

        h = g.pre(x, layer.cross_norm, f"{p}.cross_norm")
        q = g.linear(h, layer.cross_attn.w_q, f"{p}.cross_attn.w_q")  # (R, 1, D)
        q = g.op("Reshape", [q, grid_shape])  # (N, K, D)
        ctx = g.op(
            "MultiHeadAttention",
            [q, f"cross_k_{i}", f"cross_v_{i}", "", "cross_mask"],
            domain=MS_DOMAIN, num_heads=heads,
        )  # (N, K, D)
        ctx = g.op("Reshape", [ctx, rows_shape])  # (R, 1, D)
        ctx = g.linear(ctx, layer.cross_attn.w_o, f"{p}.cross_attn.w_o")
        x = g.layer_norm(x, ctx, layer.cross_norm, f"{p}.cross_norm")

        x = g.feed_forward(x, layer, p, c.activation)

    if model.decoder_norm is not None:  # pre-norm: the decoder stack's final LayerNorm
        x = g.norm(x, model.decoder_norm, "decoder_norm")
    # output projection (tied: without `share`, the transposed table stored once more for
    # MatMul), log-softmax, top-k
    logits = g.op("MatMul", [x, output_w])  # (R, 1, V)
    if model.output_bias is not None:
        bias = g.const(f"{PARAM_PREFIX}output_bias", model.output_bias.float().numpy(), True)
        logits = g.op("Add", [logits, bias])
    logits = g.op("Reshape", [logits, g.const("rows_v", np.array([0, -1]))])  # (R, V)
    if float16:  # scores add up in float32
        logits = g.op("Cast", [logits], to=TensorProto.FLOAT)
    log_probs = g.op("LogSoftmax", [logits], axis=-1)  # (R, V)
    block_top_k(g, log_probs, table.shape[0], "top_k", ("top_log_probs", "top_ids"))

    f32, i64, i32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
    cache = ["rows", heads, "max_len", padded]
    cross = ["sentences", heads, "src_len", head_dim]
    shapes = {"tokens": (i64, ["rows"]), "positions": (i64, ["rows"]),
              "past_lengths": (i32, ["rows"]), "total_length": (i32, []), "top_k": (i64, [1]),
              "cross_mask": (i32, ["sentences", "src_len"]),
              "top_log_probs": (f32, ["rows", "k"]), "top_ids": (i64, ["rows", "k"])}
    for name in names["inputs"] + names["outputs"]:
        shapes.setdefault(name, (g.onnx_float, cross if name.startswith("cross") else cache))
    return g.model("decoder_step", names, shapes)


def source_embedding(g: _Builder, model: Transformer, share: bool) -> str:
    """(B, S) source ids -> (B, S, D) scaled token embeddings. share (a tied model with one
    vocabulary): read from the output projection's matrix, as the decoder does."""
    if shares_embedding(model, share) and model.source_embeddings is None:
        return gather_columns(g, projection_table(g, model), "src_ids", model.embeddings.scale, 2)
    table = model.source_table
    name = "source_embeddings" if model.source_embeddings is not None else "embeddings"
    weight = g.const(f"{PARAM_PREFIX}{name}.lut.weight", table.weight.numpy(), True)
    return g.op("Mul", [g.op("Gather", [weight, "src_ids"]),
                        g.const("emb_scale", np.array(table.scale, np.float32))])


@torch.no_grad()
def build_encoder_graph(model: Transformer, float16: bool = False,
                        share: bool = False) -> onnx.ModelProto:
    """The encoder graph; float16: in half precision, cross keys/values included. share: see
    build_step_graph."""
    c = model.config
    names = graph_names(c.n_decoder_layers)["encoder"]
    g = _Builder(float16)
    d, heads, head_dim = c.d_model, c.n_heads, c.d_model // c.n_heads

    # padding mask, token embeddings scaled as the model scales them, positions 0..S-1
    src_mask = g.op("Not", [g.op("Equal", ["src_ids", g.const("pad", np.array(c.pad_id))])])
    g.nodes.append(helper.make_node("Identity", [src_mask], ["src_mask"]))  # (B, S) bool
    key_mask = g.op("Cast", [src_mask], to=TensorProto.INT32)  # (B, S), 1 at real tokens
    emb = source_embedding(g, model, share)  # (B, S, D)
    length = g.op("Shape", ["src_ids"], start=1, end=2)  # (1,) = S
    pos = g.op("Slice", [g.const(POSITIONS, model.positional.table.numpy(), True),
                         g.const("zero", np.array([0])), length])  # (S, D): positions 0..S-1
    x = g.op("Add", [emb, pos])  # (B, S, D) + (S, D)

    for i, layer in enumerate(model.encoder_layers):
        p = f"encoder_layers.{i}"
        qkv_proj, out_proj = _self_attention(layer, heads, head_dim)  # no padding here
        h = g.pre(x, layer.attn_norm, f"{p}.attn_norm")
        qkv = g.linear(h, qkv_proj, f"{p}.self_attn.{QKV}")  # (B, S, 3D)
        q, k, v = g.op("Split", [qkv, g.const("thirds", np.array([d, d, d]))], n_out=3, axis=-1)
        attn = g.op("MultiHeadAttention", [q, k, v, "", key_mask], domain=MS_DOMAIN,
                    num_heads=heads)  # (B, S, D)
        attn = g.linear(attn, out_proj, f"{p}.self_attn.w_o")
        x = g.layer_norm(x, attn, layer.attn_norm, f"{p}.attn_norm")
        x = g.feed_forward(x, layer, p, c.activation)
    if model.encoder_norm is not None:  # pre-norm: the encoder stack's final LayerNorm
        x = g.norm(x, model.encoder_norm, "encoder_norm")

    # every decoder layer's cross keys/values of the memory, stacked: (L, B, H, S, Dh)
    split_heads = g.const("split_heads", np.array([0, 0, heads, head_dim]))
    first = g.const("axis0", np.array([0]))
    for kind in ("k", "v"):
        per_layer = []
        for i, layer in enumerate(model.decoder_layers):
            proj = getattr(layer.cross_attn, f"w_{kind}")
            y = g.linear(x, proj, f"decoder_layers.{i}.cross_attn.w_{kind}")  # (B, S, D)
            y = g.op("Transpose", [g.op("Reshape", [y, split_heads])], perm=[0, 2, 1, 3])
            per_layer.append(g.op("Unsqueeze", [y, first]))  # (1, B, H, S, Dh)
        g.nodes.append(helper.make_node("Concat", per_layer, [f"cross_{kind}"], axis=0))

    cross = (g.onnx_float, [c.n_decoder_layers, "batch", heads, "src_len", head_dim])
    shapes = {"src_ids": (TensorProto.INT64, ["batch", "src_len"]), "cross_k": cross,
              "cross_v": cross, "src_mask": (TensorProto.BOOL, ["batch", "src_len"])}
    return g.model("encoder", names, shapes)


def export_graphs(model: Transformer, out_dir: str | Path, float16: bool = False,
                  share: bool = False) -> tuple[Path, Path]:
    """Write encoder.onnx and decoder.onnx (fp32, or fp16) for model into out_dir; share: both
    read the embedding from the output projection's matrix (see build_step_graph)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    paths = out / "encoder.onnx", out / "decoder.onnx"
    for build, path in zip((build_encoder_graph, build_step_graph), paths, strict=True):
        onnx.save(build(model, float16, share), str(path))
    return paths
