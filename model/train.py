"""Teacher-forced training with cross-entropy, the paper's warm-up schedule and checkpoints.

    python -m model.train --config recipes/en-de.yaml [--resume] [--set key=value ...]

Every option of TrainConfig can be set in the config file (YAML or JSON) or with --set.
Ctrl-C (or SIGTERM) saves a checkpoint before exiting; --resume continues from the last one.
--init-from CKPT starts a new out_dir from another checkpoint's weights, tokenizer, step and log
(e.g. one rebuilt from a shipped bundle by `python -m export.unbundle`): the optimizer starts
fresh, so its learning rate ramps up again over rewarm_steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from model.checkpoint import (
    average_checkpoints,
    checkpoint_paths,
    read_checkpoint,
    save_checkpoint,
)
from model.config import ModelConfig
from model.data import (
    HURRIES,
    Batch,
    BatchStream,
    Example,
    make_examples,
    prepare_batch,
    read_corpus,
    read_domains,
    sample_domains,
    stream_batches,
    token_batches,
    typed_in_a_hurry,
)
from model.evaluate import corpus_scores, translate_greedy
from model.hardware import machine
from model.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer
from model.transformer import Transformer


@dataclass(frozen=True)
class TrainConfig:
    """The training recipe. Paths are relative to the working directory."""

    train: str = "data/en-de/train"  # Moses prefix (train.en + train.de), .tsv or .tmx
    dev: str = "data/en-de/dev"
    # more dev sets scored at each evaluation (greedy BLEU/chrF on bleu_sentences of each),
    # e.g. {"general": "data/en-de/dev.general"}; logged as dev_<name>_bleu / _chrf
    dev_extra: dict[str, str] = dataclasses.field(default_factory=dict)
    # per-domain share of the training pairs used in each epoch (a fresh seeded sample per
    # epoch), e.g. {"general": 0.3}; domains not named are used whole. Labels: <train>.domain
    domain_sample: dict[str, float] = dataclasses.field(default_factory=dict)
    # share of each epoch's pairs (a fresh seeded sample per epoch) given with their source as
    # typed in a hurry: lower-cased, without the final mark, or both, one of the three at random
    # (model.data.typed_in_a_hurry)
    hurried_share: float = 0.0
    src_lang: str = "en"
    tgt_lang: str = "de"
    out_dir: str = "runs/en-de"
    tokenizer: str = ""  # an existing SentencePiece model; empty: train one into out_dir
    # architecture; model.vocab_size is the size of the SentencePiece model to train (the
    # tokenizer's own size wins) and the special token ids are the tokenizer's
    model: ModelConfig = dataclasses.field(default_factory=lambda: ModelConfig(vocab_size=8000))
    max_len: int = 160  # tokens per side; longer pairs are skipped
    # optimisation
    batch_tokens: int = 6000  # padded tokens per side in one batch
    lr_scale: float = 1.0  # multiplies the paper's d_model^-0.5 * min(...) schedule
    warmup_steps: int = 4000
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    max_steps: int = 100_000
    max_epochs: int = 100
    max_minutes: float = 0.0  # stop (and save) after this much wall time in this run; 0 = no limit
    rewarm_steps: int = 200  # after --init-from: linear lr ramp for the fresh optimizer state
    # bookkeeping
    eval_every: int = 1000
    save_every: int = 500
    # also save when this many minutes passed since the last save (0: steps only), so a slow or
    # shared machine still leaves a recent checkpoint to resume from
    save_every_minutes: float = 0.0
    keep_last: int = 5
    average_last: int = 5  # at the end, average the last K checkpoints into averaged.pt
    bleu_sentences: int = 500  # dev sentences decoded (greedy) at each evaluation
    seed: int = 1
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    bf16: str = "auto"  # "auto" (on CUDA, or a CPU with bf16 support), "on" or "off"
    device: str = "auto"
    # processes that make the batches ahead of the steps; -1: two on a GPU, none on a CPU
    # (where they would take cores from the step, which is far longer than making its batch)
    loader_workers: int = -1

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model to build for a tokenizer of vocab_size pieces."""
        return dataclasses.replace(
            self.model, vocab_size=vocab_size, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            unk_id=UNK_ID,
        )


def load_train_config(path: str | None, overrides: list[str]) -> TrainConfig:
    """Read a YAML/JSON recipe, then apply key=value overrides (values parsed as YAML/JSON)."""
    return train_config_from_dict(read_recipe(path, overrides))


def read_recipe(path: str | None, overrides: list[str]) -> dict:
    """A YAML/JSON recipe as a dict, with key=value overrides applied (values parsed as JSON,
    else kept as strings)."""
    data: dict = {}
    if path:
        text = Path(path).read_text(encoding="utf-8")
        if path.endswith((".yaml", ".yml")):
            import yaml

            try:
                data = yaml.safe_load(text) or {}
            except yaml.YAMLError as err:
                raise SystemExit(f"{path}: not a YAML recipe: {err}") from None
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as err:
                raise SystemExit(f"{path}: not a JSON recipe: {err}") from None
        if not isinstance(data, dict):
            raise SystemExit(f"{path}: a recipe is a mapping of options to values")
    for item in overrides:
        key, _, value = item.partition("=")
        try:
            data[key] = json.loads(value)
        except json.JSONDecodeError:
            data[key] = value
    return data


MODEL_FIELDS = {f.name for f in fields(ModelConfig)}


def train_config_from_dict(data: dict) -> TrainConfig:
    """A recipe as a dict: the architecture under "model", or (as older recipes and checkpoints
    have it) its keys at the top level."""
    data = dict(data)
    model = dict(data.pop("model", None) or {})
    model.update({key: data.pop(key) for key in MODEL_FIELDS & set(data)})
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(data) - known) + sorted(f"model.{k}" for k in set(model) - MODEL_FIELDS)
    if unknown:
        raise SystemExit(f"unknown training options: {unknown}; see TrainConfig in {__file__}")
    wrong = wrong_types(TrainConfig, data) + wrong_types(ModelConfig, model, "model.")
    if wrong:
        raise SystemExit(f"training options of the wrong type: {', '.join(wrong)}")
    if "adam_betas" in data:
        data["adam_betas"] = tuple(data["adam_betas"])
    if not 0.0 <= data.get("hurried_share", 0.0) <= 1.0:
        raise SystemExit(f"hurried_share is a share of the pairs, 0 to 1: {data['hurried_share']}")
    if data.get("loader_workers", -1) < -1:
        raise SystemExit(f"loader_workers is a count, or -1 for the default: "
                         f"{data['loader_workers']}")
    return TrainConfig(**data, model=ModelConfig(**{"vocab_size": 8000, **model}))


# The Python types a recipe value of a plain field may have (an int is a float, a bool is not an
# int); fields of other types (dicts, tuples) are left to the code that reads them.
_PLAIN_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def wrong_types(cls: type, values: dict, prefix: str = "") -> list[str]:
    """The options whose value a plain field cannot take (`--set batch_tokens=abc`), so that the
    recipe is refused before training rather than failing somewhere in it."""
    types = {f.name: str(f.type) for f in fields(cls)}
    wrong = []
    for key, value in values.items():
        kinds = [kind.strip() for kind in types[key].split("|")]
        allowed = tuple(t for kind in kinds for t in _PLAIN_TYPES.get(kind, ()))
        if not allowed or (value is None and "None" in kinds):
            continue
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            wrong.append(f"{prefix}{key}={value!r} (expected {types[key]})")
    return wrong


def inverse_sqrt_lr(step: int, d_model: int, warmup: int, scale: float) -> float:
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1."""
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def pick_device(cfg: TrainConfig) -> torch.device:
    if cfg.device != "auto":
        return torch.device(cfg.device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def use_bf16(cfg: TrainConfig, device: torch.device) -> bool:
    if cfg.bf16 in ("on", "off"):
        return cfg.bf16 == "on"
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def prepare_tokenizer(cfg: TrainConfig, train_pairs: list[tuple[str, str]]) -> Tokenizer:
    if cfg.tokenizer:
        return Tokenizer.load(cfg.tokenizer)
    path = Path(cfg.out_dir) / "spm.model"
    if not path.exists():
        pieces = cfg.model.vocab_size
        print(f"training a {pieces}-piece SentencePiece model on both sides -> {path}")
        texts = [s for pair in train_pairs for s in pair]
        train_tokenizer(texts, path, vocab_size=cfg.model.vocab_size)
    return Tokenizer.load(path)


def encode_pairs(tok: Tokenizer, pairs: list[tuple[str, str]], max_len: int) -> list[Example]:
    src = tok.encode_batch([s for s, _ in pairs])
    tgt = tok.encode_batch([t for _, t in pairs])
    return make_examples(src, tgt, BOS_ID, EOS_ID, max_len)


def batch_loss(
    model: Transformer, batch: Batch, cfg: TrainConfig, device: torch.device, bf16: bool,
    label_smoothing: float | None = None, reduction: str = "mean",
) -> tuple[torch.Tensor, int]:
    """Cross-entropy over the batch's real target tokens (label-smoothed as the recipe says
    unless given; their mean, or with reduction="sum" their sum), and their count."""
    src, tgt_in, tgt_out, real = (t.to(device, non_blocking=True) for t in batch)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(src, tgt_in, select=real)  # (N, V): the real target positions only
    smoothing = cfg.label_smoothing if label_smoothing is None else label_smoothing
    loss = F.cross_entropy(
        logits.float(), tgt_out.flatten()[real], label_smoothing=smoothing, reduction=reduction
    )
    return loss, len(real)


@torch.no_grad()
def validate(
    model: Transformer,
    tok: Tokenizer,
    dev_examples: list[Example],
    dev_pairs: list[tuple[str, str]],
    cfg: TrainConfig,
    device: torch.device,
    bf16: bool,
    extra: dict[str, list[tuple[str, str]]] | None = None,
) -> dict:
    """Dev loss (no label smoothing) on the whole dev set, greedy BLEU/chrF on a prefix of it
    and of each extra dev set."""
    model.eval()
    total, count = 0.0, 0
    for batch in token_batches(dev_examples, cfg.batch_tokens):
        loss, n = batch_loss(model, prepare_batch(batch, PAD_ID), cfg, device, bf16,
                             label_smoothing=0.0, reduction="sum")
        total += loss.item()
        count += n
    result = {"dev_loss": total / max(count, 1)}
    for name, pairs in {"": dev_pairs, **(extra or {})}.items():
        sample = pairs[: cfg.bleu_sentences]
        hyps = translate_greedy(model, tok, [s for s, _ in sample])
        scores = corpus_scores(hyps, [t for _, t in sample])
        prefix = f"dev_{name}_" if name else "dev_"
        result[prefix + "bleu"], result[prefix + "chrf"] = scores["bleu"], scores["chrf"]
    model.train()
    return result


class StopFlag:
    """Set by Ctrl-C or SIGTERM; the loop saves a checkpoint and exits at the next step."""

    def __init__(self) -> None:
        self.stop = False
        signal.signal(signal.SIGINT, self._handler)
        signal.signal(signal.SIGTERM, self._handler)

    def _handler(self, signum, frame) -> None:
        if self.stop:  # a second Ctrl-C exits at once
            raise KeyboardInterrupt
        self.stop = True
        print("\nstop requested: saving a checkpoint ...", file=sys.stderr)


def start_from(cfg: TrainConfig, path: str | Path) -> dict:
    """Read a checkpoint to start a new run from; its tokenizer becomes the run's."""
    state = read_checkpoint(path)
    spm_path = Path(cfg.out_dir) / "spm.model"
    if cfg.tokenizer or (spm_path.exists() and spm_path.read_bytes() != state["tokenizer"]):
        raise SystemExit(f"--init-from brings its own tokenizer: unset tokenizer, clear {spm_path}")
    expected = cfg.model_config(Tokenizer(state["tokenizer"]).vocab_size)
    # dropout is how the weights are trained, not their shape: a run may go on with another
    found = dataclasses.replace(ModelConfig.from_dict(state["config"]), dropout=expected.dropout)
    if found != expected:
        raise SystemExit(f"{path} has config {state['config']}, the recipe {expected.to_dict()}")
    spm_path.write_bytes(state["tokenizer"])
    return state


@dataclass
class Progress:
    """Where a run stands; saved in every checkpoint and read back on --resume / --init-from."""

    step: int = 0
    epoch: int = 0
    batch_index: int = 0  # the next batch of the epoch to read when resuming
    history: list[dict] = dataclasses.field(default_factory=list)  # one entry per evaluation
    prior_minutes: float = 0.0  # training time of earlier runs of this out_dir (resumes add up)
    rewarm_from: int | None = None  # the step a fresh optimizer took over (--init-from)
    machines: list[str] = dataclasses.field(default_factory=list)  # trained on, in order


class Trainer:
    """One training run: `run()` takes batches and makes steps, evaluating and checkpointing on
    schedule. The steps are methods (`step`, `evaluate`, `checkpoint`); the state they share is
    named on the object (`progress`, `loss_avg`, ...), never read from a closure."""

    def __init__(
        self, cfg: TrainConfig, resume: bool = False, init_from: str | Path | None = None
    ) -> None:
        self.cfg = cfg
        self.out_dir = Path(cfg.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        existing = checkpoint_paths(self.out_dir)
        if init_from and existing:
            raise SystemExit(
                f"{self.out_dir} already holds checkpoints: --init-from needs a new out_dir"
            )
        if existing and not resume and not init_from:
            raise SystemExit(
                f"{self.out_dir} already holds checkpoints: pass --resume or use a new out_dir"
            )
        start = start_from(cfg, init_from) if init_from else None
        random.seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = pick_device(cfg)
        self.bf16 = use_bf16(cfg, self.device)
        train_pairs = read_corpus(cfg.train, cfg.src_lang, cfg.tgt_lang)
        self.dev_pairs = read_corpus(cfg.dev, cfg.src_lang, cfg.tgt_lang)
        self.tok = prepare_tokenizer(cfg, train_pairs)
        self.by_domain = self._encode_by_domain(train_pairs)
        self.examples = [e for examples in self.by_domain.values() for e in examples]
        self.dev_examples = encode_pairs(self.tok, self.dev_pairs, cfg.max_len)
        self.dev_extra = {
            name: read_corpus(path, cfg.src_lang, cfg.tgt_lang)
            for name, path in cfg.dev_extra.items()
        }
        self.model = Transformer(cfg.model_config(self.tok.vocab_size)).to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=0.0, betas=cfg.adam_betas, eps=cfg.adam_eps
        )
        self.progress = Progress()
        if start is not None:
            self._init_from(start, init_from)
        elif resume and existing:
            self._resume(existing[-1])
        elif resume:
            print(f"no checkpoint in {self.out_dir} to resume from: training from scratch")
        here = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else machine()
        # named again when a run goes back to a machine after another, so the card's
        # "X, then Y, then X" says where each phase ran
        if self.progress.machines[-1:] != [here]:
            self.progress.machines.append(here)
        self.recipe = dataclasses.asdict(cfg)
        self.stop = StopFlag()
        self.started = time.monotonic()
        # the smoothed training loss, kept on the model's device and read only to report it: a
        # read each step would make a GPU's host wait for every step before it queues the next
        self._loss_avg: torch.Tensor | None = None
        self.window_tokens, self.window_start = 0, time.monotonic()
        print(
            f"{len(self.examples)} training pairs, {len(self.dev_examples)} dev pairs, vocab "
            f"{self.tok.vocab_size}, {self.model.num_parameters() / 1e6:.1f}M parameters, "
            f"device {self.device}, bf16 {self.bf16}"
        )

    def _encode_by_domain(self, pairs: list[tuple[str, str]]) -> dict[str, list[Example]]:
        """The training examples grouped by domain (one group "" without domain_sample)."""
        cfg = self.cfg
        if not cfg.domain_sample:
            return {"": encode_pairs(self.tok, pairs, cfg.max_len)}
        labels = read_domains(f"{cfg.train}.domain", len(pairs))
        unknown = set(cfg.domain_sample) - set(labels)
        if unknown:
            raise SystemExit(f"domain_sample names {sorted(unknown)}, not in {cfg.train}.domain")
        grouped: dict[str, list[tuple[str, str]]] = {}
        for pair, label in zip(pairs, labels, strict=True):
            grouped.setdefault(label, []).append(pair)
        return {label: encode_pairs(self.tok, group, cfg.max_len)
                for label, group in sorted(grouped.items())}

    def epoch_examples(self, epoch: int) -> list[Example]:
        """The examples of one epoch: all of them, or a per-domain sample (domain_sample), a
        share of them typed in a hurry (hurried_share)."""
        cfg = self.cfg
        examples = self.examples
        if cfg.domain_sample:
            examples = sample_domains(self.by_domain, cfg.domain_sample, cfg.seed + epoch)
        if cfg.hurried_share:
            examples = self.hurry(examples, random.Random(f"hurried {cfg.seed} {epoch}"))
        return examples

    def hurry(self, examples: list[Example], rng: random.Random) -> list[Example]:
        """A copy of examples with a sample of hurried_share of them decoded, typed in a hurry
        and encoded again (those that grow past max_len stay as they were)."""
        picked = rng.sample(range(len(examples)), round(self.cfg.hurried_share * len(examples)))
        pairs = [typed_in_a_hurry(self.tok.decode(examples[i].src),
                                  self.tok.decode(examples[i].tgt), rng.choice(HURRIES))
                 for i in picked]
        src = self.tok.encode_batch([s for s, _ in pairs])
        tgt = self.tok.encode_batch([t for _, t in pairs])
        hurried = list(examples)
        for i, s, t in zip(picked, src, tgt, strict=True):
            made = make_examples([s], [t], BOS_ID, EOS_ID, self.cfg.max_len)
            if made:
                hurried[i] = made[0]
        return hurried

    def _init_from(self, state: dict, path: str | Path | None) -> None:
        self.model.load_state_dict(state["model"])
        # The data position inside the epoch is not carried over: begin the next epoch.
        step = state.get("step", 0)
        self.progress = Progress(
            step=step,
            epoch=state.get("epoch", -1) + 1,
            history=state.get("history", []),
            prior_minutes=state.get("train_minutes", 0.0),
            rewarm_from=step,
            machines=list(state.get("machines", [])),
        )
        print(f"initialised from {path} (step {step}); lr ramps up over {self.cfg.rewarm_steps}")

    def _resume(self, path: Path) -> None:
        state = read_checkpoint(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        history = state.get("history", [])
        self.progress = Progress(
            step=state["step"],
            epoch=state["epoch"],
            batch_index=state["batch_index"],
            history=history,
            # Checkpoints older than this field: the last evaluation's time is a lower bound.
            prior_minutes=state.get("train_minutes", history[-1]["minutes"] if history else 0.0),
            rewarm_from=state.get("rewarm_from"),
            machines=list(state.get("machines", [])),
        )
        print(f"resumed from {path} (step {state['step']}, epoch {state['epoch']})")

    # ------------------------------------------------------------ the steps

    def train_minutes(self) -> float:
        """Training wall time so far, earlier runs of this out_dir included."""
        return self.progress.prior_minutes + (time.monotonic() - self.started) / 60

    def learning_rate(self, step: int) -> float:
        cfg = self.cfg
        lr = inverse_sqrt_lr(step, cfg.model.d_model, cfg.warmup_steps, cfg.lr_scale)
        rewarm_from = self.progress.rewarm_from
        if rewarm_from is not None and cfg.rewarm_steps:
            lr *= min(1.0, (step - rewarm_from) / cfg.rewarm_steps)
        return lr

    def batches(self) -> Iterator[Batch]:
        """The training batches in order, from where the run stands, until a limit is reached."""
        cfg, progress = self.cfg, self.progress
        # resume inside an epoch: skip the batches already seen
        stream = BatchStream(self.epoch_examples, cfg.batch_tokens, cfg.seed, progress.epoch,
                             progress.batch_index, PAD_ID)
        workers = cfg.loader_workers
        if workers == -1:
            workers = 2 if self.device.type == "cuda" else 0
        for epoch, batch_index, batch in stream_batches(stream, workers,
                                                        pin=self.device.type == "cuda"):
            progress.epoch, progress.batch_index = epoch, batch_index
            if progress.step >= cfg.max_steps or epoch >= cfg.max_epochs or self.stop.stop:
                return
            if cfg.max_minutes and time.monotonic() - self.started > cfg.max_minutes * 60:
                print(f"time budget of {cfg.max_minutes} minutes reached")
                return
            yield batch

    def step(self, batch: Batch) -> float:
        """One optimizer update on one batch; returns the learning rate it used."""
        progress = self.progress
        progress.step += 1
        lr = self.learning_rate(progress.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss, n_tokens = batch_loss(self.model, batch, self.cfg, self.device, self.bf16)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip_norm)
        self.optimizer.step()
        progress.batch_index += 1  # the next batch to read when resuming
        self.window_tokens += n_tokens
        value = loss.detach().float()
        self._loss_avg = value if self._loss_avg is None else 0.98 * self._loss_avg + 0.02 * value
        return lr

    @property
    def loss_avg(self) -> float | None:
        """The training loss, smoothed over steps (an exponential average)."""
        return None if self._loss_avg is None else float(self._loss_avg)

    def report(self, lr: float, bar: tqdm) -> None:
        """Every 20 steps: the smoothed loss and the speed, to the bar and the log."""
        rate = self.window_tokens / (time.monotonic() - self.window_start)
        p = self.progress
        bar.set_postfix(epoch=p.epoch, loss=f"{self.loss_avg:.3f}", lr=f"{lr:.2e}",
                        tok_s=f"{rate:.0f}")
        log(self.out_dir, {"step": p.step, "epoch": p.epoch, "loss": round(self.loss_avg, 4),
                           "lr": lr, "tgt_tokens_per_s": round(rate)})
        self.window_tokens, self.window_start = 0, time.monotonic()

    def evaluate(self) -> dict:
        """Dev scores, appended to the history and the log."""
        scores = validate(self.model, self.tok, self.dev_examples, self.dev_pairs, self.cfg,
                          self.device, self.bf16, self.dev_extra)
        entry = {
            "step": self.progress.step,
            "epoch": self.progress.epoch,
            "train_loss": round(self.loss_avg, 4),
            **{k: round(v, 4) for k, v in scores.items()},
            "minutes": round(self.train_minutes(), 1),
        }
        self.progress.history.append(entry)
        log(self.out_dir, {"event": "eval", **entry})
        return entry

    def checkpoint(self, reason: str) -> Path:
        """Save step_<n>.pt (weights, tokenizer, optimizer, progress); keep the last few."""
        p = self.progress
        path = save_checkpoint(
            self.out_dir / f"step_{p.step}.pt",
            self.model,
            self.tok,
            optimizer=self.optimizer.state_dict(),
            step=p.step,
            epoch=p.epoch,
            batch_index=p.batch_index,
            recipe=self.recipe,
            history=p.history,
            train_minutes=round(self.train_minutes(), 2),
            rewarm_from=p.rewarm_from,
            machines=p.machines,
        )
        for old in checkpoint_paths(self.out_dir)[: -self.cfg.keep_last]:
            old.unlink()
        log(self.out_dir, {"event": "checkpoint", "step": p.step, "reason": reason,
                           "path": str(path)})
        return path

    # ------------------------------------------------------------ the loop

    def run(self) -> Path:
        """Train until a limit; returns the final checkpoint (the average of the last ones when
        the run ended normally)."""
        cfg = self.cfg
        self.model.train()
        bar = tqdm(total=cfg.max_steps, initial=self.progress.step, unit="step",
                   dynamic_ncols=True)
        last_saved = None
        saved_at = time.monotonic()
        for batch in self.batches():
            lr = self.step(batch)
            bar.update(1)
            step = self.progress.step
            if step % 20 == 0:
                self.report(lr, bar)
            if step % cfg.eval_every == 0:
                bar.write(json.dumps(self.evaluate()))
            minutes = (time.monotonic() - saved_at) / 60
            timed = bool(cfg.save_every_minutes) and minutes > cfg.save_every_minutes
            if step % cfg.save_every == 0 or timed:
                last_saved = self.checkpoint("periodic" if step % cfg.save_every == 0 else "timed")
                saved_at = time.monotonic()
        bar.close()
        history = self.progress.history
        final_eval = not self.stop.stop and self.loss_avg is not None and (
            not history or history[-1]["step"] != self.progress.step
        )  # a run that reached its limit ends with its scores (a stop request saves at once)
        if final_eval:
            print(json.dumps(self.evaluate()))
        step_file = f"step_{self.progress.step}.pt"
        saved_here = last_saved is not None and last_saved.name == step_file
        if final_eval or not saved_here:  # the checkpoint carries the final scores
            last_saved = self.checkpoint("stop" if self.stop.stop else "end")
        if self.stop.stop:
            return last_saved
        paths = checkpoint_paths(self.out_dir)[-cfg.average_last :]
        if len(paths) > 1:
            averaged = average_checkpoints(paths, self.out_dir / "averaged.pt")
            print(f"averaged {len(paths)} checkpoints -> {averaged}")
            return averaged
        return last_saved


def train(cfg: TrainConfig, resume: bool = False, init_from: str | Path | None = None) -> Path:
    """Run (or resume) training; returns the path of the final checkpoint."""
    return Trainer(cfg, resume=resume, init_from=init_from).run()


def log(out_dir: Path, record: dict) -> None:
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **record}
    with open(out_dir / "train.log.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m model.train", description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--config", help="training recipe, YAML or JSON (keys: TrainConfig fields)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument(
        "--init-from",
        metavar="CKPT",
        help="start a new out_dir from this checkpoint's weights, tokenizer, step and log",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one recipe option, e.g. --set max_steps=2000",
    )
    parser.add_argument("--list-options", action="store_true", help="print every option and exit")
    args = parser.parse_args(argv)
    if args.list_options:
        defaults = TrainConfig()
        for f in fields(TrainConfig):
            if f.name != "model":
                print(f"{f.name:18} {f.type!s:22} default {getattr(defaults, f.name)!r}")
        for f in fields(ModelConfig):  # set at the top level or under "model:"
            print(f"{f.name:18} {f.type!s:22} default {getattr(defaults.model, f.name)!r}")
        return 0
    if args.resume and args.init_from:
        parser.error("--resume and --init-from exclude each other")
    try:
        cfg = load_train_config(args.config, args.set)
        trainer = Trainer(cfg, resume=args.resume, init_from=args.init_from)
    except OSError as err:  # a recipe, corpus, tokenizer or checkpoint that is not there
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C before the first step (the loop saves from then on)
        print("\ninterrupted before training started: no checkpoint written", file=sys.stderr)
        return 130
    final = trainer.run()
    print(f"final checkpoint: {final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
