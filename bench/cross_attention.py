"""Cross-attention of one decoder step: MultiHeadAttention over padded sources (what the step
graph runs) against GroupQueryAttention over each sentence's own length.

    python -m bench.cross_attention [--sentences data/en-de/test.en] [--rows 16] [--beams 1,4]

A running batch holds sentences of different source lengths. `MultiHeadAttention` with a key
padding mask attends over the longest source for every sentence; `GroupQueryAttention` takes a
length per sentence (`seqlens_k`) and reads each sentence's keys only up to its own length. Fed
the cross keys/values as its past and, as the "new" key/value, each sentence's last source
position (written back in place, to where it already is), it computes the same attention. The
K beams of a sentence share its keys as K query heads per key head (num_heads = H x K).

For three batches (all sources of 20 tokens; lengths drawn at random from --sentences, as the
service's arrivals mix them; 16 neighbours of the length-sorted order, as offline batches are)
it prints the time of one call of each op on one thread (best of 3) and their largest
difference.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

MS_DOMAIN = "com.microsoft"
HEADS, HEAD_DIM = 4, 64  # the shipped model's
F32, I32 = TensorProto.FLOAT, TensorProto.INT32


def _session(nodes, inputs, outputs) -> ort.InferenceSession:
    graph = helper.make_graph(
        nodes, "cross_attention",
        [helper.make_tensor_value_info(name, dtype, shape) for name, dtype, shape in inputs],
        [helper.make_tensor_value_info(name, dtype, shape) for name, dtype, shape in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS_DOMAIN, 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def padded_attention(heads: int, head_dim: int) -> ort.InferenceSession:
    """q (N, K, D), k/v (N, H, S, Dh), mask (N, S) int32 -> (N, K, D)."""
    d, cache = heads * head_dim, ["N", heads, "S", head_dim]
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "mask"], ["o"],
                            domain=MS_DOMAIN, num_heads=heads)
    return _session([node], [("q", F32, ["N", "K", d]), ("k", F32, cache), ("v", F32, cache),
                             ("mask", I32, ["N", "S"])], [("o", F32, ["N", "K", d])])


def own_length_attention(heads: int, head_dim: int, beams: int) -> ort.InferenceSession:
    """q (N, 1, H K Dh) with heads ordered (H, K), new k/v (N, 1, H Dh), past k/v (N, H, S, Dh)
    (bound as the present outputs too), seqlens (N,) int32, total () int32 -> (N, 1, H K Dh)."""
    d, cache = heads * head_dim, ["N", heads, "S", head_dim]
    node = helper.make_node(
        "GroupQueryAttention", ["q", "nk", "nv", "pk", "pv", "seqlens", "total"],
        ["o", "pk_out", "pv_out"], domain=MS_DOMAIN, num_heads=heads * beams, kv_num_heads=heads)
    return _session(
        [node],
        [("q", F32, ["N", 1, d * beams]), ("nk", F32, ["N", 1, d]), ("nv", F32, ["N", 1, d]),
         ("pk", F32, cache), ("pv", F32, cache), ("seqlens", I32, ["N"]), ("total", I32, [])],
        [("o", F32, ["N", 1, d * beams]), ("pk_out", F32, cache), ("pv_out", F32, cache)])


def _bound(session: ort.InferenceSession, inputs: dict, outputs: dict):
    binding = session.io_binding()
    for bind, arrays in ((binding.bind_input, inputs), (binding.bind_output, outputs)):
        for name, array in arrays.items():
            bind(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)
    return binding


def _best_us(session: ort.InferenceSession, binding, reps: int) -> float:
    for _ in range(10):
        session.run_with_iobinding(binding)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(reps):
            session.run_with_iobinding(binding)
        best = min(best, (time.perf_counter() - start) / reps)
    return best * 1e6


def compare(lengths: np.ndarray, beams: int, reps: int = 200, seed: int = 0) -> dict[str, float]:
    """One call of each form on sources of these lengths (EOS included), `beams` queries per
    sentence: their times in us and the largest difference of their outputs."""
    rng = np.random.default_rng(seed)
    n, width, d = len(lengths), int(lengths.max()), HEADS * HEAD_DIM
    q = rng.standard_normal((n, beams, d), dtype=np.float32)
    k = rng.standard_normal((n, HEADS, width, HEAD_DIM), dtype=np.float32)
    v = rng.standard_normal((n, HEADS, width, HEAD_DIM), dtype=np.float32)
    mask = (np.arange(width)[None] < lengths[:, None]).astype(np.int32)
    padded = padded_attention(HEADS, HEAD_DIM)
    out_padded = np.empty((n, beams, d), np.float32)
    b_padded = _bound(padded, {"q": q, "k": k, "v": v, "mask": mask}, {"o": out_padded})

    own = own_length_attention(HEADS, HEAD_DIM, beams)
    last = lengths - 1
    q_heads = np.ascontiguousarray(  # (N, K, H, Dh) -> (N, H, K, Dh): K query heads per key head
        q.reshape(n, beams, HEADS, HEAD_DIM).transpose(0, 2, 1, 3).reshape(n, 1, d * beams))
    new_k = np.ascontiguousarray(k[np.arange(n), :, last].reshape(n, 1, d))
    new_v = np.ascontiguousarray(v[np.arange(n), :, last].reshape(n, 1, d))
    out_own = np.empty((n, 1, d * beams), np.float32)
    b_own = _bound(own, {"q": q_heads, "nk": new_k, "nv": new_v, "pk": k, "pv": v,
                         "seqlens": last.astype(np.int32), "total": np.array(width, np.int32)},
                   {"o": out_own, "pk_out": k, "pv_out": v})  # the past written in place

    padded.run_with_iobinding(b_padded)
    own.run_with_iobinding(b_own)
    back = out_own.reshape(n, HEADS, beams, HEAD_DIM).transpose(0, 2, 1, 3).reshape(n, beams, d)
    return {"padded_us": _best_us(padded, b_padded, reps), "own_us": _best_us(own, b_own, reps),
            "max_diff": float(np.abs(back - out_padded).max())}


def batches(lengths: list[int], rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Source lengths of three running batches of `rows` sentences (see the top)."""
    rng = np.random.default_rng(seed)
    ordered = np.sort(lengths)
    middle = len(ordered) // 2
    return {"uniform 20": np.full(rows, 20),
            "mixed (arrival order)": rng.choice(lengths, rows),
            "sorted neighbours": ordered[middle: middle + rows]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=Path, default=Path("data/en-de/test.en"))
    parser.add_argument("--tokenizer", type=Path, default=Path("bundles/en-de/sentencepiece.model"))
    parser.add_argument("--rows", type=int, default=16, help="sentences in the running batch")
    parser.add_argument("--beams", default="1,4")
    args = parser.parse_args(argv)
    import sentencepiece as spm

    if not args.sentences.exists():
        parser.error(f"{args.sentences} not found: build the corpus (python -m model.corpus "
                     "build) or pass --sentences")
    sp = spm.SentencePieceProcessor(model_file=str(args.tokenizer))
    texts = args.sentences.read_text(encoding="utf-8").splitlines()
    lengths = [len(ids) + 1 for ids in sp.encode(texts)]  # EOS included, as the encoder sees
    print("| beams | batch | longest | mean length | MultiHeadAttention us "
          "| GroupQueryAttention us | largest difference |\n|---|---|---:|---:|---:|---:|---:|")
    for beams in (int(b) for b in args.beams.split(",")):
        for name, batch in batches(lengths, args.rows).items():
            found = compare(batch, beams)
            print(f"| {beams} | {name} | {batch.max()} | {batch.mean():.1f} "
                  f"| {found['padded_us']:.1f} | {found['own_us']:.1f} "
                  f"| {found['max_diff']:.1e} |", flush=True)


if __name__ == "__main__":
    main()
