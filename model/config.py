"""The model's configuration: one frozen dataclass, saved inside every checkpoint.

The last four fields name what Marian (OPUS-MT) models do differently from the paper; their
defaults are the paper's, so our own checkpoints and bundles read the same as before.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

ACTIVATIONS = ("relu", "swish", "gelu")
POSITIONAL_LAYOUTS = ("interleaved", "halves")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture numbers of the encoder-decoder Transformer and its special token ids."""

    vocab_size: int
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 4
    n_decoder_layers: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    max_positions: int = 512
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    activation: str = "relu"  # the feed-forward non-linearity: relu, swish (SiLU) or gelu
    positional_layout: str = "interleaved"  # sin/cos interleaved, or "halves": sin | cos (Marian)
    output_bias: bool = False  # a bias added to the output logits (Marian's final_logits_bias)
    decoder_start_id: int | None = None  # the decoder's first input; None: bos_id

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if min(self.vocab_size, self.d_model, self.n_heads, self.d_ff, self.max_positions) <= 0:
            raise ValueError(
                "vocab_size, d_model, n_heads, d_ff and max_positions must be positive"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.positional_layout not in POSITIONAL_LAYOUTS:
            raise ValueError(
                f"positional_layout must be one of {POSITIONAL_LAYOUTS}, "
                f"got {self.positional_layout!r}"
            )
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for sinusoidal positions, got {self.d_model}")

    @property
    def start_id(self) -> int:
        """The token the decoder starts from."""
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown model config keys: {sorted(unknown)}")
        return cls(**data)
