"""The boxes of the Transformer figure, one small class each, in the paper's order.

Masks are boolean and broadcastable to (B, H, Tq, Tk): True means "may attend". The key/value
cache is explicit data passed in and returned; no module stores state between calls.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

KV = tuple[Tensor, Tensor]  # keys and values, each (B, H, T, Dh)


class Dropout(nn.Module):
    """Inverted dropout: in training, zero each element with probability p and scale the rest
    by 1 / (1 - p); the identity otherwise.

    On the CPU, PyTorch's dropout draws one random number per element, and those draws were
    the largest single cost of a training step of our small model. Here each 64-bit draw gives
    four 16-bit uniform words, one per element: an element is kept when its word is at least a
    threshold, so p is rounded to a multiple of 2^-16 and the scale uses that rounded p.
    Elsewhere (CUDA) PyTorch's own dropout is fast and is used."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p
        dropped = round(p * 65536)
        self._threshold = dropped - 32768  # int16 words below it are dropped
        self._scale = 65536 / (65536 - dropped)

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return nn.functional.dropout(x, self.p, training=True)
        n = x.numel()
        words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
        keep = words.view(torch.int16)[:n].view(x.shape) >= self._threshold
        return x * keep.to(x.dtype).mul_(self._scale)  # the mask in x's dtype: no casts in backward

    def extra_repr(self) -> str:
        return f"p={self.p}"


class PositionalEncoding(nn.Module):
    """Sinusoidal positions, a buffer, never trained. The paper's layout interleaves them (sin on
    even dimensions, cos on odd ones); Marian's ("halves") puts all sines first, then the cosines,
    computed in float64 as Marian does before rounding to float32. "stored": the table is part
    of the state dict (imported models bring their own)."""

    def __init__(self, d_model: int, max_positions: int, layout: str = "interleaved") -> None:
        super().__init__()
        if layout == "stored":  # a table given by the checkpoint (imported models)
            self.register_buffer("table", torch.zeros(max_positions, d_model))
            return
        if layout == "halves":
            position = torch.arange(max_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
            exponent = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model  # (D/2,)
            angles = position / torch.pow(10000.0, exponent)  # (P, D/2)
            table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).float()  # (P, D)
        else:
            position = torch.arange(max_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
            inv_freq = torch.exp(
                torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
            )  # (D/2,)
            table = torch.zeros(max_positions, d_model)  # (P, D)
            table[:, 0::2] = torch.sin(position * inv_freq)
            table[:, 1::2] = torch.cos(position * inv_freq)
        self.register_buffer("table", table, persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        """positions (B, T) integer -> encodings (B, T, D)."""
        return self.table[positions]


class Embeddings(nn.Module):
    """Token embeddings scaled by sqrt(d_model) (or not: some imported models); the same matrix
    is the output projection unless the model has its own."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int, scaled: bool = True) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        nn.init.normal_(self.lut.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.lut.weight[pad_id].zero_()
        self.scale = math.sqrt(d_model) if scaled else 1.0

    @property
    def weight(self) -> Tensor:
        return self.lut.weight

    def forward(self, ids: Tensor) -> Tensor:
        return self.lut(ids) * self.scale  # (B, T, D)


def fused_attention(q: Tensor) -> bool:
    """Whether attention on q's device runs as PyTorch's fused kernel. On a GPU the written-out
    form is six kernel launches and a (B, H, Tq, Tk) score tensor kept for backward per layer,
    and a small model's training step is bound by launches; the fused kernel (memory-efficient
    attention: boolean masks, dropout and backward included) is one. On the CPU the written-out
    form stays: it uses our cheaper Dropout, and it is what the exported graphs compute."""
    return q.device.type == "cuda"


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: Dropout
) -> Tensor:
    """softmax(Q K^T / sqrt(Dh)) V with q (B, H, Tq, Dh), k and v (B, H, Tk, Dh).

    Every row of our masks lets a query see at least one key (a source's first token, a
    target's own position), so the fused kernel and the written-out form agree."""
    if fused_attention(q):
        p = dropout.p if dropout.training else 0.0
        return nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = dropout(torch.softmax(scores, dim=-1))
    return weights @ v  # (B, H, Tq, Dh)


class MultiHeadAttention(nn.Module):
    """Multi-head attention. Keys and values are projected by `project_kv`, so callers can cache
    them (self-attention) or compute them once per source (cross-attention)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = Dropout(dropout)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, x: Tensor) -> KV:
        """x (B, T, D) -> keys and values, each (B, H, T, Dh)."""
        return self.split_heads(self.w_k(x)), self.split_heads(self.w_v(x))

    def forward(self, x: Tensor, kv: KV, mask: Tensor | None) -> Tensor:
        """Queries from x (B, Tq, D) attend over kv; returns (B, Tq, D)."""
        q = self.split_heads(self.w_q(x))  # (B, H, Tq, Dh)
        out = scaled_dot_product_attention(q, kv[0], kv[1], mask, self.dropout)  # (B, H, Tq, Dh)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim)  # (B, Tq, D)
        return self.w_o(out)


ACTIVATIONS = {"relu": torch.relu, "swish": nn.functional.silu, "gelu": nn.functional.gelu}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, act = ReLU in the paper (swish or GELU in some Marian
    models)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str = "relu") -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = Dropout(dropout)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        return self.w_2(self.dropout(self.activation(self.w_1(x))))


class ResidualNorm(nn.Module):
    """The residual and LayerNorm around every sub-layer. Post-norm (the paper):
    LayerNorm(x + Dropout(sublayer(x))); pre-norm (OpenNMT-py, hence Argos Translate's models):
    x + Dropout(sublayer(LayerNorm(x))). `input` gives what the sub-layer reads."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool = False,
                 eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)
        self.pre_norm = pre_norm

    def input(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def forward(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer_out)
        return self.norm(x + self.dropout(sublayer_out))


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str = "relu",
        pre_norm: bool = False, eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout, activation)
        self.attn_norm = ResidualNorm(d_model, dropout, pre_norm, eps)
        self.ff_norm = ResidualNorm(d_model, dropout, pre_norm, eps)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        h = self.attn_norm.input(x)
        x = self.attn_norm(x, self.self_attn(h, self.self_attn.project_kv(h), src_mask))
        return self.ff_norm(x, self.feed_forward(self.ff_norm.input(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder (cross) attention, then the feed-forward network."""

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str = "relu",
        pre_norm: bool = False, eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout, activation)
        self.self_norm = ResidualNorm(d_model, dropout, pre_norm, eps)
        self.cross_norm = ResidualNorm(d_model, dropout, pre_norm, eps)
        self.ff_norm = ResidualNorm(d_model, dropout, pre_norm, eps)

    def forward(
        self,
        x: Tensor,
        self_mask: Tensor,
        cross_kv: KV,
        src_mask: Tensor,
        past: KV | None = None,
    ) -> tuple[Tensor, KV]:
        """x (B, T, D) are the new target positions; past holds keys/values of earlier ones.
        Returns the layer output and the self-attention keys/values including the new positions."""
        h = self.self_norm.input(x)
        k, v = self.self_attn.project_kv(h)  # (B, H, T, Dh)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)  # (B, H, Tpast + T, Dh)
            v = torch.cat([past[1], v], dim=2)
        x = self.self_norm(x, self.self_attn(h, (k, v), self_mask))
        x = self.cross_norm(x, self.cross_attn(self.cross_norm.input(x), cross_kv, src_mask))
        return self.ff_norm(x, self.feed_forward(self.ff_norm.input(x))), (k, v)
