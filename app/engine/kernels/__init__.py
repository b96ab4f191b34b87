"""Kernels of our own for ONNX Runtime's CPU provider, loaded as a custom-operator library.

The package has three parts: `builder` compiles the libraries on the machine that runs them,
`runtime` is the one place that asks whether a library is there and usable (and what the CPU
runs), `rewrite` puts our operators in place of ONNX Runtime's nodes in the decoder graphs.
`pip install` builds both libraries where a C++ compiler and ONNX Runtime's C API headers can be
had (setup.py), and `python -m app.engine.kernels build [--include DIR]` (DIR holding
onnxruntime_c_api.h) builds them later; `runtime.report` says which kernels run; nothing
depends on them: without them (or with NMT_KERNELS=off) the engine runs
ONNX Runtime's own kernels and the language identification scores in Python.

The operators (domain `nmt`), each replacing what the exported graphs compute with many small
nodes or general kernels, with the same results:

- `attention.cc`: one-query attention for decoder steps (`OneQueryAttention`, in place of
  `com.microsoft.GroupQueryAttention`: `rewrite.swap_attention`), each (row, head) pair in one
  pass of fused multiply-adds where ONNX Runtime runs a small matrix product, a softmax and
  another product; and cross-attention (`CrossAttention`, in place of
  `com.microsoft.MultiHeadAttention` over the encoder's keys and values:
  `rewrite.swap_cross_attention`), one pass over a sentence's unmasked source positions.
- `search_tail.cc`: the end of a decoder step (`LogSoftmaxTopK`): log-softmax over the vocabulary
  and each row's k best entries in two passes, in place of a LogSoftmax node and the two-stage
  top-k after it (export.graphs.block_top_k): `rewrite.swap_tail`.
- `int8_matmul.cc`: a quantized product for one to a few rows (`Int8MatMul`): QuantizeLinear and
  MatMulIntegerToFloat in one node, its weights laid out once for AVX-512 VNNI, on AMX from eight
  rows on where the CPU has it (`runtime.amx_supported`); ONNX Runtime's results to the bit. Used
  in the fused single-sentence searches and, where AMX runs, in the single-thread step sessions
  of the decode workers (`rewrite.swap_matmul`).
- `beam_walk.cc`: the search step of the fused beam search (`BeamWalk`), from each row's best
  tokens to the next rows, the finished hypotheses and the stop test, in place of the loop
  body's many small nodes (app.engine.fused builds it in).
- `greedy_advance.cc`: the bookkeeping of a greedy step (`GreedyAdvance`) on the running batch's
  arrays bound in place (`rewrite.add_greedy_advance`), so a decode worker runs almost no Python
  between two greedy steps.

The headers come from ONNX Runtime's C API (`onnxruntime_c_api.h`, `onnxruntime_cxx_api.h`; the
wheel does not ship them, Debian packages them as libonnxruntime-dev from trixie on; any version
from 1.16 works with a newer runtime). What each kernel gains is measured in BENCHMARKS.md.
"""

from app.engine.kernels.builder import HEADER_DIRS, BuildError, build_langid, find_headers
from app.engine.kernels.rewrite import (
    ADVANCE_INPUTS,
    ADVANCE_OP,
    ADVANCE_OUTPUTS,
    CROSS_OP,
    CROSS_SWAPPED,
    DOMAIN,
    MATMUL_OP,
    OP,
    SWAPPED,
    TAIL_OP,
    WALK_OP,
    add_greedy_advance,
    swap_attention,
    swap_cross_attention,
    swap_matmul,
    swap_tail,
)
from app.engine.kernels.runtime import (
    KernelReport,
    amx_supported,
    build,
    cpu_flags,
    langid_library,
    library,
    library_path,
    matmul_supported,
    report,
    turned_off,
)

__all__ = [
    "ADVANCE_INPUTS", "ADVANCE_OP", "ADVANCE_OUTPUTS", "CROSS_OP", "CROSS_SWAPPED", "DOMAIN",
    "HEADER_DIRS", "MATMUL_OP", "OP", "SWAPPED", "TAIL_OP", "WALK_OP", "BuildError",
    "KernelReport", "add_greedy_advance", "amx_supported", "build", "build_langid", "cpu_flags",
    "find_headers", "langid_library", "library", "library_path", "matmul_supported", "report",
    "swap_attention", "swap_cross_attention", "swap_matmul", "swap_tail", "turned_off",
]
