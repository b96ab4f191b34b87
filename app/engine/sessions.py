"""ONNX Runtime sessions for a bundle's encoder and decoder graphs.

The provider (CPU or CUDA), thread counts and graph optimization level come from SessionConfig.
Graph optimizations are applied when the session is created (ORT_ENABLE_ALL by default): the
bundle ships portable, un-fused graphs, and each machine fuses them for its own provider.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.engine.bundle import ENCODER_NAMES, BundleError, graph_names
from app.engine.fused import beam_loop, fusable, greedy_loop
from app.engine.kernels import rewrite, runtime
from app.engine.specialize import by_source_length, read_graph, specializable
from app.engine.step import StepDecoder

if TYPE_CHECKING:  # onnxruntime loads when the first session is created, not at import
    import onnx
    import onnxruntime as ort

log = logging.getLogger(__name__)

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
OPTIMIZATION_LEVELS = {  # names of onnxruntime.GraphOptimizationLevel members
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
M_MMAP_THRESHOLD = -3  # mallopt parameter (glibc malloc.h)
# Blocks over this size are mmap'd (see return_large_frees_to_the_os): of the thresholds
# measured (BENCHMARKS.md), the one with nearly the lowest peak memory at nearly the best speed.
MMAP_THRESHOLD = 1024 * 1024
_ONNX_TYPES = {1: np.float32, 10: np.float16}  # onnx.TensorProto.FLOAT, FLOAT16


@dataclass(frozen=True)
class SessionConfig:
    """provider: "cpu" or "cuda"; threads 0 = ONNX Runtime's default (one per physical core).
    small_rows: on the CPU, decoder steps of at most this many rows run on a one-thread copy of
    the decoder session, because handing each small op to other threads costs more than it saves
    (a batch-1 step is quicker on one thread than on two); 0 = off.
    spinning: ONNX Runtime's idle intra-op threads busy-wait for the next op. Off by default:
    between decoder steps the search (numpy) and the server's request handling need those
    cores (offline translation is quicker and the server spends less CPU a request without
    it). Where on, the threads stop spinning when a call ends
    (`session.force_spinning_stop`): still-spinning threads of the fused beam search slowed the
    next sentence's encoder (BENCHMARKS.md has the measurements).
    workers: decode workers on the CPU (see `decode_workers`); 0 = one per core.
    cross_by_length: on the CPU, decoder steps attend over each sentence's own source length
    (app.engine.specialize) instead of the batch's longest: quicker on batches of mixed lengths,
    as a service's are, and within noise on length-sorted ones (BENCHMARKS.md).
    fused: on the CPU, a sentence translated alone runs its whole search in one ONNX Runtime
    call (app.engine.fused) instead of one call per step: None = where the graphs' matrix
    products take int8 weights (app.engine.fused.fusable: there it is quicker and lighter),
    True = for every graph, False = never."""

    provider: str = "cpu"
    intra_op_threads: int = 0
    inter_op_threads: int = 0
    optimization: str = "all"
    small_rows: int = 8
    spinning: bool = False
    workers: int = 0
    cross_by_length: bool = True
    fused: bool | None = None

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider must be one of {sorted(PROVIDERS)}, got {self.provider!r}")
        if self.optimization not in OPTIMIZATION_LEVELS:
            raise ValueError(
                f"optimization must be one of {sorted(OPTIMIZATION_LEVELS)}, "
                f"got {self.optimization!r}"
            )
        if min(self.intra_op_threads, self.inter_op_threads, self.small_rows, self.workers) < 0:
            raise ValueError("thread counts, small_rows and workers must be >= 0")


# automatic decode workers keep at least this many sentences each in a full batch
WORKER_SENTENCES = 16


def decode_workers(config: SessionConfig, max_batch_size: int) -> int:
    """How many decode workers (running batches on their own threads) a translator uses.

    On the CPU a decode worker runs single-thread sessions, and decode workers run side by side,
    each on a core: the ops of one decoder step are small (a few rows), so two threads splitting
    each op wait on each other at every op, while two decode workers never wait (more throughput
    than one batch on two threads: BENCHMARKS.md). `config.workers` when set; else one per core
    (the intra-op thread count when set), with at least WORKER_SENTENCES sentences per decode
    worker; 1 on CUDA."""
    if config.provider != "cpu":
        return 1
    if config.workers:
        return config.workers
    cores = config.intra_op_threads or len(os.sched_getaffinity(0))
    return max(1, min(cores, max_batch_size // WORKER_SENTENCES))


def execution_providers(provider: str) -> list[str]:
    """The provider list for a session; CUDA falls back to CPU with a warning when absent."""
    import onnxruntime as ort

    if provider == "cuda":
        if PROVIDERS["cuda"] in ort.get_available_providers():
            return [PROVIDERS["cuda"], PROVIDERS["cpu"]]
        log.warning(
            "CUDA was requested but this onnxruntime build has no CUDAExecutionProvider "
            "(available: %s); falling back to CPU",
            ", ".join(ort.get_available_providers()),
        )
    return [PROVIDERS["cpu"]]


def return_large_frees_to_the_os() -> None:
    """Make glibc serve every allocation over MMAP_THRESHOLD by mmap, so the decoder's cache
    buffers go back to the OS when freed. By default glibc raises that threshold (up to 32 MiB)
    after the first large frees, and later buffers of a few MiB come from the heap, which keeps
    them (measured on the shipped model: a markedly higher peak memory with glibc's default).
    Below the threshold, blocks are reused from the heap: every mmap'd block is new memory,
    page-faulted in as it is written, and its unmapping interrupts the other decode worker's
    core to flush its TLB. No-op where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    except (OSError, AttributeError):
        pass


_ANNOUNCED: set[Path] = set()  # kernel libraries already named in the log


def with_kernels(graph: str | Path | bytes, matmul: bool = False, advance: bool = False,
                 folder: str | Path | None = None
                 ) -> tuple[str | Path | bytes | onnx.ModelProto, Path | None,
                            onnx.GraphProto | None]:
    """A decoder graph (a path, or serialized) with its attention and its search tail
    (log-softmax, top-k) on app.engine.kernels' library where that is built, the library, and
    the rewritten graph (for SharedWeights); else graph as it is, None and None. A rewritten
    graph comes back as its ModelProto (`create_session` serializes it). matmul: its int8
    matrix products too (`rewrite.swap_matmul`: quicker than ONNX Runtime's for one to four
    rows on one thread; from eight rows on only on AMX, so batched step graphs ask for it
    where there is AMX). advance: a greedy search's bookkeeping after the top-k too
    (`rewrite.add_greedy_advance`). folder: where a serialized graph's external weights lie
    (they are read to rewrite it)."""
    library = runtime.library()
    if library is None:
        return graph, None, None
    import onnx

    if isinstance(graph, bytes):
        from onnx.external_data_helper import load_external_data_for_model

        model = onnx.load_from_string(graph)
        if folder is not None:
            load_external_data_for_model(model, str(folder))
    else:
        model = onnx.load(str(graph))
    swapped = (rewrite.swap_attention(model) + rewrite.swap_cross_attention(model)
               + rewrite.swap_tail(model))
    if matmul:
        swapped += rewrite.swap_matmul(model)
    if advance:
        swapped += rewrite.add_greedy_advance(model)
    if not swapped and not any(o.domain == rewrite.DOMAIN for o in model.opset_import):
        return graph, None, None  # nothing of ours in it
    if library not in _ANNOUNCED:
        _ANNOUNCED.add(library)
        log.info("decoder attention and search tail run on our kernels: %s (NMT_KERNELS=off "
                 "for ONNX Runtime's)", library)
    return model, library, model.graph


class ExternalWeights:
    """Where a bundle graph's initializers lie in its shared weights file (export.shared), so
    that a graph rewritten in memory (specialized, fused, on our kernels) is handed to ONNX
    Runtime with references into that file instead of its weights' bytes: serializing a
    rewritten decoder with its weights made, while its session was created, two more copies of
    them (the serialized graph and ONNX Runtime's parse of it), and the peak RSS of a process
    is set by those moments. ONNX Runtime reads the weights it needs from the file (the shared
    ones it takes from SharedWeights and never reads)."""

    def __init__(self, *paths: str | Path) -> None:
        import onnx

        self.folder = str(Path(paths[0]).parent)  # a bundle's graphs lie in one folder
        # name -> (digest of its bytes in the file, their length, the reference to them)
        self.places: dict[str, tuple[bytes, int, list]] = {}
        files: dict[str, object] = {}
        initializers = [init for path in paths
                        for init in onnx.load(str(path), load_external_data=False
                                              ).graph.initializer]
        try:
            for init in initializers:
                if init.data_location != onnx.TensorProto.EXTERNAL:
                    continue
                entries = {e.key: e.value for e in init.external_data}
                if "location" not in entries or "length" not in entries:
                    continue
                location, length = entries["location"], int(entries["length"])
                if location not in files:  # read, not mapped: mapped pages would count as RSS
                    files[location] = open(Path(self.folder) / location, "rb")  # noqa: SIM115
                f = files[location]
                f.seek(int(entries.get("offset", 0)))
                digest = hashlib.blake2b(f.read(length), digest_size=16).digest()
                self.places[init.name] = (digest, length, list(init.external_data))
        finally:
            for f in files.values():
                f.close()

    def mapped(self, name: str, digest: bytes, like: np.ndarray) -> np.ndarray | None:
        """The weight `name` as a read-only view of the file (memory-mapped: its pages are the
        page cache's, shared by every process that maps the file, and PSS counts them once),
        where the file holds it with this blake2b digest; else None."""
        place = self.places.get(name)
        if place is None or place[0] != digest or place[1] != like.nbytes:
            return None
        entries = {e.key: e.value for e in place[2]}
        return np.memmap(Path(self.folder) / entries["location"], like.dtype, "r",
                         int(entries.get("offset", 0)), like.shape)

    def refer(self, model: onnx.ModelProto) -> int:
        """Turn model's initializers that hold the same bytes as the file at their name's place
        into references to it; return how many. One whose bytes differ (a rewrite changed it)
        keeps them."""
        import onnx

        count = 0
        for init in model.graph.initializer:
            place = self.places.get(init.name)
            if place is None or len(init.raw_data) != place[1]:
                continue
            digest, _, entries = place
            if hashlib.blake2b(init.raw_data, digest_size=16).digest() != digest:
                continue
            init.ClearField("raw_data")
            init.data_location = onnx.TensorProto.EXTERNAL
            del init.external_data[:]
            init.external_data.extend(entries)
            count += 1
        return count


def create_session(path: str | Path | bytes | onnx.ModelProto, config: SessionConfig,
                   shared: list[tuple[str, ort.OrtValue]] = (),
                   custom_ops: Path | None = None,
                   external: ExternalWeights | None = None) -> ort.InferenceSession:
    """A session of the graph at path (or of a serialized graph, or a ModelProto) with
    config's settings; shared: initializers it takes from memory held elsewhere
    (SharedWeights) instead of its own copy; custom_ops: a library of operators the graph uses
    (app.engine.kernels); external: for a ModelProto, the weights file its initializers may
    refer to instead of carrying their bytes."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not isinstance(path, str | Path):
        if external is not None:  # where a graph in memory's weight references lead
            options.add_session_config_entry(
                "session.model_external_initializers_file_folder_path", external.folder)
        if not isinstance(path, bytes):  # a ModelProto
            if external is not None:
                external.refer(path)
            path = path.SerializeToString()
    if custom_ops is not None:
        options.register_custom_ops_library(str(custom_ops))
    for name, value in shared:
        options.add_initializer(name, value)
    options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[config.optimization]
    )
    options.intra_op_num_threads = config.intra_op_threads
    options.inter_op_num_threads = config.inter_op_threads
    options.log_severity_level = 3  # errors only
    if not config.spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    else:  # spin between the ops of a call, not after it: the next call may be another session's
        options.add_session_config_entry("session.force_spinning_stop", "1")
    # on the CPU the residual Add and the LayerNormalization stay two nodes: the fused
    # SkipLayerNormalization kernel is slower than both (measured on the shipped model;
    # BENCHMARKS.md); graphs that carry SkipLayerNormalization nodes run them as they are
    disabled = ["SkipLayerNormFusion"] if config.provider == "cpu" else []
    session = _inference_session(path, options, execution_providers(config.provider), disabled)
    if getattr(session, "_model_bytes", None) is not None and config.provider == "cpu":
        # the Python session keeps a serialized graph for as long as it lives, only to remake
        # itself on another provider after a failure (which the CPU provider has no use for):
        # a serialized decoder per session, and a model has several sessions
        session._model_bytes = None
    return session


# onnxruntime's refusal of a graph written by a newer onnx than it reads (onnxruntime-gpu
# releases trail the CPU package and the onnx that exports the bundles)
IR_REFUSED = re.compile(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)")
_RESTAMPED: set[tuple[int, int]] = set()  # (graph's, runtime's) IR versions already logged


def _inference_session(graph: str | Path | bytes, options: ort.SessionOptions,
                       providers: list[str], disabled: list[str]) -> ort.InferenceSession:
    """An InferenceSession of graph; where this onnxruntime refuses the graph's IR version, the
    graph again with the IR version it reads: the graph's operators are defined by its opset
    imports, which the runtime checks on its own, and our graphs use no type or construct that
    came with a later IR version."""
    import onnxruntime as ort

    def make(source: str | bytes) -> ort.InferenceSession:
        return ort.InferenceSession(source, sess_options=options, providers=providers,
                                    disabled_optimizers=disabled)

    try:
        return make(graph if isinstance(graph, bytes) else str(graph))
    except Exception as exc:  # onnxruntime raises its own Fail, with the versions in the text
        refused = IR_REFUSED.search(str(exc))
        if refused is None:
            raise
    return make(with_ir_version(graph, int(refused[1]), int(refused[2])))


def with_ir_version(graph: str | Path | bytes, found: int, readable: int) -> bytes:
    """graph (a file, its weights loaded with it, or serialized) serialized with ir_version set
    to `readable`."""
    import onnx

    if (found, readable) not in _RESTAMPED:
        _RESTAMPED.add((found, readable))
        log.warning("this onnxruntime reads ONNX IR version %d at most; the bundle's graphs are "
                    "%d: loading them as %d", readable, found, readable)
    model = onnx.load_from_string(graph) if isinstance(graph, bytes) else onnx.load(str(graph))
    model.ir_version = readable
    return model.SerializeToString()


SHARED_MIN_BYTES = 64 * 1024  # smaller initializers are not worth a look-up
# ops that pack their constant weights into a layout of their own at load: a session frees its
# own copy of a weight that only such ops read once packed, while a shared original would stay
# in memory beside each session's packed copy, so those weights are not shared
PACKING_OPS = {"MatMul", "Gemm", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulNBits",
               "MatMulIntegerToFloat", "QLinearMatMul", "Conv"}


def packing_inputs(graph: onnx.GraphProto) -> set[str]:
    """The names that graph's weight-packing ops read and no other op of graph does. A weight
    another op reads too (the output projection's matrix, which the embedding Gather reads as
    well) stays in every session beside its packed copy: it is shared. Nodes of subgraphs (a
    fused search's Loop body) are not asked: the weights they read stay shared."""
    packing = {x for n in graph.node if n.op_type in PACKING_OPS for x in n.input}
    return packing - {x for n in graph.node if n.op_type not in PACKING_OPS for x in n.input}


class SharedWeights:
    """Large float and int8 initializers of a bundle's graphs, held once for all its sessions.

    ONNX Runtime gives every session its own copy of its graph's initializers, and a bundle has
    several sessions of the same graphs (one-thread copies, specialized and fused step graphs),
    whose embedding table (8000 x 256 float32 in the shipped model) is also in both the encoder
    and the decoder. Each initializer here is read once, kept by content (the encoder's and the
    decoder's tables are one array), and handed to every session by
    `SessionOptions.add_initializer` (less memory for the same sessions: BENCHMARKS.md). The int8
    weights are shared with the sessions whose graphs read them with our product
    (app.engine.kernels), which packs them once per process, and not with those that pack
    them. Where the bundle keeps its weights in a weights file (ExternalWeights), the arrays
    are read-only memory maps of that file: its pages are shared with every other process
    serving the bundle (server processes, worker processes)."""

    def __init__(self, external: ExternalWeights | None = None) -> None:
        # external: the bundle's weights file, whose weights are mapped instead of copied
        self.external = external
        self._arrays: dict[tuple, tuple[np.ndarray, ort.OrtValue]] = {}
        self._graphs: dict[str, list[tuple[str, ort.OrtValue]]] = {}
        self._lock = threading.Lock()

    def of(self, path: str | Path, graph: onnx.GraphProto | None = None
           ) -> list[tuple[str, ort.OrtValue]]:
        """(name, value) of the graph at path's shared initializers: float or int8, at least
        SHARED_MIN_BYTES, and read by no weight-packing op; graph: the file already parsed."""
        key = str(path)
        with self._lock:
            if key not in self._graphs:
                self._graphs[key] = self._read(read_graph(graph or path))
            return self._graphs[key]

    def of_graph(self, graph: onnx.GraphProto) -> list[tuple[str, ort.OrtValue]]:
        """As `of`, for a graph held in memory (a rewritten copy of a file's graph)."""
        with self._lock:
            return self._read(graph)

    def _read(self, graph: onnx.GraphProto) -> list[tuple[str, ort.OrtValue]]:
        import onnx
        import onnxruntime as ort
        from onnx import numpy_helper

        kinds = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.INT8)
        packed, found = packing_inputs(graph), []
        for init in graph.initializer:
            if init.data_type not in kinds or init.name in packed:
                continue
            array = numpy_helper.to_array(init)
            if array.nbytes < SHARED_MIN_BYTES:
                continue
            digest = hashlib.blake2b(array, digest_size=16).digest()  # its memory, uncopied
            held = self._arrays.get((array.dtype.str, array.shape, digest))
            if held is None:  # the OrtValue reads the array's memory: both are kept
                mapped = self.external and self.external.mapped(init.name, digest, array)
                array = array if mapped is None else mapped
                held = (array, ort.OrtValue.ortvalue_from_numpy(array))
                self._arrays[(array.dtype.str, array.shape, digest)] = held
            found.append((init.name, held[1]))
        return found


def graph_signature(graph: onnx.GraphProto) -> dict[str, list[str]]:
    """A graph's input and output names as a session of it lists them (initializers that are
    also graph inputs are not inputs)."""
    weights = {i.name for i in graph.initializer}
    return {"inputs": [x.name for x in graph.input if x.name not in weights],
            "outputs": [x.name for x in graph.output]}


def _our_products(config: SessionConfig) -> bool:
    """Whether a decoder step session takes our int8 products (`rewrite.swap_matmul`) for its
    batched steps: where they run on AMX, and on one thread (ours are one-thread kernels,
    where ONNX Runtime's split a product among the session's threads)."""
    return config.intra_op_threads == 1 and runtime.amx_supported()


class Seq2SeqSessions:
    """The encoder and step-decoder sessions of a format-3 bundle.

    encode(src_ids (B, S)) -> cross_k, cross_v (L, B, H, S, Dh), src_mask (B, S)
    step: the decoder step over a DecodeState (app.engine.step), cache written in place.
    With workers > 1 on the CPU, `encode(..., beside=True)` and `one_thread_step` run on
    single-thread sessions of the same graphs, for decode workers that run side by side
    (decode_workers).

    On the CPU (config.cross_by_length), steps run on the step graph specialized for their
    beam width (app.engine.specialize: cross-attention over each sentence's own source
    length), one session per beam width and thread setting, made at its first use.
    """

    def __init__(self, encoder_path: str | Path, decoder_path: str | Path, config: SessionConfig,
                 n_layers: int, workers: int = 1):
        self.config = config
        cpu = config.provider == "cpu"
        if cpu:
            return_large_frees_to_the_os()
        # on the CPU, weights the sessions would each copy are held once
        # the bundle's weights file, where it has one: shared weights are mapped from it, and
        # rewritten decoder graphs refer to it
        self._external = ExternalWeights(encoder_path, decoder_path) if cpu else None
        self.shared = SharedWeights(self._external) if cpu else None
        # graphs rewritten from the decoder's (specialized, fused) keep those references: their
        # weights are read once, where our kernels' rewriting needs them (with_kernels)
        self._load_weights = not (self._external and self._external.places)
        # one-thread copies of the graphs: for small steps and for decode workers
        self._one_thread = cpu and config.intra_op_threads != 1
        self._decoders: dict[tuple[int, bool, bool], ort.InferenceSession] = {}
        self._fused: dict[bool, ort.InferenceSession] = {}
        self._encoders: dict[bool, ort.InferenceSession] = {}
        self._lock = threading.Lock()
        # the encoder session made now: the decode workers' one-thread one where there are decode
        # workers (they encode every sentence of a call of several and, on one thread, every single
        # sentence; the session of config's threads is made only if a call runs outside a decode
        # worker)
        self.encoder_path = encoder_path
        side_by_side = self._one_thread and workers > 1
        self.one_thread_encoder = self._session(
            encoder_path, replace(config, intra_op_threads=1) if side_by_side else config)
        if not side_by_side:
            self._encoders[False] = self.one_thread_encoder
        # the decoder file is parsed once for the shared weights and the questions below
        decoder_graph = read_graph(decoder_path)
        if cpu:
            self.shared.of(decoder_path, decoder_graph)
        # the bundle's own decoder graph, unspecialized, runs only where steps are not
        # specialized by beam width (and outside decode workers where there are some): its
        # session is made at its first use, as the others are, since on the CPU it usually never
        # runs
        self._decoder_one_thread = self._one_thread and workers > 1
        self.decoder_path = decoder_path
        names = graph_names(n_layers)
        for path, found, graph in (
            (encoder_path, {"inputs": [x.name for x in self.one_thread_encoder.get_inputs()],
                            "outputs": [x.name for x in self.one_thread_encoder.get_outputs()]},
             "encoder"),
            (decoder_path, graph_signature(decoder_graph), "decoder"),
        ):
            if found != names[graph]:
                raise BundleError(f"{path}: graph inputs/outputs {found} are not the {graph}'s "
                                  f"{names[graph]}")
        cache = next(i for i in decoder_graph.input if i.name == "cache_k_0").type.tensor_type
        self.kv_dtype = _ONNX_TYPES[cache.elem_type]  # float32, or float16 for the fp16 variant
        # (R, H, M, Dp): sizes, or names where a dimension is dynamic
        self.cache_shape = [d.dim_value if d.HasField("dim_value") else d.dim_param
                            for d in cache.shape.dim]
        self.cache_head_dim = self.cache_shape[3]
        self.providers = self.one_thread_encoder.get_providers()
        self.by_length = cpu and config.cross_by_length and specializable(decoder_graph)
        self.int8 = cpu and fusable(decoder_graph)  # its matrix products take int8 weights
        self.fused = cpu and (self.int8 if config.fused is None else config.fused)
        del decoder_graph  # its weights are in the shared arrays or the sessions now
        # greedy steps end in our GreedyAdvance node (app/engine/kernels/greedy_advance.cc):
        # on the graph specialized for one row per sentence, where our library is built
        self.greedy_advance = self.by_length and runtime.library() is not None
        small_rows = config.small_rows if self._one_thread else 0
        decoder = StepDecoder(self.decoder_for, n_layers, small_rows, rebind_inputs=not cpu)
        beside = StepDecoder(self.one_thread_decoder_for, n_layers, rebind_inputs=not cpu)
        self.step, self.advance = decoder.step, decoder.advance
        self.one_thread_step, self.one_thread_advance = beside.step, beside.advance

    @property
    def decoder(self) -> ort.InferenceSession:
        """The session of the bundle's decoder graph as it is (one-thread where there are
        lanes), made at its first use."""
        return self.decoder_for(0, self._decoder_one_thread)

    @property
    def encoder(self) -> ort.InferenceSession:
        """The encoder session of config's threads (made at its first use where there are
        decode workers)."""
        return self._made(self._encoders, False,
                          lambda: self._session(self.encoder_path, self.config))

    def _session(self, graph: str | Path | bytes, config: SessionConfig,
                 weights_of: str | Path | None = None, decoder: bool = False,
                 matmul: bool = False, advance: bool = False) -> ort.InferenceSession:
        """A session of graph (a path, or serialized: then weights_of names the file whose
        initializers it has), with the shared weights where there are; a decoder graph on the
        CPU runs its attention on our kernel where it is built (app.engine.kernels)."""
        library = rewritten = None
        if decoder and self.config.provider == "cpu":
            graph, library, rewritten = with_kernels(
                graph, matmul, advance, self._external and self._external.folder)
        if self.shared is None:
            shared = ()
        elif rewritten is None:
            shared = self.shared.of(weights_of or graph)
        else:  # the rewritten graph's own (our product reads int8 weights that others pack)
            shared = self.shared.of_graph(rewritten)
        return create_session(graph, config, shared, library, self._external)

    def decoder_for(self, beams: int, one_thread: bool = False, advance: bool = False
                    ) -> ort.InferenceSession:
        """The decoder session for steps of `beams` rows per sentence: the graph specialized for
        that beam width where the CPU allows it, else (and for beams = 0) the bundle's graph;
        one_thread: its one-thread copy (on the CPU); advance: for greedy steps (beams = 1)
        where `greedy_advance`, the graph with our GreedyAdvance node at its end."""
        one_thread = one_thread and self._one_thread
        beams = beams if self.by_length else 0
        advance = advance and beams == 1 and self.greedy_advance
        key = (beams, one_thread, advance)

        def make() -> ort.InferenceSession:
            config = replace(self.config, intra_op_threads=1) if one_thread else self.config
            # the serialized graph is passed on, not kept here: _session lets it go once parsed
            return self._session(
                by_source_length(self.decoder_path, beams, self._load_weights) if beams
                else self.decoder_path,
                config, self.decoder_path, decoder=True, matmul=_our_products(config),
                advance=advance)

        return self._made(self._decoders, key, make)

    def _made(self, store: dict, key, make: Callable[[], ort.InferenceSession]
              ) -> ort.InferenceSession:
        """store[key], made by make() at its first use (once, whichever thread asks first)."""
        session = store.get(key)
        if session is None:
            with self._lock:
                session = store.get(key)
                if session is None:
                    session = store[key] = make()
        return session

    def fused_for(self, beam: bool) -> ort.InferenceSession:
        """The session of the fused search (app.engine.fused) for one sentence, made at first
        use. Its int8 products run on our kernel where the library and the CPU have it
        (`rewrite.swap_matmul`), quicker than ONNX Runtime's products for one row or K. The
        session has two spinning threads where there are two: our products of one row or K
        share their columns out between them (a row's product takes the time its weights take
        to stream in, and two cores stream twice as fast). Without our kernel: greedy on one
        thread; beam search on two spinning threads, quicker there than one thread or two
        without spinning (BENCHMARKS.md has each measurement)."""
        def make() -> ort.InferenceSession:
            threads = min(2, self.config.intra_op_threads or len(os.sched_getaffinity(0)))
            config = replace(self.config, intra_op_threads=1)
            ours = (runtime.library() is not None and runtime.matmul_supported()
                    and self.int8)  # int8 products to swap
            if threads > 1 and (beam or ours):
                config = replace(self.config, intra_op_threads=threads, spinning=True)
            return self._session(  # the serialized graph is not kept here (see decoder_for)
                beam_loop(self.decoder_path, walk_op=runtime.library() is not None,
                          external_data=self._load_weights)
                if beam else greedy_loop(self.decoder_path, external_data=self._load_weights),
                config, self.decoder_path, decoder=True, matmul=True)

        return self._made(self._fused, beam, make)

    def prepare(self, beams: int, beside: bool = False) -> None:
        """Make the step sessions a search of `beams` rows per sentence switches between (the
        graph specialized for that width, used while its sources' padding is high, and the
        bundle's graph, used while it is low) before the search's cache takes memory: made in
        the middle of a search, a session added its own build-time memory on top of a full cache,
        and made the pass's peak."""
        if beams > 1:
            self.decoder_for(beams, beside)
            if self.by_length:
                self.decoder_for(0, beside)

    def one_thread_decoder_for(self, beams: int, one_thread: bool = True, advance: bool = False
                         ) -> ort.InferenceSession:
        """A decode worker's decoder session: always the one-thread copy."""
        return self.decoder_for(beams, True, advance)

    def encode(self, src_ids: np.ndarray, beside: bool = False
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        feeds = {ENCODER_NAMES["inputs"][0]: src_ids}
        session = self.one_thread_encoder if beside else self.encoder
        cross_k, cross_v, src_mask = session.run(ENCODER_NAMES["outputs"], feeds)
        return cross_k, cross_v, src_mask
