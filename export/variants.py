"""Precision variants of the fp32 graphs, made with ONNX Runtime's own tools.

- int8: dynamic quantization (weights int8 per output channel, activations quantized on the fly,
  unless export.calibrate fixes their scales afterwards);
  runs on the CPU provider. Weights use 7 bits (|w| <= 64): on x86 CPUs without VNNI (AVX2 only)
  ONNX Runtime's u8 x s8 kernels add pairs of products in 16 bits, which saturate with full-range
  weights (results measurably off the exact integer result on such a CPU; BENCHMARKS.md);
  7-bit weights never saturate there.
- fp16: written in half precision by export.graphs (not converted here), for the CUDA provider.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path

import onnx

VARIANTS = ("fp32", "int8", "fp16")
log = logging.getLogger(__name__)


WEIGHT_BITS = 7  # see the module docstring: 8-bit weights saturate on CPUs without VNNI


def _inline(src: Path, tmp: Path) -> Path:
    """src, or a copy of it in tmp with its weights inside when it keeps them in an external
    file (export.shared): the quantizer's steps write graphs elsewhere, where the file's
    relative reference would not resolve."""
    from onnx.external_data_helper import convert_model_from_external_data

    graph = onnx.load(str(src), load_external_data=False).graph
    if not any(i.data_location == onnx.TensorProto.EXTERNAL for i in graph.initializer):
        return src
    model = onnx.load(str(src))
    convert_model_from_external_data(model)
    inline = tmp / "inline.onnx"
    onnx.save(model, str(inline))
    return inline


def quantize_int8(src: Path, dst: Path, per_channel: bool = True) -> dict:
    """fp32 graph -> dynamically quantized int8 graph. Returns the settings for the manifest."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory() as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        src = _inline(src, Path(tmp))
        # The symbolic shape inference knows no contrib ops (the step graph's attention): it
        # fails there, leaving temporary files in the working directory, so it is skipped.
        contrib = any(node.domain for node in onnx.load(str(src), load_external_data=False)
                      .graph.node)
        try:  # shape inference + graph cleanup recommended before quantization
            quant_pre_process(str(src), str(prepared), skip_symbolic_shape=contrib)
        except Exception as exc:  # noqa: BLE001 - the tool is optional; fall back to the raw graph
            log.warning("quantization pre-processing failed (%s); quantizing the raw graph", exc)
            shutil.copyfile(src, prepared)
        quantize_dynamic(
            str(prepared),
            str(dst),
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            reduce_range=WEIGHT_BITS == 7,
            op_types_to_quantize=["MatMul", "Gemm"],
            # the step graph's contrib ops have no type inference in the quantizer
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    return {
        "method": "dynamic",
        "weight_type": "int8",
        "weight_bits": WEIGHT_BITS,
        "per_channel": per_channel,
        "op_types": ["MatMul", "Gemm"],
    }
