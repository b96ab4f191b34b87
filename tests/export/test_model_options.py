"""The model options imported models need (pre-norm with final norms, GELU, stored positions,
unscaled embeddings, separate vocabularies, an untied output projection with a bias) are
exported faithfully: ONNX log-probs equal PyTorch's at every step, and greedy decoding on the
graphs picks the same ids as on the PyTorch model. `share`: the graphs read the embedding from
the output projection's matrix (how imported bundles store it once)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.engine.sessions import Seq2SeqSessions, SessionConfig
from app.engine.step import DecodeState
from export.graphs import OUTPUT_W, export_graphs
from model.config import ModelConfig
from model.transformer import Transformer

BASE = dict(vocab_size=41, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
            d_ff=48, dropout=0.0, max_positions=40, pad_id=1, bos_id=2, eos_id=3, unk_id=0)
OPTIONS = {
    "pre-norm relu shared": dict(pre_norm=True),
    "pre-norm gelu stored positions unscaled": dict(
        pre_norm=True, activation="gelu", positional_layout="stored", scale_embeddings=False,
        layer_norm_eps=1e-6),
    "pre-norm separate vocabularies untied bias": dict(
        pre_norm=True, source_vocab_size=29, tied_output=False, output_bias=True),
    "post-norm swish stored positions bias": dict(activation="swish", positional_layout="stored",
                                                  output_bias=True),
}
SHARE = {"pre-norm relu shared": True, "post-norm swish stored positions bias": True}


def random_model(options: dict, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(**BASE, **options)).eval()
    with torch.no_grad():  # norms and biases away from their initial values, so each one counts
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
        if model.config.positional_layout == "stored":
            model.positional.table.copy_(torch.randn_like(model.positional.table) * 0.5)
        if model.output_bias is not None:
            model.output_bias[model.config.eos_id] = 2.0  # some sentences end early
    return model


def sources(model: Transformer, n: int, seed: int = 1) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    c = model.config
    size = c.source_vocab_size or c.vocab_size
    rows = []
    for i in range(n):
        ids = torch.randint(4, size, (3 + i % 7,), generator=gen).tolist()
        rows.append(ids + [c.eos_id])
    return rows


def padded(model: Transformer, rows: list[list[int]]) -> np.ndarray:
    width = max(map(len, rows))
    return np.array([r + [model.config.pad_id] * (width - len(r)) for r in rows])  # (B, S)


@torch.no_grad()
def torch_greedy(model: Transformer, rows: list[list[int]], limit: int) -> list[list[int]]:
    c = model.config
    src = torch.from_numpy(padded(model, rows))
    memory, mask = model.encode(src)
    cross = model.cross_kv(memory)
    tokens = torch.full((len(rows), 1), c.start_id)
    out, past = [[] for _ in rows], None
    done = torch.zeros(len(rows), dtype=torch.bool)
    for t in range(limit):
        logits, past = model.decode_step(tokens, torch.full_like(tokens, t), cross, mask, past)
        best = logits[:, -1].argmax(-1)
        for r in range(len(rows)):
            if not done[r]:
                if best[r] == c.eos_id:
                    done[r] = True
                else:
                    out[r].append(int(best[r]))
        tokens = best[:, None]
    return out


def onnx_run(model: Transformer, paths, rows: list[list[int]], limit: int):
    """Greedy ids on the graphs, and the log-probs of every step (R, V) for the comparison."""
    c = model.config
    s = Seq2SeqSessions(paths[0], paths[1], SessionConfig(intra_op_threads=1), c.n_decoder_layers)
    state = DecodeState.start(*s.encode(padded(model, rows)), rows_per_sentence=1, max_len=limit)
    tokens = np.full(len(rows), c.start_id, np.int64)
    out, done, steps = [[] for _ in rows], np.zeros(len(rows), bool), []
    for t in range(limit):
        past = np.full(len(rows), t)
        top, ids = s.step(state, tokens, past, past.astype(np.int32), c.vocab_size)
        full = np.empty_like(top)
        np.put_along_axis(full, ids, top, axis=1)  # (R, V) in vocabulary order
        steps.append(full)
        tokens = ids[:, 0].astype(np.int64)
        for r in range(len(rows)):
            if not done[r]:
                done[r] = tokens[r] == c.eos_id
                if not done[r]:
                    out[r].append(int(tokens[r]))
    return out, steps


@torch.no_grad()
def teacher_forced(model: Transformer, rows, targets: list[list[int]], steps: int) -> np.ndarray:
    """PyTorch's log-probs (B, steps, V) with the graphs' chosen tokens as decoder inputs."""
    c = model.config
    memory, mask = model.encode(torch.from_numpy(padded(model, rows)))
    tgt = torch.tensor([[c.start_id] + (t + [c.eos_id] * steps)[: steps - 1] for t in targets])
    logits, _ = model.decode_step(tgt, torch.arange(steps).expand(len(rows), steps),
                                  model.cross_kv(memory), mask)
    return torch.log_softmax(logits, -1).numpy()


@pytest.mark.parametrize("name", list(OPTIONS))
def test_options_export_with_parity(name, tmp_path):
    model = random_model(OPTIONS[name])
    paths = export_graphs(model, tmp_path, share=SHARE.get(name, False))
    rows = sources(model, 12)
    limit = 12
    got, steps = onnx_run(model, paths, rows, limit)
    assert got == torch_greedy(model, rows, limit)
    # every step's full log-probs, where the row has not finished (its inputs are then the same)
    ref = teacher_forced(model, rows, got, limit)
    for r, ids in enumerate(got):
        for t in range(min(len(ids) + 1, limit)):
            np.testing.assert_allclose(steps[t][r], ref[r, t], atol=2e-4)
    if model.output_bias is not None:  # its EOS bias ends some outputs early
        assert len({len(ids) for ids in got}) > 1


def test_shared_graphs_store_the_embedding_once(tmp_path):
    import onnx

    model = random_model(OPTIONS["pre-norm relu shared"])
    v, d = model.config.vocab_size, model.config.d_model
    for share, tables in ((False, {"encoder": 1, "decoder": 2}), (True, {"encoder": 1,
                                                                          "decoder": 1})):
        paths = export_graphs(model, tmp_path / str(share), share=share)
        for graph, path in zip(("encoder", "decoder"), paths, strict=True):
            inits = onnx.load(str(path)).graph.initializer
            big = [i.name for i in inits if sorted(i.dims) == sorted([v, d])]
            assert len(big) == tables[graph], (share, graph, big)
            if share:
                assert big == [OUTPUT_W]
