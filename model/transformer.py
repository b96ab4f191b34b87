"""The encoder-decoder Transformer: encode once, decode teacher-forced or step by step."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.layers import KV, DecoderLayer, Dropout, Embeddings, EncoderLayer, PositionalEncoding


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """ids (B, S) -> (B, 1, 1, S), True at real tokens."""
    return (ids != pad_id)[:, None, None, :]


def look_ahead_mask(n_new: int, n_past: int, device: torch.device | None = None) -> Tensor:
    """(1, 1, T, Tpast + T): new position i may attend to every past position and new ones <= i."""
    rows = torch.arange(n_new, device=device)[:, None] + n_past  # (T, 1)
    cols = torch.arange(n_past + n_new, device=device)[None, :]  # (1, Tpast + T)
    return (cols <= rows)[None, None]


class Transformer(nn.Module):
    """Shared source/target embedding, N encoder and N decoder layers, tied output projection.

    Imported models may differ where their config says so: pre-norm layers with a final
    LayerNorm per stack, a source embedding of its own (separate vocabularies), an output
    projection of its own, an output bias. Each option adds modules only when set, so our own
    checkpoints keep their state-dict keys."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        # `embeddings` is the target side's (and, shared, the source side's) table
        self.embeddings = Embeddings(c.vocab_size, c.d_model, c.pad_id, c.scale_embeddings)
        self.source_embeddings = (
            None if c.shared_embeddings
            else Embeddings(c.source_vocab_size, c.d_model, c.pad_id, c.scale_embeddings)
        )
        self.positional = PositionalEncoding(c.d_model, c.max_positions, c.positional_layout)
        self.dropout = Dropout(c.dropout)
        sizes = (c.d_model, c.n_heads, c.d_ff, c.dropout, c.activation, c.pre_norm,
                 c.layer_norm_eps)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(*sizes) for _ in range(c.n_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(*sizes) for _ in range(c.n_decoder_layers)
        )
        norm = (lambda: nn.LayerNorm(c.d_model, eps=c.layer_norm_eps)) if c.pre_norm else None
        self.encoder_norm = norm() if norm else None
        self.decoder_norm = norm() if norm else None
        self.output_weight = (
            None if c.tied_output else nn.Parameter(torch.empty(c.vocab_size, c.d_model))
        )
        # Marian's final_logits_bias; absent (not a zero tensor) by default, so our checkpoints
        # keep their state-dict keys
        self.output_bias = nn.Parameter(torch.zeros(c.vocab_size)) if c.output_bias else None
        self._init_linear_weights()
        if self.output_weight is not None:
            nn.init.normal_(self.output_weight, mean=0.0, std=c.d_model**-0.5)

    @property
    def source_table(self) -> Embeddings:
        """The embeddings of source tokens."""
        return self.embeddings if self.source_embeddings is None else self.source_embeddings

    @property
    def projection(self) -> Tensor:
        """The output projection's weight (V, D)."""
        return self.embeddings.weight if self.output_weight is None else self.output_weight

    def _init_linear_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def embed(self, ids: Tensor, positions: Tensor, table: Embeddings | None = None) -> Tensor:
        """ids, positions (B, T) -> (B, T, D), target embeddings unless table is given."""
        table = self.embeddings if table is None else table
        return self.dropout(table(ids) + self.positional(positions))

    def project(self, h: Tensor) -> Tensor:
        """Decoder states (B, T, D) -> logits (B, T, V) through the (shared) embedding matrix."""
        if self.decoder_norm is not None:
            h = self.decoder_norm(h)
        return F.linear(h, self.projection, self.output_bias)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) -> memory (B, S, D) and the source padding mask (B, 1, 1, S)."""
        src_mask = padding_mask(src, self.config.pad_id)
        positions = torch.arange(src.size(1), device=src.device).expand_as(src)  # (B, S)
        x = self.embed(src, positions, self.source_table)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, src_mask

    def cross_kv(self, memory: Tensor) -> list[KV]:
        """Per decoder layer, the cross-attention keys/values of the memory, each (B, H, S, Dh)."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]

    def decode_step(
        self,
        tokens: Tensor,
        positions: Tensor,
        cross_kv: list[KV],
        src_mask: Tensor,
        past: list[KV] | None = None,
        project: bool = True,
    ) -> tuple[Tensor, list[KV]]:
        """Incremental decoding. tokens, positions (B, T) are new target positions following the
        cached ones in past (per layer, (B, H, Tpast, Dh)). Returns logits (B, T, V), or with
        project=False the last layer's states (B, T, D), and the cache extended by the new
        positions."""
        n_past = 0 if past is None else past[0][0].size(2)
        self_mask = look_ahead_mask(tokens.size(1), n_past, tokens.device)
        x = self.embed(tokens, positions)
        new_past: list[KV] = []
        for i, layer in enumerate(self.decoder_layers):
            x, kv = layer(x, self_mask, cross_kv[i], src_mask, None if past is None else past[i])
            new_past.append(kv)
        return (self.project(x) if project else x), new_past

    def forward(self, src: Tensor, tgt_in: Tensor, select: Tensor | None = None) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) starting with BOS -> logits (B, T, V).
        Target padding needs no mask of its own: pads come after real tokens, and the look-ahead
        mask already keeps every real position from seeing them. With select, a (B, T) bool
        mask or the flat indices (N,) of positions in (B * T), only the selected positions'
        logits, (N, V): training projects no padding onto the vocabulary (the projection and its
        softmax are a large share of a small model's step). Indices found on the host spare a
        GPU the wait that a mask costs (its count must come back before the projection)."""
        memory, src_mask = self.encode(src)
        positions = torch.arange(tgt_in.size(1), device=tgt_in.device).expand_as(tgt_in)
        states, _ = self.decode_step(tgt_in, positions, self.cross_kv(memory), src_mask,
                                     project=False)
        if select is not None:
            states = states[select] if select.dtype == torch.bool else states.flatten(0, 1)[select]
        return self.project(states)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
