"""bench.int8_exactness: 7-bit int8 weights give the exact integer result on any CPU."""

from __future__ import annotations

from bench import int8_exactness


def test_seven_bit_weights_are_exact_and_close_to_fp32(capsys):
    found = int8_exactness.errors(k=256, n=512, rows=8)
    off_exact, off_fp32 = found[7]
    assert off_exact < 1e-5  # no saturation: the kernel's result is the integer arithmetic's
    assert off_fp32 < 0.05
    assert int8_exactness.main(["--n", "512", "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "7-bit weights: off the exact integer result by 0.00%" in out
