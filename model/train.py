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
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from model.checkpoint import average_checkpoints, read_checkpoint, save_checkpoint
from model.config import ModelConfig
from model.data import Example, collate, iterate_epochs, make_examples, read_corpus, token_batches
from model.evaluate import corpus_scores, translate_greedy
from model.hardware import machine
from model.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer
from model.transformer import Transformer


@dataclass(frozen=True)
class TrainConfig:
    """The training recipe. Paths are relative to the working directory."""

    train: str = "data/en-de/train"  # Moses prefix (train.en + train.de), .tsv or .tmx
    dev: str = "data/en-de/dev"
    src_lang: str = "en"
    tgt_lang: str = "de"
    out_dir: str = "runs/en-de"
    tokenizer: str = ""  # an existing SentencePiece model; empty: train one into out_dir
    vocab_size: int = 8000
    # architecture
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 4
    n_decoder_layers: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    max_positions: int = 512
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
    keep_last: int = 5
    average_last: int = 5  # at the end, average the last K checkpoints into averaged.pt
    bleu_sentences: int = 500  # dev sentences decoded (greedy) at each evaluation
    seed: int = 1
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    bf16: str = "auto"  # "auto" (on CUDA, or a CPU with bf16 support), "on" or "off"
    device: str = "auto"

    def model_config(self, vocab_size: int) -> ModelConfig:
        return ModelConfig(
            vocab_size=vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_encoder_layers=self.n_encoder_layers,
            n_decoder_layers=self.n_decoder_layers,
            d_ff=self.d_ff,
            dropout=self.dropout,
            max_positions=self.max_positions,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
        )


def load_train_config(path: str | None, overrides: list[str]) -> TrainConfig:
    """Read a YAML/JSON recipe, then apply key=value overrides (values parsed as YAML/JSON)."""
    data: dict = {}
    if path:
        text = Path(path).read_text(encoding="utf-8")
        if path.endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
    for item in overrides:
        key, _, value = item.partition("=")
        try:
            data[key] = json.loads(value)
        except json.JSONDecodeError:
            data[key] = value
    known = {f.name: f for f in fields(TrainConfig)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SystemExit(f"unknown training options: {unknown}; see TrainConfig in {__file__}")
    if "adam_betas" in data:
        data["adam_betas"] = tuple(data["adam_betas"])
    return TrainConfig(**data)


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
        print(f"training a {cfg.vocab_size}-piece SentencePiece model on both sides -> {path}")
        texts = [s for pair in train_pairs for s in pair]
        train_tokenizer(texts, path, vocab_size=cfg.vocab_size)
    return Tokenizer.load(path)


def encode_pairs(tok: Tokenizer, pairs: list[tuple[str, str]], max_len: int) -> list[Example]:
    src = tok.encode_batch([s for s, _ in pairs])
    tgt = tok.encode_batch([t for _, t in pairs])
    return make_examples(src, tgt, BOS_ID, EOS_ID, max_len)


def batch_loss(
    model: Transformer, batch: list[Example], cfg: TrainConfig, device: torch.device, bf16: bool
) -> tuple[torch.Tensor, int]:
    """Mean label-smoothed cross-entropy over the batch's real target tokens, and their count."""
    src, tgt_in, tgt_out = (t.to(device) for t in collate(batch, PAD_ID))
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
        logits = model(src, tgt_in)  # (B, T, V)
    loss = F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)),
        tgt_out.reshape(-1),
        ignore_index=PAD_ID,
        label_smoothing=cfg.label_smoothing,
    )
    return loss, int((tgt_out != PAD_ID).sum())


@torch.no_grad()
def validate(
    model: Transformer,
    tok: Tokenizer,
    dev_examples: list[Example],
    dev_pairs: list[tuple[str, str]],
    cfg: TrainConfig,
    device: torch.device,
    bf16: bool,
) -> dict:
    """Dev loss (no label smoothing) on the whole dev set, greedy BLEU/chrF on a prefix of it."""
    model.eval()
    total, count = 0.0, 0
    for batch in token_batches(dev_examples, cfg.batch_tokens):
        src, tgt_in, tgt_out = (t.to(device) for t in collate(batch, PAD_ID))
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(src, tgt_in)
        total += F.cross_entropy(
            logits.float().reshape(-1, logits.size(-1)),
            tgt_out.reshape(-1),
            ignore_index=PAD_ID,
            reduction="sum",
        ).item()
        count += int((tgt_out != PAD_ID).sum())
    sample = dev_pairs[: cfg.bleu_sentences]
    hyps = translate_greedy(model, tok, [s for s, _ in sample])
    scores = corpus_scores(hyps, [t for _, t in sample])
    model.train()
    return {
        "dev_loss": total / max(count, 1),
        "dev_bleu": scores["bleu"],
        "dev_chrf": scores["chrf"],
    }


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


def checkpoint_paths(out_dir: Path) -> list[Path]:
    return sorted(out_dir.glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def start_from(cfg: TrainConfig, path: str | Path) -> dict:
    """Read a checkpoint to start a new run from; its tokenizer becomes the run's."""
    state = read_checkpoint(path)
    spm_path = Path(cfg.out_dir) / "spm.model"
    if cfg.tokenizer or (spm_path.exists() and spm_path.read_bytes() != state["tokenizer"]):
        raise SystemExit(f"--init-from brings its own tokenizer: unset tokenizer, clear {spm_path}")
    expected = cfg.model_config(Tokenizer(state["tokenizer"]).vocab_size)
    if ModelConfig.from_dict(state["config"]) != expected:
        raise SystemExit(f"{path} has config {state['config']}, the recipe {expected.to_dict()}")
    spm_path.write_bytes(state["tokenizer"])
    return state


def train(cfg: TrainConfig, resume: bool = False, init_from: str | Path | None = None) -> Path:
    """Run (or resume) training; returns the path of the final checkpoint."""
    out_dir = Path(cfg.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    existing = checkpoint_paths(out_dir)
    if init_from and existing:
        raise SystemExit(f"{out_dir} already holds checkpoints: --init-from needs a new out_dir")
    start = start_from(cfg, init_from) if init_from else None
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = pick_device(cfg)
    bf16 = use_bf16(cfg, device)

    train_pairs = read_corpus(cfg.train, cfg.src_lang, cfg.tgt_lang)
    dev_pairs = read_corpus(cfg.dev, cfg.src_lang, cfg.tgt_lang)
    tok = prepare_tokenizer(cfg, train_pairs)
    examples = encode_pairs(tok, train_pairs, cfg.max_len)
    dev_examples = encode_pairs(tok, dev_pairs, cfg.max_len)
    model = Transformer(cfg.model_config(tok.vocab_size)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=cfg.adam_betas, eps=cfg.adam_eps)
    step, epoch, batch_index, history = 0, 0, 0, []
    prior_minutes = 0.0  # training time of earlier runs of this out_dir (resumes add up)
    rewarm_from = None  # the step a fresh optimizer took over (--init-from)
    machines: list[str] = []  # the CPUs (or GPUs) this model has been trained on, in order
    if start is not None:
        model.load_state_dict(start["model"])
        # The data position inside the epoch is not carried over: begin the next epoch.
        step, epoch = start.get("step", 0), start.get("epoch", -1) + 1
        history = start.get("history", [])
        prior_minutes = start.get("train_minutes", 0.0)
        rewarm_from = step
        machines = list(start.get("machines", []))
        print(f"initialised from {init_from} (step {step}); lr ramps up over {cfg.rewarm_steps}")
    elif resume and existing:
        state = read_checkpoint(existing[-1])
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, epoch, batch_index = state["step"], state["epoch"], state["batch_index"]
        history = state.get("history", [])
        rewarm_from = state.get("rewarm_from")
        machines = list(state.get("machines", []))
        # Checkpoints older than this field: the last evaluation's time is a lower bound.
        prior_minutes = state.get("train_minutes", history[-1]["minutes"] if history else 0.0)
        print(f"resumed from {existing[-1]} (step {step}, epoch {epoch})")
    elif existing:
        raise SystemExit(f"{out_dir} already holds checkpoints: pass --resume or use a new out_dir")

    here = torch.cuda.get_device_name(device) if device.type == "cuda" else machine()
    if here not in machines:
        machines.append(here)
    print(
        f"{len(examples)} training pairs, {len(dev_examples)} dev pairs, vocab {tok.vocab_size}, "
        f"{model.num_parameters() / 1e6:.1f}M parameters, device {device}, bf16 {bf16}"
    )
    recipe = dataclasses.asdict(cfg)

    def save(reason: str) -> Path:
        path = save_checkpoint(
            out_dir / f"step_{step}.pt",
            model,
            tok,
            optimizer=optimizer.state_dict(),
            step=step,
            epoch=epoch,
            batch_index=batch_index,
            recipe=recipe,
            history=history,
            train_minutes=round(train_minutes(), 2),
            rewarm_from=rewarm_from,
            machines=machines,
        )
        for old in checkpoint_paths(out_dir)[: -cfg.keep_last]:
            old.unlink()
        log(out_dir, {"event": "checkpoint", "step": step, "reason": reason, "path": str(path)})
        return path

    stop = StopFlag()
    started = time.monotonic()

    def train_minutes() -> float:
        """Training wall time so far, earlier runs of this out_dir included."""
        return prior_minutes + (time.monotonic() - started) / 60

    model.train()
    stream = iterate_epochs(examples, cfg.batch_tokens, cfg.seed, start_epoch=epoch)
    skip = batch_index  # resume inside an epoch: skip the batches already seen
    bar = tqdm(total=cfg.max_steps, initial=step, unit="step", dynamic_ncols=True)
    window_tokens, window_start, loss_avg = 0, time.monotonic(), None
    last_saved = None
    for epoch, batch_index, batch in stream:
        if skip:
            skip -= 1
            continue
        if step >= cfg.max_steps or epoch >= cfg.max_epochs or stop.stop:
            break
        if cfg.max_minutes and time.monotonic() - started > cfg.max_minutes * 60:
            print(f"time budget of {cfg.max_minutes} minutes reached")
            break
        step += 1
        lr = inverse_sqrt_lr(step, cfg.d_model, cfg.warmup_steps, cfg.lr_scale)
        if rewarm_from is not None and cfg.rewarm_steps:
            lr *= min(1.0, (step - rewarm_from) / cfg.rewarm_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss, n_tokens = batch_loss(model, batch, cfg, device, bf16)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
        optimizer.step()
        batch_index += 1  # the next batch to read when resuming

        window_tokens += n_tokens
        loss_avg = loss.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * loss.item()
        bar.update(1)
        if step % 20 == 0:
            rate = window_tokens / (time.monotonic() - window_start)
            bar.set_postfix(
                epoch=epoch, loss=f"{loss_avg:.3f}", lr=f"{lr:.2e}", tok_s=f"{rate:.0f}"
            )
            log(
                out_dir,
                {
                    "step": step,
                    "epoch": epoch,
                    "loss": round(loss_avg, 4),
                    "lr": lr,
                    "tgt_tokens_per_s": round(rate),
                },
            )
            window_tokens, window_start = 0, time.monotonic()
        if step % cfg.eval_every == 0:
            scores = validate(model, tok, dev_examples, dev_pairs, cfg, device, bf16)
            history.append(
                {
                    "step": step,
                    "epoch": epoch,
                    "train_loss": round(loss_avg, 4),
                    **{k: round(v, 4) for k, v in scores.items()},
                    "minutes": round(train_minutes(), 1),
                }
            )
            log(out_dir, {"event": "eval", **history[-1]})
            bar.write(json.dumps(history[-1]))
        if step % cfg.save_every == 0:
            last_saved = save("periodic")
    bar.close()
    if last_saved is None or not last_saved.name.endswith(f"_{step}.pt"):
        last_saved = save("stop" if stop.stop else "end")
    if stop.stop:
        return last_saved
    paths = checkpoint_paths(out_dir)[-cfg.average_last :]
    if len(paths) > 1:
        averaged = average_checkpoints(paths, out_dir / "averaged.pt")
        print(f"averaged {len(paths)} checkpoints -> {averaged}")
        return averaged
    return last_saved


def log(out_dir: Path, record: dict) -> None:
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **record}
    with open(out_dir / "train.log.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
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
        for f in fields(TrainConfig):
            print(f"{f.name:18} {f.type!s:22} default {f.default!r}")
        return 0
    cfg = load_train_config(args.config, args.set)
    if args.resume and args.init_from:
        parser.error("--resume and --init-from exclude each other")
    final = train(cfg, resume=args.resume, init_from=args.init_from)
    print(f"final checkpoint: {final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
