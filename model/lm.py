"""A target-language model that reranks a translation's n-best list.

    python -m model.lm --config recipes/en-de-lm.yaml [--resume] [--set key=value ...]

A stack of self-attention layers (the encoder's layer, model/layers.py, under the look-ahead
mask) over the translation model's own SentencePiece pieces, trained on the target side of the
corpus: it reads the very token ids the beam search returns, so a bundle scores its hypotheses
without decoding or encoding text again. The beam search ranks by how well a hypothesis
follows the source; the language model adds how well it reads as the target language, which a
small translation model gets wrong most on everyday sentences (a noun's gender, a fixed
phrase). export.lm writes it into a bundle; the engine adds its weighted score (docs/engine.md,
"Reranking with a language model").

Ctrl-C (or SIGTERM) saves a checkpoint before exiting; --resume continues from the last one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from model.checkpoint import checkpoint_paths, read_checkpoint
from model.data import Example, iterate_epochs, read_domains, sample_domains
from model.hardware import machine
from model.layers import Dropout, Embeddings, EncoderLayer, PositionalEncoding
from model.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer
from model.train import StopFlag, inverse_sqrt_lr, log, read_recipe, wrong_types
from model.transformer import look_ahead_mask, padding_mask


@dataclass(frozen=True)
class LMShape:
    """The language model's architecture (post-norm layers, ReLU, tied output projection)."""

    vocab_size: int
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    max_positions: int = 512


class LanguageModel(nn.Module):
    """Token ids (B, T), BOS first -> next-token logits (B, T, V)."""

    def __init__(self, shape: LMShape) -> None:
        super().__init__()
        s = self.shape = shape
        self.embeddings = Embeddings(s.vocab_size, s.d_model, PAD_ID)
        self.positional = PositionalEncoding(s.d_model, s.max_positions)
        self.dropout = Dropout(s.dropout)
        self.layers = nn.ModuleList(EncoderLayer(s.d_model, s.n_heads, s.d_ff, s.dropout)
                                    for _ in range(s.n_layers))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, ids: Tensor) -> Tensor:
        mask = look_ahead_mask(ids.size(1), 0, ids.device) & padding_mask(ids, PAD_ID)
        positions = torch.arange(ids.size(1), device=ids.device).expand_as(ids)
        x = self.dropout(self.embeddings(ids) + self.positional(positions))
        for layer in self.layers:
            x = layer(x, mask)
        return F.linear(x, self.embeddings.weight)

    @torch.no_grad()
    def log_probs(self, ids: Tensor) -> Tensor:
        """ids (B, T): BOS, tokens, EOS, then padding -> (B,) the log-probability of each row's
        tokens after BOS (EOS included): what the bundle's graph computes."""
        logp = torch.log_softmax(self.forward(ids[:, :-1]).float(), dim=-1)
        picked = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T - 1)
        return (picked * (ids[:, 1:] != PAD_ID)).sum(-1)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@dataclass(frozen=True)
class LMConfig:
    """The language model's recipe. Paths are relative to the working directory."""

    train: str = "data/en-de-v3/train"  # Moses prefix: <train>.<lang> (and <train>.domain)
    dev: str = "data/en-de-v3/dev"  # its <dev>.<lang> gives the dev perplexity
    lang: str = "de"
    # the translation model's SentencePiece model: the language model reads its ids
    tokenizer: str = "bundles/en-de/sentencepiece.model"
    out_dir: str = "runs/en-de-lm"
    # times each domain's sentences are taken per epoch (model.data.sample_domains); 0 leaves
    # a domain out. Labels: <train>.domain
    domain_sample: dict[str, float] = dataclasses.field(default_factory=dict)
    min_words: int = 3  # shorter lines (dictionary headwords, labels) teach no sentence
    max_len: int = 128  # tokens; longer sentences are skipped
    d_model: int = 256
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    batch_tokens: int = 6000
    lr_scale: float = 1.0
    warmup_steps: int = 1000
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    max_steps: int = 100_000
    max_minutes: float = 0.0  # stop (and save) after this much wall time; 0: until stopped
    eval_every: int = 500
    save_every_minutes: float = 10.0
    keep_last: int = 3
    dev_sentences: int = 1000
    seed: int = 1
    threads: int = 0
    device: str = "auto"  # "cuda" where there is one, else "cpu"


def load_lm_config(path: str | None, overrides: list[str]) -> LMConfig:
    data = read_recipe(path, overrides)
    unknown = sorted(set(data) - {f.name for f in fields(LMConfig)})
    if unknown:
        raise SystemExit(f"unknown language model options: {unknown}; see LMConfig in {__file__}")
    wrong = wrong_types(LMConfig, data)
    if wrong:
        raise SystemExit(f"language model options of the wrong type: {', '.join(wrong)}")
    return LMConfig(**data)


def sentences(path: str, lang: str, min_words: int) -> tuple[list[str], list[int], int]:
    """The lines of <path>.<lang> with at least min_words words, their line numbers and the
    count of all lines."""
    lines = Path(f"{path}.{lang}").read_text(encoding="utf-8").splitlines()
    kept = [i for i, line in enumerate(lines) if len(line.split()) >= min_words]
    return [lines[i] for i in kept], kept, len(lines)


def examples(tok: Tokenizer, texts: list[str], max_len: int) -> list[Example]:
    """BOS, ids, EOS per text (as the `tgt` of an Example, its `src` empty); longer ones
    skipped."""
    return [Example([], [BOS_ID, *ids, EOS_ID])
            for ids in tok.encode_batch(texts) if 0 < len(ids) <= max_len - 2]


def pad_rows(rows: list[list[int]], device: torch.device | None = None) -> Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows], dtype=torch.long,
                        device=device)


def dev_loss(model: LanguageModel, rows: list[Example], batch: int = 64) -> float:
    """Mean cross-entropy per token (no smoothing) over rows: its exp is the perplexity. The
    model is left in the mode it came in."""
    training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(rows), batch):
        ids = pad_rows([e.tgt for e in rows[i : i + batch]], next(model.parameters()).device)
        total -= float(model.log_probs(ids).sum())
        count += int((ids[:, 1:] != PAD_ID).sum())
    model.train(training)
    return total / max(1, count)


class LMTrainer:
    """One run: `run()` steps until a limit or a stop request, evaluating and saving on
    schedule; a resumed run goes on from its last checkpoint's batch."""

    def __init__(self, cfg: LMConfig, resume: bool = False) -> None:
        self.cfg = cfg
        self.out_dir = Path(cfg.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        existing = checkpoint_paths(self.out_dir)
        if existing and not resume:
            raise SystemExit(f"{self.out_dir} already holds checkpoints: pass --resume or use a "
                             "new out_dir")
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.tok = Tokenizer.load(cfg.tokenizer)
        texts, lines, count = sentences(cfg.train, cfg.lang, cfg.min_words)
        self.by_domain: dict[str, list[Example]] = {}
        if cfg.domain_sample:
            labels = read_domains(f"{cfg.train}.domain", count)
            unknown = set(cfg.domain_sample) - set(labels)
            if unknown:
                raise SystemExit(f"domain_sample names {sorted(unknown)}, not in "
                                 f"{cfg.train}.domain")
            grouped: dict[str, list[str]] = {}
            for text, line in zip(texts, lines, strict=True):
                if cfg.domain_sample.get(labels[line], 1.0) > 0:
                    grouped.setdefault(labels[line], []).append(text)
            self.by_domain = {label: examples(self.tok, group, cfg.max_len)
                              for label, group in sorted(grouped.items())}
        else:
            self.by_domain = {"": examples(self.tok, texts, cfg.max_len)}
        dev_texts, _, _ = sentences(cfg.dev, cfg.lang, cfg.min_words)
        self.dev = examples(self.tok, dev_texts[: cfg.dev_sentences], cfg.max_len)
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu")
                                   if cfg.device == "auto" else cfg.device)
        self.model = LanguageModel(self.shape).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.0, betas=(0.9, 0.98),
                                          eps=1e-9)
        self.step, self.epoch, self.batch_index = 0, 0, 0
        self.history: list[dict] = []
        self.prior_minutes = 0.0
        self.machines: list[str] = []
        if existing:
            self._resume(existing[-1])
        here = (torch.cuda.get_device_name(self.device) if self.device.type == "cuda"
                else machine())
        if self.machines[-1:] != [here]:
            self.machines.append(here)
        self.stop = StopFlag()
        self.started = time.monotonic()
        count = sum(len(e) for e in self.by_domain.values())
        print(f"{count} sentences, {len(self.dev)} dev sentences, vocab {self.tok.vocab_size}, "
              f"{self.model.num_parameters() / 1e6:.1f}M parameters, device {self.device}")

    @property
    def shape(self) -> LMShape:
        c = self.cfg
        return LMShape(self.tok.vocab_size, c.d_model, c.n_heads, c.n_layers, c.d_ff, c.dropout)

    def _resume(self, path: Path) -> None:
        state = read_checkpoint(path)
        if state["shape"] != dataclasses.asdict(self.shape):
            raise SystemExit(f"{path} has shape {state['shape']}, the recipe "
                             f"{dataclasses.asdict(self.shape)}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.epoch, self.batch_index = (state["step"], state["epoch"],
                                                   state["batch_index"])
        self.history, self.prior_minutes = state["history"], state["train_minutes"]
        self.machines = state["machines"]
        print(f"resumed from {path} (step {self.step})")

    def epoch_examples(self, epoch: int) -> list[Example]:
        if not self.cfg.domain_sample:
            return self.by_domain[""]
        return sample_domains(self.by_domain, self.cfg.domain_sample, self.cfg.seed + epoch)

    def minutes(self) -> float:
        return self.prior_minutes + (time.monotonic() - self.started) / 60

    def checkpoint(self, reason: str) -> Path:
        path = self.out_dir / f"step_{self.step}.pt"
        tmp = path.with_suffix(".tmp")
        torch.save({"kind": "language model", "shape": dataclasses.asdict(self.shape),
                    "model": self.model.state_dict(), "tokenizer": self.tok.state(),
                    "optimizer": self.optimizer.state_dict(), "step": self.step,
                    "epoch": self.epoch, "batch_index": self.batch_index,
                    "history": self.history, "train_minutes": round(self.minutes(), 2),
                    "machines": self.machines, "recipe": dataclasses.asdict(self.cfg)}, tmp)
        tmp.replace(path)
        for old in checkpoint_paths(self.out_dir)[: -self.cfg.keep_last]:
            old.unlink()
        log(self.out_dir, {"event": "checkpoint", "step": self.step, "reason": reason})
        return path

    def evaluate(self) -> dict:
        loss = dev_loss(self.model, self.dev)
        entry = {"step": self.step, "dev_loss": round(loss, 4),
                 "dev_perplexity": round(math.exp(loss), 2), "minutes": round(self.minutes(), 1)}
        self.history.append(entry)
        log(self.out_dir, {"event": "eval", **entry})
        return entry

    def run(self) -> Path:
        cfg = self.cfg
        bar = tqdm(total=cfg.max_steps, initial=self.step, unit="step", dynamic_ncols=True)
        saved_at, smoothed = time.monotonic(), None
        stream = iterate_epochs(self.epoch_examples, cfg.batch_tokens, cfg.seed, self.epoch)
        skip = self.batch_index
        for epoch, index, batch in stream:
            if epoch == self.epoch and index < skip:  # a resumed run has seen these
                continue
            skip = 0
            if self.step >= cfg.max_steps or self.stop.stop or (
                    cfg.max_minutes and time.monotonic() - self.started > cfg.max_minutes * 60):
                break
            self.epoch, self.batch_index = epoch, index + 1
            self.step += 1
            lr = inverse_sqrt_lr(self.step, cfg.d_model, cfg.warmup_steps, cfg.lr_scale)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            ids = pad_rows([e.tgt for e in batch], self.device)
            logits = self.model(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(),
                                   ignore_index=PAD_ID, label_smoothing=cfg.label_smoothing)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm)
            self.optimizer.step()
            # kept on the device and read every 20 steps: a read each step would make a GPU's
            # host wait for every step
            value = loss.detach()
            smoothed = value if smoothed is None else 0.98 * smoothed + 0.02 * value
            bar.update(1)
            if self.step % 20 == 0:
                shown = float(smoothed)
                bar.set_postfix(epoch=epoch, loss=f"{shown:.3f}", lr=f"{lr:.2e}")
                log(self.out_dir, {"step": self.step, "epoch": epoch,
                                   "loss": round(shown, 4), "lr": lr})
            if self.step % cfg.eval_every == 0:
                bar.write(json.dumps(self.evaluate()))
            if time.monotonic() - saved_at > cfg.save_every_minutes * 60:
                self.checkpoint("timed")
                saved_at = time.monotonic()
        bar.close()
        if not self.stop.stop:
            print(json.dumps(self.evaluate()))
        return self.checkpoint("stop" if self.stop.stop else "end")


def load_lm(path: str | Path) -> tuple[LanguageModel, Tokenizer, dict]:
    """A language model checkpoint's model (eval mode), tokenizer and state."""
    state = read_checkpoint(path)
    if state.get("kind") != "language model":
        raise SystemExit(f"{path} is not a language model checkpoint (python -m model.lm)")
    model = LanguageModel(LMShape(**state["shape"]))
    model.load_state_dict(state["model"])
    model.eval()
    return model, Tokenizer(state["tokenizer"]), state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model.lm", description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--config", help="recipe, YAML or JSON (keys: LMConfig fields)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one recipe option, e.g. --set max_minutes=60")
    args = parser.parse_args(argv)
    try:
        trainer = LMTrainer(load_lm_config(args.config, args.set), resume=args.resume)
    except OSError as err:  # a recipe, corpus or tokenizer that is not there
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"final checkpoint: {trainer.run()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
