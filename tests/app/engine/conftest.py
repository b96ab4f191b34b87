"""Fixtures of the engine tests that compare with the PyTorch reference decoders."""

from __future__ import annotations

import pytest
import torch

from model.checkpoint import load_model
from tests.conftest import toy_pairs


@pytest.fixture(scope="module")
def reference(tiny_checkpoint):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model on a shared machine: one thread is fastest
    model, tokenizer, _ = load_model(tiny_checkpoint)
    yield model, tokenizer
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sources(reference, tiny_sentences):
    """Token ids of the tiny sentences, some unseen toy sentences, and untrained gibberish."""
    _, tokenizer = reference
    texts = tiny_sentences + [en for en, _ in toy_pairs(12, seed=7)]
    texts += ["zzz qqq the", "x", "house house house house house house"]
    return [tokenizer.encode(t) for t in texts]
