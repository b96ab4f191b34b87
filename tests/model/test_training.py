"""Training really learns: a toy word-for-word translation task, end to end through model.train."""

import json
import random

import pytest

from model.checkpoint import load_model
from model.evaluate import translate_beam, translate_greedy
from model.train import inverse_sqrt_lr, load_train_config, train

LEXICON = {
    "red": "rot",
    "blue": "blau",
    "green": "gruen",
    "house": "haus",
    "tree": "baum",
    "dog": "hund",
    "cat": "katze",
    "small": "klein",
    "big": "gross",
    "old": "alt",
    "new": "neu",
    "and": "und",
}


def toy_corpus(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = sorted(LEXICON)
    pairs = []
    for _ in range(n):
        sentence = [rng.choice(words) for _ in range(rng.randint(2, 5))]
        pairs.append((" ".join(sentence), " ".join(LEXICON[w] for w in sentence)))
    return pairs


def write_split(prefix, pairs) -> None:
    prefix.with_suffix(".en").write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    prefix.with_suffix(".de").write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    train_pairs = toy_corpus(3000, seed=1)
    seen = {s for s, _ in train_pairs}
    held_out = [p for p in toy_corpus(400, seed=2) if p[0] not in seen][:40]
    write_split(root / "train", train_pairs)
    write_split(root / "dev", held_out)
    overrides = {
        "train": str(root / "train"),
        "dev": str(root / "dev"),
        "out_dir": str(root / "run"),
        "vocab_size": 40,
        "d_model": 64,
        "n_heads": 4,
        "n_encoder_layers": 2,
        "n_decoder_layers": 2,
        "d_ff": 128,
        "dropout": 0.0,
        "batch_tokens": 800,
        "warmup_steps": 100,
        "lr_scale": 0.3,
        "max_steps": 600,
        "eval_every": 600,
        "save_every": 200,
        "keep_last": 3,
        "average_last": 2,
        "bleu_sentences": 40,
        "threads": 1,
        "bf16": "off",
    }
    cfg = load_train_config(None, [f"{k}={json.dumps(v)}" for k, v in overrides.items()])
    final = train(cfg)
    return cfg, final, held_out


def test_loss_goes_down_and_greedy_reproduces_held_out_examples(toy_run):
    cfg, final, held_out = toy_run
    with open(f"{cfg.out_dir}/train.log.jsonl", encoding="utf-8") as f:
        log = [json.loads(line) for line in f]
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < losses[0] / 3
    model, tok, _ = load_model(final)
    sources = [s for s, _ in held_out]
    hyps = translate_greedy(model, tok, sources)
    exact = sum(h == t for h, (_, t) in zip(hyps, held_out, strict=True))
    assert exact >= 0.9 * len(held_out), list(zip(hyps, held_out, strict=True))[:5]
    assert translate_beam(model, tok, sources[:5], beam_size=3) == hyps[:5]


def test_resume_continues_from_the_last_checkpoint(toy_run):
    cfg, final, _ = toy_run
    first_minutes = load_model(final)[2]["train_minutes"]
    assert first_minutes > 0
    more = load_train_config(
        None,
        [
            f"{k}={json.dumps(v)}"
            for k, v in {
                **cfg.__dict__,
                "max_steps": 620,
                "eval_every": 610,
                "average_last": 1,
            }.items()
        ],
    )
    last = train(more, resume=True)
    _, _, state = load_model(last)
    assert state["step"] == 620
    # Training time adds up across resumes, in the checkpoint and in the evaluation log.
    assert state["train_minutes"] >= first_minutes
    assert [h["step"] for h in state["history"]] == [600, 610]
    assert state["history"][1]["minutes"] >= round(first_minutes, 1)
    with pytest.raises(SystemExit, match="--resume"):
        train(more)


def test_the_warm_up_schedule_rises_then_decays_as_inverse_square_root():
    lrs = [inverse_sqrt_lr(s, 256, 100, 1.0) for s in (1, 50, 100, 400)]
    assert lrs[0] < lrs[1] < lrs[2]
    assert lrs[3] == pytest.approx(lrs[2] / 2)
