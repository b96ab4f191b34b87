"""Kernels of our own for ONNX Runtime's CPU provider, loaded as a custom-operator library.

`attention.cc` is one-query attention for decoder steps (`nmt.OneQueryAttention`): it takes
the inputs and attributes of `com.microsoft.GroupQueryAttention` for one new query per row, so
`swap_attention` replaces one with the other node by node in the step graphs and the fused
search loops. ONNX Runtime's CPU attention kernels run a small matrix product, a softmax and
another product for every (row, head) pair; with one query over a few dozen positions those
calls cost more than the arithmetic. Ours does each pair in one pass of fused multiply-adds
(timings in BENCHMARKS.md, session 20). The same file has cross-attention
(`nmt.CrossAttention`, in place of `com.microsoft.MultiHeadAttention` over the encoder's keys
and values, `swap_cross_attention`): each (query, head) pair one pass over its sentence's
unmasked source positions (a profiled call of one sentence's four beams 15 -> 9 us).

`search_tail.cc` is the end of a decoder step (`nmt.LogSoftmaxTopK`): log-softmax over the
vocabulary and each row's k best entries, in one pass over the logits and one over their
exponentials, where the step graph has a LogSoftmax node and a two-stage top-k of a dozen small
nodes after it (export.graphs.block_top_k), which write and read the (rows, vocabulary)
log-probs; `swap_tail` puts it in their place.

`int8_matmul.cc` is a quantized matrix product for one to a few rows (`nmt.Int8MatMul`): the
step graph's QuantizeLinear and MatMulIntegerToFloat pair in one node, whose weights it lays out
once for AVX-512 VNNI and then streams once per call; its outputs are ONNX Runtime's to the bit.
From eight rows on it runs on AMX where the CPU has it (Intel Xeon from Sapphire Rapids on).
`swap_matmul` puts it in the fused searches of single sentences (app.engine.fused), where a
product has one row (greedy) or K (beam): batch-1 p50 about a quarter lower there; and where
AMX runs (`amx_supported`), in the one-thread step sessions of the decode lanes too (session 24
in BENCHMARKS.md). Without AMX, from eight rows on ONNX Runtime's kernels are quicker, and the
batched steps keep them.

`beam_walk.cc` is the search step of the fused beam search (`nmt.BeamWalk`): from each row's
best tokens to the next rows, the finished hypotheses and the stop test, in one node where the
loop body has forty-odd small ONNX nodes (app.engine.fused builds it in when the library is
there): batch-1 beam 4 p50 about a tenth lower, the same hypotheses and scores to the bit.

`greedy_advance.cc` is the bookkeeping of a greedy search step (`nmt.GreedyAdvance`): after the
step's top-k, each running row's best token, score, history and position, and which rows
finished, on the running batch's arrays bound in place (`add_greedy_advance` adds it to the
greedy step graphs), so a decode lane runs almost no Python between two greedy steps.

The library is built on the machine that runs it, from the source here and ONNX Runtime's C
API header (`onnxruntime_c_api.h`, `onnxruntime_cxx_api.h`; the onnxruntime wheel does not ship
them; Debian packages them as libonnxruntime-dev from trixie on; any version from 1.16 works
with a newer runtime, the C API being backward compatible):

    python -m app.engine.kernels build [--include DIR]   # DIR holding onnxruntime_c_api.h

The engine uses the library when it is there (`library()`), and ONNX Runtime's own kernels
when it is not or when NMT_KERNELS=off: nothing depends on it.

`langid_score.cc` is not an ONNX Runtime kernel: it is the language identification of
`source: "auto"` (app.langid) in one call, built by the same command into a library of its own
(`libnmt_langid.so`, no ONNX Runtime headers needed). In the server at 32 clients, py3langid's
walk and NumPy scoring took about 0.15 ms of CPU a request (27 us quiet: beside the decode
lanes, NumPy's many small calls run cold); this call saved 0.09-0.13 ms of it (BENCHMARKS.md,
session 28).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

SOURCES = [Path(__file__).with_name(name)
           for name in ("attention.cc", "search_tail.cc", "int8_matmul.cc", "beam_walk.cc",
                        "greedy_advance.cc")]
HEADERS = [Path(__file__).with_name(name) for name in ("simd_exp.h", "op_status.h")]  # included
DEFAULT_LIBRARY = SOURCES[0].with_name("libnmt_kernels.so")
# language identification scores for app.langid: a library of its own, without ONNX Runtime
LANGID_SOURCE = SOURCES[0].with_name("langid_score.cc")
LANGID_LIBRARY = SOURCES[0].with_name("libnmt_langid.so")
DOMAIN, OP, TAIL_OP, WALK_OP = "nmt", "OneQueryAttention", "LogSoftmaxTopK", "BeamWalk"
CROSS_OP, CROSS_SWAPPED = "CrossAttention", "MultiHeadAttention"  # ours, and the one it replaces
SWAPPED = "GroupQueryAttention"  # the com.microsoft op ours stands in for
ATTRIBUTES = {"num_heads", "kv_num_heads", "scale"}  # the GroupQueryAttention attributes ours has
# GroupQueryAttention attributes that a node may carry at these values (what they do is off)
NEUTRAL = {"do_rotary": 0, "rotary_interleaved": 0, "local_window_size": -1, "softcap": 0.0,
           "smooth_softmax": (-1, 0), "k_quant_type": b"NONE", "v_quant_type": b"NONE",
           "qk_output": 0, "sliding_window_cache": 0, "causal": 1, "qk_norm_epsilon": None}
INPUTS = 7  # query, key, value, past key, past value, seqlens_k, total_sequence_length
HEADER_DIRS = ("/usr/include/onnxruntime", "/usr/local/include/onnxruntime")


def library_path() -> Path:
    """Where the library is built and looked for: NMT_KERNELS_LIB, else next to the source."""
    return Path(os.environ.get("NMT_KERNELS_LIB") or DEFAULT_LIBRARY)


# the C API version a library asks for is its headers' (ORT_API_VERSION N: onnxruntime 1.N on),
# written next to it at build time
API_VERSION = re.compile(r"#define ORT_API_VERSION (\d+)")


def turned_off() -> bool:
    """NMT_KERNELS=off (or 0, false, no): ONNX Runtime's kernels and py3langid's scoring."""
    return os.environ.get("NMT_KERNELS", "on").lower() in ("off", "0", "false", "no")


@functools.cache
def library() -> Path | None:
    """The built library when it is there, not turned off (NMT_KERNELS=off) and this
    onnxruntime is new enough for it, else None."""
    if turned_off():
        return None
    path = library_path()
    if not path.is_file():
        return None
    if any(source.stat().st_mtime > path.stat().st_mtime for source in SOURCES + HEADERS
           if source.is_file()):
        log.warning("%s is older than its sources: not used (python -m app.engine.kernels "
                    "build)", path)
        return None
    import onnxruntime

    major, minor = (int(x) for x in re.findall(r"\d+", onnxruntime.__version__)[:2])
    needs = _api_version(path)
    if (major, minor) < (1, needs):
        log.warning("%s needs onnxruntime 1.%d or newer (this is %s): not used", path, needs,
                    onnxruntime.__version__)
        return None
    return path


def _api_version(path: Path) -> int:
    """The C API version the library at path was built for (1.N), from the note build wrote."""
    try:
        return int(path.with_name(path.name + ".api").read_text().strip())
    except (OSError, ValueError):
        return 999  # unknown: not used


def langid_library() -> Path | None:
    """The language identification library when it is built, current and not turned off
    (NMT_KERNELS=off), else None (app.langid then scores in Python)."""
    if turned_off():
        return None
    if not LANGID_LIBRARY.is_file():
        return None
    if LANGID_SOURCE.is_file() and LANGID_SOURCE.stat().st_mtime > LANGID_LIBRARY.stat().st_mtime:
        log.warning("%s is older than its source: not used (python -m app.engine.kernels "
                    "build)", LANGID_LIBRARY)
        return None
    return LANGID_LIBRARY


def find_headers(include: str | Path | None = None) -> Path:
    """The directory holding onnxruntime_c_api.h: include, NMT_ORT_INCLUDE, or a system one."""
    for candidate in (include, os.environ.get("NMT_ORT_INCLUDE"), *HEADER_DIRS):
        if candidate and (Path(candidate) / "onnxruntime_cxx_api.h").is_file():
            return Path(candidate)
    raise FileNotFoundError(
        "ONNX Runtime's C API headers (onnxruntime_c_api.h, onnxruntime_cxx_api.h) were not "
        f"found in {', '.join(str(p) for p in (include, *HEADER_DIRS) if p)}: install "
        "libonnxruntime-dev (Debian trixie and later) or pass --include DIR")


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _compiler(compiler: str | None) -> str:
    cxx = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise FileNotFoundError("no C++ compiler (g++) found")
    return cxx


def build_langid(out: Path | None = None, compiler: str | None = None) -> Path:
    """Compile the language identification library (it needs no ONNX Runtime headers)."""
    out = out or LANGID_LIBRARY
    tmp = out.with_suffix(".tmp.so")
    subprocess.run([_compiler(compiler), "-O2", "-shared", "-fPIC", "-fvisibility=hidden",
                    str(LANGID_SOURCE), "-o", str(tmp)], check=True)
    tmp.replace(out)
    return out


def build(include: str | Path | None = None, out: Path | None = None,
          compiler: str | None = None) -> Path:
    """Compile the library for this CPU (AVX2 + FMA where it has them) and return its path."""
    headers = find_headers(include)
    cxx = _compiler(compiler)
    out = out or library_path()
    flags = ["-O3", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden"]
    if {"avx2", "fma"} <= cpu_flags():
        flags += ["-mavx2", "-mfma"]
    found = API_VERSION.search((headers / "onnxruntime_c_api.h").read_text(errors="replace"))
    if not found:
        raise FileNotFoundError(f"no ORT_API_VERSION in {headers / 'onnxruntime_c_api.h'}")
    tmp = out.with_suffix(".tmp.so")
    subprocess.run([cxx, *flags, f"-I{headers}", *map(str, SOURCES), "-o", str(tmp)],
                   check=True)
    out.with_name(out.name + ".api").write_text(found.group(1) + "\n")
    tmp.replace(out)  # whole or not at all: a running process may have the old one loaded
    library.cache_clear()
    amx_supported.cache_clear()
    return out


def swap_attention(model: onnx.ModelProto) -> int:
    """Replace every GroupQueryAttention node of model (Loop bodies included) that ours can
    stand in for with OneQueryAttention; return how many. The caller runs the graph only with
    one new query per row (decoder steps)."""
    from onnx import helper

    def ours(node: onnx.NodeProto) -> bool:  # nothing ours lacks: no extra input, no option on
        if any(node.input[INPUTS:]):
            return False
        for attr in node.attribute:
            if attr.name in ATTRIBUTES:
                continue
            if attr.name not in NEUTRAL:
                return False
            allowed = NEUTRAL[attr.name]
            value = helper.get_attribute_value(attr)
            if allowed is not None and value not in (allowed if isinstance(allowed, tuple)
                                                     else (allowed,)):
                return False
        return True

    def swap(graph: onnx.GraphProto) -> int:
        count = 0
        for node in graph.node:
            if node.op_type == SWAPPED and node.domain == "com.microsoft" and ours(node):
                node.op_type, node.domain = OP, DOMAIN
                for attr in [a for a in node.attribute if a.name not in ATTRIBUTES]:
                    node.attribute.remove(attr)
                count += 1
        return count

    return _swap_everywhere(model, swap)


def swap_cross_attention(model: onnx.ModelProto) -> int:
    """Replace every MultiHeadAttention node of model (Loop bodies included) that reads the
    encoder's keys and values as graph inputs of rank 4, (N, H, S, D), with a query, the two and
    at most a key padding mask, with CrossAttention; return how many."""
    from onnx import helper

    rank4 = {x.name for x in model.graph.input if len(x.type.tensor_type.shape.dim) == 4}

    def ours(node: onnx.NodeProto) -> bool:
        inputs = list(node.input)
        if len(inputs) < 3 or len(inputs) > 5 or (len(inputs) > 3 and inputs[3]):
            return False
        if inputs[1] not in rank4 or inputs[2] not in rank4:
            return False
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return set(attrs) <= {"num_heads", "scale", "unidirectional"} and not attrs.get(
            "unidirectional", 0)

    def swap(graph: onnx.GraphProto) -> int:
        count = 0
        for node in graph.node:
            if node.op_type == CROSS_SWAPPED and node.domain == "com.microsoft" and ours(node):
                node.op_type, node.domain = CROSS_OP, DOMAIN
                count += 1
        return count

    return _swap_everywhere(model, swap)


def swap_tail(model: onnx.ModelProto) -> int:
    """Replace the step's LogSoftmax and the top-k after it (the nodes that lead from the
    LogSoftmax to the values `top_log_probs` and `top_ids`, used nowhere else) with one
    LogSoftmaxTopK node, in model's graph and the Loop bodies that have them; nodes left feeding
    nothing go too. Return how many were replaced."""
    from onnx import helper

    outputs = ("top_log_probs", "top_ids")

    def users(nodes: list) -> dict[str, list]:
        found: dict[str, list] = {}
        for n in nodes:
            for x in n.input:
                found.setdefault(x, []).append(n)
        return found

    def reads(node: onnx.NodeProto) -> list[str]:  # its inputs and its subgraphs' (outer scope)
        return [*node.input, *(x for attr in node.attribute if attr.g.node
                               for inner in attr.g.node for x in reads(inner))]

    def closure(start: list, step) -> set[int]:
        seen, todo = {}, list(start)
        while todo:
            node = todo.pop()
            if id(node) not in seen:
                seen[id(node)] = node
                todo += step(node)
        return set(seen)

    def swap(graph: onnx.GraphProto) -> bool:
        nodes = list(graph.node)
        made = {out: n for n in nodes for out in n.output}
        used = users(nodes)
        if not all(name in made for name in outputs):
            return False
        above = closure([made[x] for x in outputs],
                        lambda n: [made[x] for x in n.input if x in made])
        softmax = [n for n in nodes if n.op_type == "LogSoftmax" and id(n) in above]
        if len(softmax) != 1:
            return False
        (softmax,) = softmax
        last = made[outputs[0]]  # the TopK that picks the k best: its k is the row's
        if last.op_type != "TopK":
            return False
        below = closure([softmax], lambda n: [u for x in n.output for u in used.get(x, [])])
        region = above & below
        inner = {x for n in nodes if id(n) in region for x in n.output}
        if any(id(u) not in region for x in inner - set(outputs) for u in used.get(x, [])) or any(
                o.name in inner - set(outputs) for o in graph.output):
            return False  # a value of the region is read elsewhere: leave the graph as it is
        tail = helper.make_node(TAIL_OP, [softmax.input[0], last.input[1]], list(outputs),
                                name="nmt/log_softmax_top_k", domain=DOMAIN)
        kept = [tail if n is softmax else n for n in nodes if id(n) not in region or n is softmax]
        while True:  # what fed only the region feeds nothing now
            read = {x for n in kept for x in reads(n)} | {o.name for o in graph.output}
            dead = {id(n) for n in kept if id(n) in above and not read & set(n.output)}
            if not dead:
                break
            kept = [n for n in kept if id(n) not in dead]
        del graph.node[:]
        graph.node.extend(kept)
        return True

    return _swap_everywhere(model, swap)


# the inputs and outputs `add_greedy_advance` gives a step graph (greedy_advance.cc)
ADVANCE_OP = "GreedyAdvance"
ADVANCE_INPUTS = ("greedy_score", "greedy_history", "greedy_limit", "greedy_alive", "greedy_eos")
ADVANCE_OUTPUTS = ("tokens_next", "positions_next", "past_lengths_next", "greedy_score_next",
                   "greedy_history_next", "greedy_alive_next", "greedy_ended")


def add_greedy_advance(model: onnx.ModelProto) -> bool:
    """Give the step graph a GreedyAdvance node after its top-k (greedy_advance.cc): the search
    step's bookkeeping, on arrays that the step decoder binds in place (ADVANCE_INPUTS, and
    ADVANCE_OUTPUTS bound to the memory of the inputs they update). False where the graph lacks
    the values it reads (then it is left as it is)."""
    from onnx import TensorProto, helper

    graph = model.graph
    have = {x.name for x in graph.input}
    made = {out for n in graph.node for out in n.output}
    if not {"tokens", "positions"} <= have or not {"top_log_probs", "top_ids"} <= made or (
            ADVANCE_INPUTS[0] in have):
        return False
    rows, table = ["rows"], ["rows", "width"]
    i64, i32, f32, bool_ = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT, TensorProto.BOOL
    # (type, shape) of ADVANCE_INPUTS, then ADVANCE_OUTPUTS
    inputs = [(f32, rows), (i64, table), (i64, rows), (bool_, rows), (i64, [])]
    outputs = [(i64, rows), (i64, rows), (i32, rows), (f32, rows), (i64, table), (bool_, rows),
               (i32, rows)]
    for values, names, types in ((graph.input, ADVANCE_INPUTS, inputs),
                                 (graph.output, ADVANCE_OUTPUTS, outputs)):
        values.extend(helper.make_tensor_value_info(name, elem, shape)
                      for name, (elem, shape) in zip(names, types, strict=True))
    graph.node.append(helper.make_node(
        ADVANCE_OP, ["top_log_probs", "top_ids", "positions", *ADVANCE_INPUTS],
        list(ADVANCE_OUTPUTS), name="nmt/greedy_advance", domain=DOMAIN))
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return True


MATMUL_OP = "Int8MatMul"
MATMUL_FLAGS = {"avx512f", "avx512bw", "avx512_vnni"}  # what int8_matmul.cc's kernel runs on


def matmul_supported() -> bool:
    """Whether this CPU runs Int8MatMul's kernel (AVX-512 with VNNI)."""
    return cpu_flags() >= MATMUL_FLAGS


@functools.cache
def amx_supported() -> bool:
    """Whether Int8MatMul's kernel runs calls of many rows on AMX in this process: the CPU has
    it and Linux grants the tile state (asked of the library itself; a container's seccomp
    profile may refuse it, and the kernel then keeps to AVX-512 VNNI)."""
    path = library()
    if path is None or not matmul_supported() or not cpu_flags() >= {"amx_tile", "amx_int8"}:
        return False
    import ctypes

    try:
        return bool(ctypes.CDLL(str(path)).nmt_amx_usable())
    except (OSError, AttributeError):
        return False


def swap_matmul(model: onnx.ModelProto) -> int:
    """Replace each QuantizeLinear -> MatMulIntegerToFloat pair of model (Loop bodies included)
    with one Int8MatMul node where its kernel takes them: the activation quantized with constant
    scalar scale and zero point, constant int8 weights (K, N) with K a multiple of 4, N of 64
    and zero points 0, a constant bias or none (then zeros). A QuantizeLinear left feeding
    nothing goes. Return how many were replaced; 0 on a CPU without AVX-512 VNNI."""
    import numpy as np
    from onnx import helper, numpy_helper

    if not matmul_supported():
        return 0
    initializers: dict[str, onnx.TensorProto] = {}  # of the graph and its subgraphs, by name

    def collect(graph: onnx.GraphProto) -> None:
        for init in graph.initializer:
            initializers[init.name] = init
        for node in graph.node:
            for attr in node.attribute:
                if attr.g.node:
                    collect(attr.g)

    collect(model.graph)

    @functools.cache
    def constant(name: str) -> np.ndarray | None:  # converted when first asked for
        init = initializers.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def swap(graph: onnx.GraphProto) -> int:
        made = {out: n for n in graph.node for out in n.output}
        count, added = 0, []
        for node in graph.node:
            if node.op_type != "MatMulIntegerToFloat" or node.domain != "com.microsoft":
                continue
            quant = made.get(node.input[0])
            if quant is None or quant.op_type != "QuantizeLinear" or len(quant.input) < 3:
                continue
            names = list(node.input) + [""] * (7 - len(node.input))
            _, w, a_scale, w_scale, a_zero, w_zero, bias = names
            if (quant.input[1], quant.input[2]) != (a_scale, a_zero):
                continue
            got = [constant(x) for x in (w, a_scale, a_zero, w_scale)]
            if any(x is None for x in got):
                continue
            weights, scale, zero, w_scales = got
            k, n = weights.shape if weights.ndim == 2 else (0, 0)
            if (weights.dtype != np.int8 or k % 4 or n % 64 or not n or scale.size != 1
                    or zero.dtype != np.uint8 or zero.size != 1 or w_scales.shape != (n,)):
                continue
            if w_zero and (constant(w_zero) is None or constant(w_zero).any()):
                continue
            if bias and bias not in initializers:
                continue
            if not bias:
                bias = f"{node.name or node.output[0]}/zero_bias"
                added.append(numpy_helper.from_array(np.zeros(n, np.float32), bias))
            new = helper.make_node(MATMUL_OP, [quant.input[0], w, a_scale, a_zero, w_scale,
                                               bias], list(node.output),
                                   name=node.name or node.output[0], domain=DOMAIN)
            node.CopyFrom(new)
            count += 1
        if count:
            graph.initializer.extend(added)
            read = {x for n in graph.node for x in _reads(n)} | {o.name for o in graph.output}
            dead = [n for n in graph.node
                    if n.op_type == "QuantizeLinear" and not read & set(n.output)]
            for n in dead:
                graph.node.remove(n)
        return count

    return _swap_everywhere(model, swap)


def _reads(node: onnx.NodeProto) -> list[str]:
    """A node's inputs and those of its subgraphs' nodes (outer-scope values)."""
    return [*node.input, *(x for attr in node.attribute if attr.g.node
                           for inner in attr.g.node for x in _reads(inner))]


def _swap_everywhere(model: onnx.ModelProto, swap) -> int:
    """swap(graph) -> how many swaps, applied to the subgraphs (Loop bodies) and then to the
    graph of a step graph with float32 caches (the fp16 variant runs on CUDA); our domain is
    declared where anything was swapped. Returns the total."""
    import onnx
    from onnx import helper

    def walk(graph: onnx.GraphProto) -> int:
        count = sum(walk(attr.g) for node in graph.node for attr in node.attribute
                    if attr.g.node)
        return count + swap(graph)

    if any(x.type.tensor_type.elem_type != onnx.TensorProto.FLOAT for x in model.graph.input
           if x.name.startswith("cache_k_")):
        return 0
    count = walk(model.graph)
    if count and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return count


def main(argv: list[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m app.engine.kernels",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="compile the libraries for this machine (the language "
                       "identification one first: it needs no ONNX Runtime headers)")
    b.add_argument("--include", help="the directory holding onnxruntime_c_api.h")
    b.add_argument("--out", type=Path, help=f"default: {library_path()}")
    args = ap.parse_args(argv)
    try:
        print(build_langid())
        path = build(args.include, args.out)
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"error: {exc}") from exc
    print(path)
