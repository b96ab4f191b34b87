"""Does ONNX Runtime's int8 MatMul on this CPU give the exact integer result?

    python -m bench.int8_exactness [--k 256] [--n 8000] [--rows 16]

Builds one DynamicQuantizeMatMul (the op our int8 graphs run after ONNX Runtime's fusions) with
random weights quantized per output channel to 8 bits (|w| <= 127) and to 7 bits (|w| <= 64),
runs it, and compares with the same integer arithmetic done exactly in numpy. On x86 CPUs
without VNNI the u8 x s8 kernels add pairs of products in 16 bits, and 8-bit weights saturate
there; 7-bit weights (what `export` writes) do not. Prints the CPU's vector extensions and, per
weight width, the largest error against the exact result and against fp32, as a share of the
largest output.
"""

from __future__ import annotations

import argparse

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from model.hardware import cpu_info


def cpu_flags() -> list[str]:
    """The vector extensions that matter for int8 (from /proc/cpuinfo; empty elsewhere)."""
    flags = set(cpu_info()[1].split())
    return sorted(flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8"})


def session(weights: np.ndarray, scales: np.ndarray) -> ort.InferenceSession:
    k, n = weights.shape
    node = helper.make_node("DynamicQuantizeMatMul", ["A", "W", "S", "Z"], ["Y"],
                            domain="com.microsoft")
    graph = helper.make_graph(
        [node], "int8_matmul",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        [numpy_helper.from_array(weights, "W"), numpy_helper.from_array(scales, "S"),
         numpy_helper.from_array(np.zeros(n, np.int8), "Z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def exact(a: np.ndarray, weights: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """DynamicQuantizeLinear (uint8, one scale and zero point for the matrix), then the integer
    product without any saturation, then the scales."""
    low, high = min(float(a.min()), 0.0), max(float(a.max()), 0.0)
    scale = (high - low) / 255
    zero = np.clip(np.round(-low / scale), 0, 255)
    quantized = np.clip(np.round(a / scale) + zero, 0, 255)
    return ((quantized - zero) @ weights.astype(np.float64)) * scale * scales


def errors(k: int, n: int, rows: int) -> dict[int, tuple[float, float]]:
    """Per weight width (8, 7): the largest error against the exact integer result and against
    fp32, each as a share of the largest output."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    reference = a @ w
    top = float(np.abs(reference).max())
    found = {}
    for bits, qmax in ((8, 127), (7, 64)):
        scales = (np.abs(w).max(axis=0) / qmax).astype(np.float32)
        weights = np.round(w / scales).astype(np.int8)
        out = session(weights, scales).run(None, {"A": a})[0]
        found[bits] = (float(np.abs(out - exact(a, weights, scales)).max()) / top,
                       float(np.abs(out - reference).max()) / top)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=256, help="inner dimension (d_model)")
    parser.add_argument("--n", type=int, default=8000, help="outputs (the vocabulary)")
    parser.add_argument("--rows", type=int, default=16)
    args = parser.parse_args(argv)
    print(f"ONNX Runtime {ort.__version__}; CPU flags: {' '.join(cpu_flags()) or 'unknown'}")
    for bits, (off_exact, off_fp32) in errors(args.k, args.n, args.rows).items():
        print(f"{bits}-bit weights: off the exact integer result by {off_exact:.2%}, off fp32 by "
              f"{off_fp32:.2%} of the largest output")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
