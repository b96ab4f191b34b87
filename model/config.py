"""The model's configuration: one frozen dataclass, saved inside every checkpoint.

The fields after unk_id name what imported models do differently from the paper (Marian/OPUS-MT,
CTranslate2 models as Argos Translate ships them); their defaults are the paper's, so our own
checkpoints and bundles read the same as before.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

ACTIVATIONS = ("relu", "swish", "gelu")
POSITIONAL_LAYOUTS = ("interleaved", "halves", "stored")


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
    # sin/cos interleaved, "halves": sin | cos (Marian), or "stored": a table read from the
    # checkpoint (CTranslate2 models store theirs, or the importer computes CTranslate2's own)
    positional_layout: str = "interleaved"
    output_bias: bool = False  # a bias added to the output logits (Marian's final_logits_bias)
    decoder_start_id: int | None = None  # the decoder's first input; None: bos_id
    pre_norm: bool = False  # x + Sublayer(LayerNorm(x)), and a final LayerNorm per stack
    layer_norm_eps: float = 1e-5
    scale_embeddings: bool = True  # token embeddings times sqrt(d_model)
    source_vocab_size: int | None = None  # None: source and target share one embedding matrix
    tied_output: bool = True  # the output projection is the target embedding matrix

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
        if self.source_vocab_size is not None and self.source_vocab_size <= 0:
            raise ValueError(f"source_vocab_size must be positive, got {self.source_vocab_size}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps}")

    @property
    def shared_embeddings(self) -> bool:
        """One embedding matrix for source and target tokens."""
        return self.source_vocab_size is None

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
