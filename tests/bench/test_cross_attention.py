"""bench.cross_attention: GroupQueryAttention over each sentence's own source length computes the
cross-attention that MultiHeadAttention computes over padded sources."""

import numpy as np
import pytest

from bench import cross_attention


@pytest.mark.parametrize("beams", [1, 4])
def test_own_length_attention_equals_padded(beams):
    lengths = np.array([3, 17, 9, 2, 17, 5])  # mixed, the longest twice, one of 2 tokens
    found = cross_attention.compare(lengths, beams, reps=1)
    assert found["max_diff"] < 1e-5
    assert found["padded_us"] > 0 and found["own_us"] > 0


def test_batches_take_their_lengths_from_the_list():
    lengths = list(range(2, 60))
    made = cross_attention.batches(lengths, rows=8)
    assert set(made) == {"uniform 20", "mixed (arrival order)", "sorted neighbours"}
    assert all(len(batch) == 8 for batch in made.values())
    assert set(made["mixed (arrival order)"]) <= set(lengths)
    sorted_batch = made["sorted neighbours"]
    assert list(sorted_batch) == sorted(sorted_batch)
    assert sorted_batch.max() - sorted_batch.min() == 7  # 8 neighbours of consecutive lengths
