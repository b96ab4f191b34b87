"""Shared session fixtures: a tiny trained checkpoint and its exported bundle.

tiny_checkpoint  a checkpoint file (d_model 32, 2 heads, 2+2 layers) whose SentencePiece model is
                 trained on a generated English/German-ish toy corpus, and whose weights are
                 briefly trained to translate it word by word, so greedy outputs are not degenerate.
tiny_bundle      that checkpoint exported to a bundle directory with fp32 and int8 variants
                 (name "en-de", source "en", target "de").
tiny_sentences   a few English sentences of the toy language for translation tests.
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import pytest

# The suite counts and holds the engine's work sentence by sentence (batches, cancellations,
# long sentences sent several times); the translation cache (app.translation.cache, on by
# default) would answer repeats from memory. Servers and Settings made here, and the server
# processes they start, run without it unless a test asks for it (tests/app/test_cache.py).
os.environ.setdefault("NMT_CACHE_SIZE", "0")

LEXICON = {
    "the": "die",
    "a": "eine",
    "red": "rote",
    "blue": "blaue",
    "green": "gruene",
    "big": "grosse",
    "small": "kleine",
    "old": "alte",
    "new": "neue",
    "house": "haus",
    "car": "auto",
    "dog": "hund",
    "cat": "katze",
    "tree": "baum",
    "book": "buch",
    "sees": "sieht",
    "has": "hat",
    "likes": "mag",
    "and": "und",
    "file": "datei",
    "open": "oeffne",
    "save": "speichere",
    "close": "schliesse",
    "window": "fenster",
}
ADJECTIVES = ["red", "blue", "green", "big", "small", "old", "new"]
NOUNS = ["house", "car", "dog", "cat", "tree", "book", "file", "window"]
VERBS = ["sees", "has", "likes"]
COMMANDS = ["open", "save", "close"]


def toy_sentence(rng: random.Random) -> str:
    def phrase() -> str:
        words = [rng.choice(["the", "a"])]
        words += [rng.choice(ADJECTIVES) for _ in range(rng.randint(0, 2))]
        return " ".join([*words, rng.choice(NOUNS)])

    form = rng.random()
    if form < 0.3:
        return f"{rng.choice(COMMANDS)} {phrase()}"
    if form < 0.5:
        return f"{phrase()} and {phrase()}"
    return f"{phrase()} {rng.choice(VERBS)} {phrase()}"


def toy_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        en = toy_sentence(rng)
        pairs.append((en, " ".join(LEXICON[w] for w in en.split())))
    return pairs


TINY_SENTENCES = [
    "the red car sees a dog",
    "open the file",
    "a small cat and the old tree",
    "save the new window",
    "the big blue house has a green book",
    "close a window",
    "the dog likes the cat",
    "a tree",
]


def _train_toy(model, tokenizer, pairs, steps: int = 150, batch: int = 32) -> None:
    import torch
    import torch.nn.functional as F

    c = model.config
    src_ids = [tokenizer.encode(s) + [c.eos_id] for s, _ in pairs]
    tgt_ids = [tokenizer.encode(t) for _, t in pairs]

    def pad(rows: list[list[int]]):
        width = max(len(r) for r in rows)
        return torch.tensor([r + [c.pad_id] * (width - len(r)) for r in rows])  # (B, T)

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = random.Random(0)
    model.train()
    for _ in range(steps):
        idx = rng.sample(range(len(pairs)), batch)
        src = pad([src_ids[i] for i in idx])
        tgt_in = pad([[c.bos_id] + tgt_ids[i] for i in idx])
        tgt_out = pad([tgt_ids[i] + [c.eos_id] for i in idx])
        logits = model(src, tgt_in)  # (B, T, V)
        loss = F.cross_entropy(
            logits.reshape(-1, c.vocab_size), tgt_out.reshape(-1), ignore_index=c.pad_id
        )  # logits (B*T, V), targets (B*T,)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


@pytest.fixture(scope="session")
def tiny_sentences() -> list[str]:
    return list(TINY_SENTENCES)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    import torch

    from model.checkpoint import save_checkpoint
    from model.config import ModelConfig
    from model.tokenizer import Tokenizer, train_tokenizer
    from model.transformer import Transformer

    root = tmp_path_factory.mktemp("tiny_checkpoint")
    pairs = toy_pairs(600)
    texts = [t for pair in pairs for t in pair]
    spm_path = train_tokenizer(texts, root / "spm.model", vocab_size=80)
    tokenizer = Tokenizer.load(spm_path)
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=tokenizer.vocab_size,
        d_model=32,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_positions=64,
    )
    model = Transformer(config)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only add contention
    try:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            _train_toy(model, tokenizer, pairs)
    finally:
        torch.set_num_threads(threads)
    recipe = {"source_lang": "en", "target_lang": "de", "corpus": "toy lexicon", "steps": 150}
    return save_checkpoint(root / "tiny.pt", model, tokenizer, step=150, recipe=recipe)


@pytest.fixture(scope="session")
def tiny_bundle(tiny_checkpoint, tmp_path_factory) -> Path:
    from export.bundle import write_bundle

    out = tmp_path_factory.mktemp("bundles") / "en-de"
    return write_bundle(tiny_checkpoint, out, variants=("fp32", "int8"), name="en-de")


@pytest.fixture
def restore_logging():
    """Put the root logger's handlers and level back after a test that configures logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def marian_bundles(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """tests.marian's two tiny Marian directories, imported with `python -m export.marian`
    (parity check recorded): bundle name -> (Transformers directory, bundle directory); the
    mapped checkpoint is kept beside the bundle as <name>.pt."""
    pytest.importorskip("transformers", reason="transformers (the bench extra) is not installed")
    import torch

    from export.marian import main as import_main
    from tests.marian import SPECS, make_marian_dir

    root = tmp_path_factory.mktemp("marian")
    found = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for spec in SPECS:
            hf_dir = make_marian_dir(spec, root / "hf" / spec.name)
            bundle = root / "bundles" / spec.name
            checkpoint = bundle.parent / f"{spec.name}.pt"  # kept for the tests
            args = [str(hf_dir), "--out", str(bundle), "--threads", "1", "--checkpoint"]
            assert import_main([*args, str(checkpoint)]) == 0
            found[spec.name] = (hf_dir, bundle)
    finally:
        torch.set_num_threads(threads)
    return found
