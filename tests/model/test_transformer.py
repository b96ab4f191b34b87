"""The Transformer's masks, incremental decoding, checkpoints and reference decoders."""

import pytest
import torch

from model.checkpoint import average_checkpoints, load_model, save_checkpoint
from model.config import ModelConfig
from model.layers import Dropout, PositionalEncoding
from model.search import beam_search, greedy_search
from model.tokenizer import Tokenizer, train_tokenizer
from model.transformer import Transformer

CONFIG = ModelConfig(
    vocab_size=40,
    d_model=32,
    n_heads=4,
    n_encoder_layers=2,
    n_decoder_layers=2,
    d_ff=64,
    dropout=0.0,
    max_positions=64,
)


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(CONFIG).eval()


def test_marian_options_default_to_the_paper_and_old_configs_load():
    """Defaults keep our checkpoints' state-dict keys and behaviour; old config dicts (without
    the Marian options) still load."""
    old = {k: v for k, v in CONFIG.to_dict().items()
           if k not in ("activation", "positional_layout", "output_bias", "decoder_start_id")}
    config = ModelConfig.from_dict(old)
    assert config == CONFIG and config.start_id == config.bos_id
    assert "output_bias" not in Transformer(config).state_dict()
    marian = ModelConfig.from_dict({**old, "activation": "swish", "positional_layout": "halves",
                                    "output_bias": True, "decoder_start_id": 39})
    assert marian.start_id == 39 and "output_bias" in Transformer(marian).state_dict()
    for field, value in (("activation", "gelu_new"), ("positional_layout", "learned")):
        with pytest.raises(ValueError, match=field):
            ModelConfig.from_dict({**old, field: value})


def test_halves_layout_puts_sines_first_then_cosines():
    table = PositionalEncoding(8, 16, "halves")(torch.arange(16)[None])[0]  # (16, 8)
    freqs = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)  # (4,)
    angles = 5 * freqs
    assert torch.allclose(table[5, :4].double(), torch.sin(angles))
    assert torch.allclose(table[5, 4:].double(), torch.cos(angles))


def test_halves_layout_is_exactly_transformers_marian_table():
    marian = pytest.importorskip("transformers.models.marian.modeling_marian")
    theirs = marian.MarianSinusoidalPositionalEmbedding(64, 48).create_weight()
    assert torch.equal(PositionalEncoding(48, 64, "halves").table, theirs)


def random_ids(rows: int, cols: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, CONFIG.vocab_size, (rows, cols), generator=g)


def test_positional_encoding_is_sin_on_even_cos_on_odd_and_not_trained():
    pe = PositionalEncoding(8, 16)
    table = pe(torch.arange(16)[None])[0]  # (16, 8)
    assert torch.allclose(table[3, 0], torch.sin(torch.tensor(3.0)))
    assert torch.allclose(table[3, 1], torch.cos(torch.tensor(3.0)))
    assert torch.allclose(table[5, 2], torch.sin(torch.tensor(5.0) / 10000 ** (2 / 8)))
    assert not list(pe.parameters())


def test_output_projection_shares_the_embedding_matrix(model):
    assert model.project(torch.eye(CONFIG.d_model)[None]).shape == (1, CONFIG.d_model, 40)
    names = [n for n, _ in model.named_parameters()]
    assert sum("embeddings" in n for n in names) == 1


def test_look_ahead_mask_hides_future_target_tokens(model):
    src, tgt = random_ids(2, 7, 1), random_ids(2, 6, 2)
    tgt[:, 0] = CONFIG.bos_id
    changed = tgt.clone()
    changed[:, 4:] = random_ids(2, 2, 3)
    a, b = model(src, tgt), model(src, changed)
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_source_padding_never_changes_the_output(model):
    src, tgt = random_ids(2, 5, 4), random_ids(2, 4, 5)
    padded = torch.cat([src, torch.full((2, 3), CONFIG.pad_id)], dim=1)
    assert torch.allclose(model(src, tgt), model(padded, tgt), atol=1e-5)


def test_target_padding_does_not_change_earlier_positions(model):
    src, tgt = random_ids(1, 5, 6), random_ids(1, 4, 7)
    padded = torch.cat([tgt, torch.full((1, 3), CONFIG.pad_id)], dim=1)
    assert torch.allclose(model(src, tgt), model(src, padded)[:, :4], atol=1e-5)


def test_selected_positions_get_the_logits_the_full_pass_gives_them(model):
    src, tgt = random_ids(3, 6, 10), random_ids(3, 5, 11)
    select = torch.rand(3, 5, generator=torch.Generator().manual_seed(1)) > 0.4
    assert torch.allclose(model(src, tgt, select=select), model(src, tgt)[select], atol=1e-6)
    flat = select.flatten().nonzero().squeeze(1)  # the same positions as flat indices
    assert torch.allclose(model(src, tgt, select=flat), model(src, tgt)[select], atol=1e-6)


def test_dropout_drops_its_share_scales_the_rest_and_is_seeded():
    drop = Dropout(0.1)
    x = torch.ones(1000, 1000, requires_grad=True)
    torch.manual_seed(5)
    y = drop(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - 0.1) < 0.002  # a million draws
    scale = 65536 / (65536 - round(0.1 * 65536))
    assert torch.all(y[kept] == scale) and abs(y.mean().item() - 1) < 0.005
    y.sum().backward()
    assert torch.equal(x.grad, kept.float() * scale)  # gradient through the kept elements only
    torch.manual_seed(5)
    assert torch.equal(drop(x), y)
    assert torch.equal(drop.eval()(x), x) and torch.equal(Dropout(0.0)(x), x)
    z = torch.ones(4, 5, 3, dtype=torch.bfloat16)  # an odd element count, another dtype
    assert drop.train()(z).shape == z.shape and drop(z).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="dropout"):
        Dropout(1.0)


def test_incremental_decoding_with_the_cache_matches_the_full_forward_pass(model):
    src, tgt = random_ids(3, 9, 8), random_ids(3, 7, 9)
    src[0, 6:] = CONFIG.pad_id
    full = model(src, tgt)
    memory, src_mask = model.encode(src)
    cross, past, steps = model.cross_kv(memory), None, []
    for t in range(tgt.size(1)):
        positions = torch.full((3, 1), t)
        logits, past = model.decode_step(tgt[:, t : t + 1], positions, cross, src_mask, past)
        steps.append(logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    # two new tokens at once after a cached prefix give the same logits too
    _, past3 = model.decode_step(tgt[:, :3], torch.arange(3).expand(3, 3), cross, src_mask)
    chunk, _ = model.decode_step(
        tgt[:, 3:5], torch.arange(3, 5).expand(3, 2), cross, src_mask, past3
    )
    assert torch.allclose(chunk, full[:, 3:5], atol=1e-5)


def test_checkpoint_round_trip_rebuilds_identical_outputs(model, tmp_path):
    tok = Tokenizer(
        train_tokenizer(
            ["hello world"] * 50 + ["hallo welt"] * 50, tmp_path / "spm.model", vocab_size=40
        ).read_bytes()
    )
    path = save_checkpoint(tmp_path / "ckpt.pt", model, tok, step=3)
    loaded, loaded_tok, state = load_model(path)
    src, tgt = random_ids(2, 5, 10), random_ids(2, 4, 11)
    assert loaded.config == model.config and state["step"] == 3
    assert torch.equal(loaded(src, tgt), model(src, tgt))
    assert loaded_tok.model_proto == tok.model_proto
    averaged, _, _ = load_model(average_checkpoints([path, path], tmp_path / "avg.pt"))
    assert torch.allclose(averaged(src, tgt), model(src, tgt), atol=1e-6)


def test_beam_size_one_equals_greedy_and_beam_never_scores_below_greedy(model):
    sources = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]
    greedy = greedy_search(model, sources, max_len_offset=5, max_len_ratio=1.0)
    for src, g in zip(sources, greedy, strict=True):
        best = beam_search(model, src, beam_size=1, max_len_offset=5, max_len_ratio=1.0)[0]
        assert best.tokens == g
        hyps = beam_search(model, src, beam_size=4, n_best=3, max_len_offset=5, max_len_ratio=1.0)
        assert len(hyps) == 3
        assert [h.normalized for h in hyps] == sorted((h.normalized for h in hyps), reverse=True)


def test_greedy_respects_the_max_length(model):
    out = greedy_search(model, [[5, 6, 7]], max_len_offset=2, max_len_ratio=0.0)
    assert len(out[0]) <= 2


def test_config_rejects_bad_numbers():
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(vocab_size=10, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="unknown"):
        ModelConfig.from_dict({"vocab_size": 10, "colour": "red"})


def test_fused_attention_gives_the_written_out_outputs_and_gradients(monkeypatch):
    """The training path on a GPU (PyTorch's fused kernel), run here on the CPU: the same
    logits, loss gradients and cached decoding as the written-out attention, padding and
    look-ahead masks included."""
    import model.layers as layers

    torch.manual_seed(0)
    net = Transformer(CONFIG).train()  # dropout 0: the two forms compute the same
    src, tgt = random_ids(3, 9, 12), random_ids(3, 7, 13)
    src[0, 5:] = CONFIG.pad_id
    tgt[1, 4:] = CONFIG.pad_id

    def run() -> tuple[torch.Tensor, list[torch.Tensor]]:
        net.zero_grad()
        logits = net(src, tgt)
        torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), tgt.flatten(), ignore_index=CONFIG.pad_id).backward()
        return logits.detach(), [p.grad.clone() for p in net.parameters() if p.grad is not None]

    written, written_grads = run()
    monkeypatch.setattr(layers, "fused_attention", lambda q: True)
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(k) or real(*a, **k))
    fused, fused_grads = run()
    assert calls and all(k["dropout_p"] == 0.0 for k in calls)  # the fused branch ran
    assert torch.allclose(fused, written, atol=1e-5)
    assert len(fused_grads) == len(written_grads)
    for a, b in zip(fused_grads, written_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    sources = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16]]
    monkeypatch.setattr(layers, "fused_attention", lambda q: False)
    written_ids = greedy_search(net, sources)
    monkeypatch.setattr(layers, "fused_attention", lambda q: True)
    assert greedy_search(net, sources) == written_ids  # the KV-cache path too


def test_fused_attention_applies_dropout_only_in_training(monkeypatch):
    import model.layers as layers

    monkeypatch.setattr(layers, "fused_attention", lambda q: True)
    q = torch.randn(2, 2, 5, 4)
    drop = Dropout(0.5)
    torch.manual_seed(1)
    trained = layers.scaled_dot_product_attention(q, q, q, None, drop.train())
    evaluated = layers.scaled_dot_product_attention(q, q, q, None, drop.eval())
    assert not torch.allclose(trained, evaluated)
    assert torch.allclose(evaluated, layers.scaled_dot_product_attention(q, q, q, None, drop))
