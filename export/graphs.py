"""Thin export wrappers around model.transformer.Transformer and their ONNX export.

The math stays in the model: the wrappers only stack the per-layer key/value tensors into one
tensor per kind, so each graph has a short, fixed input list.

Encoder graph:  src_ids (B, S) int64
             -> cross_k, cross_v (L, B, H, S, Dh) float, src_mask (B, S) bool (True at real tokens)
Decoder graph:  tokens, positions (B, T) int64, past_k, past_v (L, B, H, Tpast, Dh),
                cross_k, cross_v (L, B, H, S, Dh), src_mask (B, S) bool
             -> log_probs (B, V) of the last new position,
                present_k, present_v (L, B, H, Tpast + T, Dh)
Tpast may be 0 (the first step, or the whole prefix re-run with an empty cache).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from app.engine.bundle import GRAPH_NAMES
from model.transformer import Transformer

ENCODER_INPUTS = GRAPH_NAMES["encoder"]["inputs"]  # the names live with the bundle schema
ENCODER_OUTPUTS = GRAPH_NAMES["encoder"]["outputs"]
DECODER_INPUTS = GRAPH_NAMES["decoder"]["inputs"]
DECODER_OUTPUTS = GRAPH_NAMES["decoder"]["outputs"]
OPSET = 17


class EncoderExport(nn.Module):
    """Source ids -> the stacked cross-attention keys/values of every decoder layer."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        memory, src_mask = self.model.encode(src_ids)  # (B, S, D), (B, 1, 1, S)
        kv = self.model.cross_kv(memory)  # L x ((B, H, S, Dh), (B, H, S, Dh))
        cross_k = torch.stack([k for k, _ in kv])  # (L, B, H, S, Dh)
        cross_v = torch.stack([v for _, v in kv])  # (L, B, H, S, Dh)
        return cross_k, cross_v, src_mask[:, 0, 0, :]  # mask (B, S)


class DecoderExport(nn.Module):
    """One incremental decoder step over T new positions, with the cache in and out."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor,
        past_k: Tensor,
        past_v: Tensor,
        cross_k: Tensor,
        cross_v: Tensor,
        src_mask: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        n_layers = past_k.size(0)
        past = [(past_k[i], past_v[i]) for i in range(n_layers)]  # L x (B, H, Tpast, Dh)
        cross = [(cross_k[i], cross_v[i]) for i in range(n_layers)]  # L x (B, H, S, Dh)
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S)
        logits, present = self.model.decode_step(tokens, positions, cross, mask, past)
        log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (B, V)
        present_k = torch.stack([k for k, _ in present])  # (L, B, H, Tpast + T, Dh)
        present_v = torch.stack([v for _, v in present])  # (L, B, H, Tpast + T, Dh)
        return log_probs, present_k, present_v


def example_inputs(
    model: Transformer, batch: int = 2, src_len: int = 5, new: int = 3, past: int = 2
):
    """Dummy inputs for tracing. Every dynamic axis gets a distinct size > 1, so the tracer
    cannot confuse two axes or specialise one to a constant."""
    c = model.config
    src = torch.randint(4, c.vocab_size, (batch, src_len))  # (B, S)
    kv_shape = (c.n_decoder_layers, batch, c.n_heads, past, c.head_dim)  # (L, B, H, Tpast, Dh)
    cross_shape = (c.n_decoder_layers, batch, c.n_heads, src_len, c.head_dim)  # (L, B, H, S, Dh)
    decoder = (
        torch.randint(4, c.vocab_size, (batch, new)),
        torch.arange(past, past + new).expand(batch, new),
        torch.randn(kv_shape),
        torch.randn(kv_shape),
        torch.randn(cross_shape),
        torch.randn(cross_shape),
        torch.ones(batch, src_len, dtype=torch.bool),
    )
    return (src,), decoder


ENCODER_AXES = {
    "src_ids": {0: "batch", 1: "src_len"},
    "cross_k": {1: "batch", 3: "src_len"},
    "cross_v": {1: "batch", 3: "src_len"},
    "src_mask": {0: "batch", 1: "src_len"},
}
DECODER_AXES = {
    "tokens": {0: "batch", 1: "new_len"},
    "positions": {0: "batch", 1: "new_len"},
    "past_k": {1: "batch", 3: "past_len"},
    "past_v": {1: "batch", 3: "past_len"},
    "cross_k": {1: "batch", 3: "src_len"},
    "cross_v": {1: "batch", 3: "src_len"},
    "src_mask": {0: "batch", 1: "src_len"},
    "log_probs": {0: "batch"},
    "present_k": {1: "batch", 3: "total_len"},
    "present_v": {1: "batch", 3: "total_len"},
}


def _export(module: nn.Module, args: tuple, path: Path, inputs, outputs, axes) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about python ints in the mask code
        torch.onnx.export(
            module,
            args,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return path


@torch.no_grad()
def export_graphs(model: Transformer, out_dir: str | Path) -> tuple[Path, Path]:
    """Write encoder.onnx and decoder.onnx (fp32) for model into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    enc_args, dec_args = example_inputs(model)
    encoder = _export(
        EncoderExport(model),
        enc_args,
        out / "encoder.onnx",
        ENCODER_INPUTS,
        ENCODER_OUTPUTS,
        ENCODER_AXES,
    )
    decoder = _export(
        DecoderExport(model),
        dec_args,
        out / "decoder.onnx",
        DECODER_INPUTS,
        DECODER_OUTPUTS,
        DECODER_AXES,
    )
    return encoder, decoder
