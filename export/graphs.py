"""A bundle's two graphs: the encoder traced from the model, the decoder step written from its
weights (export/step_graph.py, which documents the decoder's inputs and outputs).

Encoder graph:  src_ids (B, S) int64
             -> cross_k, cross_v (L, B, H, S, Dh) float, src_mask (B, S) bool (True at real tokens)
The math stays in the model: the wrapper only stacks the per-layer keys/values into one tensor per
kind (the engine hands each layer's slice to the decoder step without copying).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from app.engine.bundle import ENCODER_NAMES  # the names live with the bundle schema
from export.step_graph import export_step_graph
from model.transformer import Transformer

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


def example_inputs(model: Transformer, batch: int = 2, src_len: int = 5) -> tuple:
    """Dummy encoder inputs for tracing, every dynamic axis a distinct size > 1."""
    return (torch.randint(4, model.config.vocab_size, (batch, src_len)),)  # (B, S)


ENCODER_AXES = {
    "src_ids": {0: "batch", 1: "src_len"},
    "cross_k": {1: "batch", 3: "src_len"},
    "cross_v": {1: "batch", 3: "src_len"},
    "src_mask": {0: "batch", 1: "src_len"},
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
    """Write encoder.onnx (traced from the model) and decoder.onnx (the step graph, written
    from the weights) in fp32 into out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    encoder = _export(
        EncoderExport(model),
        example_inputs(model),
        out / "encoder.onnx",
        ENCODER_NAMES["inputs"],
        ENCODER_NAMES["outputs"],
        ENCODER_AXES,
    )
    return encoder, export_step_graph(model, out / "decoder.onnx")
