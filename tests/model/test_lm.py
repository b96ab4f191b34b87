"""The reranking language model (model/lm.py): causal, trains, resumes, reads its recipe."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from model.lm import LanguageModel, LMShape, LMTrainer, dev_loss, load_lm, load_lm_config
from tests.conftest import LEXICON, toy_pairs


def _model(seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    model = LanguageModel(LMShape(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=64,
                                  dropout=0.0))
    with torch.no_grad():  # larger weights than at initialisation: every position matters
        for p in model.parameters():
            p.mul_(3)
    return model.eval()


def test_a_position_reads_only_the_positions_before_it():
    model = _model()
    ids = torch.tensor([[1, 5, 6, 7, 8, 9, 2]])
    changed = ids.clone()
    changed[0, 4] = 20
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert torch.allclose(a[0, :4], b[0, :4], atol=1e-6)
    assert not torch.allclose(a[0, 4:], b[0, 4:], atol=1e-3)


def test_padding_changes_no_row_score():
    model = _model()
    short = torch.tensor([[1, 5, 6, 2]])
    padded = torch.tensor([[1, 5, 6, 2, 0, 0, 0], [1, 7, 8, 9, 10, 11, 2]])
    alone, batched = model.log_probs(short), model.log_probs(padded)
    assert abs(float(alone[0]) - float(batched[0])) < 1e-4
    assert float(batched[1]) < 0


def _corpus(root: Path) -> Path:
    """A toy target side with domain labels: the toy German sentences ("toy") and one-word
    lines ("dictionary", dropped by min_words)."""
    de = [t for _, t in toy_pairs(300, seed=3)]
    words = list(LEXICON.values())
    lines = de + words
    labels = ["toy"] * len(de) + ["dictionary"] * len(words)
    order = list(range(len(lines)))
    random.Random(0).shuffle(order)
    (root / "train.de").write_text("\n".join(lines[i] for i in order) + "\n", encoding="utf-8")
    (root / "train.domain").write_text("\n".join(labels[i] for i in order) + "\n",
                                       encoding="utf-8")
    (root / "dev.de").write_text("\n".join(t for _, t in toy_pairs(40, seed=4)) + "\n",
                                 encoding="utf-8")
    return root


def _config(root: Path, spm: Path, **extra):
    options = [f"train={root / 'train'}", f"dev={root / 'dev'}", f"tokenizer={spm}",
               f"out_dir={root / 'run'}", "d_model=32", "n_heads=2", "n_layers=2", "d_ff=64",
               "dropout=0.0", "batch_tokens=400", "warmup_steps=20", "lr_scale=2.0",
               "eval_every=1000", "threads=1", *(f"{k}={v}" for k, v in extra.items())]
    return load_lm_config(None, options)


def test_training_lowers_the_dev_perplexity_and_resumes(tmp_path, tiny_checkpoint):
    root = _corpus(tmp_path)
    spm = tiny_checkpoint.parent / "spm.model"
    trainer = LMTrainer(_config(root, spm, max_steps=40))
    assert len(trainer.by_domain[""]) == 300  # the one-word lines left out (min_words 3)
    before = dev_loss(trainer.model, trainer.dev)
    first = trainer.run()
    assert first.name == "step_40.pt"
    model, _, state = load_lm(first)
    after = dev_loss(model, trainer.dev)
    assert after < before - 0.5, (before, after)
    assert state["history"][-1]["step"] == 40

    resumed = LMTrainer(_config(root, spm, max_steps=60), resume=True)
    assert (resumed.step, resumed.batch_index) == (state["step"], state["batch_index"])
    assert resumed.run().name == "step_60.pt"
    with pytest.raises(SystemExit, match="already holds checkpoints"):
        LMTrainer(_config(root, spm, max_steps=80))


def test_domain_weights(tmp_path, tiny_checkpoint):
    root = _corpus(tmp_path)
    spm = tiny_checkpoint.parent / "spm.model"
    trainer = LMTrainer(_config(root, spm, max_steps=1, min_words=1,
                                domain_sample='{"toy": 2, "dictionary": 0}'))
    assert set(trainer.by_domain) == {"toy"}
    assert len(trainer.epoch_examples(0)) == 600
    with pytest.raises(SystemExit, match=r"domain_sample names \['games'\]"):
        LMTrainer(_config(root, spm, out_dir=tmp_path / "other", domain_sample='{"games": 2}'))


def test_recipe_errors_name_the_option():
    with pytest.raises(SystemExit, match=r"unknown language model options: \['n_layer'\]"):
        load_lm_config(None, ["n_layer=3"])
    with pytest.raises(SystemExit, match="batch_tokens='many'"):
        load_lm_config(None, ["batch_tokens=many"])


def test_a_translation_checkpoint_is_not_a_language_model(tiny_checkpoint):
    with pytest.raises(SystemExit, match="not a language model checkpoint"):
        load_lm(tiny_checkpoint)
