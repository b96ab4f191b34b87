"""Checkpoints: one file with the weights, the full config and the tokenizer model."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from model.config import ModelConfig
from model.tokenizer import SplitTokenizer, Tokenizer, tokenizer_from_state
from model.transformer import Transformer

FORMAT_VERSION = 1


def save_checkpoint(
    path: str | Path,
    model: Transformer,
    tokenizer: Tokenizer | SplitTokenizer,
    **extra: Any,
) -> Path:
    """Write atomically (temp file + rename) so an interrupted save never leaves a broken file.
    extra holds training state (optimizer, step, recipe, ...)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "format_version": FORMAT_VERSION,
        "config": model.config.to_dict(),
        "model": model.state_dict(),
        "tokenizer": tokenizer.state(),
        **extra,
    }
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def checkpoint_paths(out_dir: Path) -> list[Path]:
    """A run's step checkpoints (step_<N>.pt), oldest first."""
    return sorted(out_dir.glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    return torch.load(Path(path), map_location="cpu", weights_only=False)


def load_model(path: str | Path) -> tuple[Transformer, Tokenizer | SplitTokenizer, dict[str, Any]]:
    """Rebuild the model and tokenizer from a checkpoint file alone (eval mode)."""
    state = read_checkpoint(path)
    model = Transformer(ModelConfig.from_dict(state["config"]))
    model.load_state_dict(state["model"])
    model.eval()
    return model, tokenizer_from_state(state["tokenizer"]), state


def average_checkpoints(paths: list[str | Path], out: str | Path) -> Path:
    """Average the weights of several checkpoints of one run into a new checkpoint."""
    if not paths:
        raise ValueError("no checkpoints to average")
    states = [read_checkpoint(p) for p in paths]
    base = states[0]
    averaged = {}
    for name, tensor in base["model"].items():
        if tensor.is_floating_point():
            averaged[name] = sum(s["model"][name].double() for s in states).div(len(states))
            averaged[name] = averaged[name].to(tensor.dtype)
        else:
            averaged[name] = tensor
    model = Transformer(ModelConfig.from_dict(base["config"]))
    model.load_state_dict(averaged)
    last = states[-1]  # the training log and position of the newest checkpoint
    kept = ("step", "epoch", "recipe", "history", "train_minutes", "machines")
    extra = {k: v for k, v in last.items() if k in kept}
    extra["averaged_from"] = [str(p) for p in paths]
    return save_checkpoint(out, model, tokenizer_from_state(base["tokenizer"]), **extra)


def set_precision(path: str | Path, out: str | Path, dtype: torch.dtype) -> Path:
    """A copy of a checkpoint with its floating-point weights in dtype. fp16 halves the file for
    carrying it off a machine through a size limit (its 11 significant bits are far finer than
    the int8 variant's steps); float32 makes it a training checkpoint again."""
    state = read_checkpoint(path)
    state["model"] = {name: t.to(dtype) if t.is_floating_point() else t
                      for name, t in state["model"].items()}
    state.pop("optimizer", None)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, out)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m model.checkpoint", description=(
        "average: the last checkpoints of a run into one file; precision: a copy in fp16/fp32"))
    sub = ap.add_subparsers(dest="command", required=True)
    avg = sub.add_parser("average")
    avg.add_argument("run_dir", type=Path)
    avg.add_argument("out", type=Path)
    avg.add_argument("--last", type=int, default=5)
    avg.add_argument("--fp16", action="store_true", help="write the weights in fp16")
    prec = sub.add_parser("precision")
    prec.add_argument("path", type=Path)
    prec.add_argument("out", type=Path)
    prec.add_argument("--dtype", choices=("float16", "float32"), default="float32")
    args = ap.parse_args(argv)
    if args.command == "average":
        paths = checkpoint_paths(args.run_dir)[-args.last :]
        if not paths:
            print(f"error: {args.run_dir}: no step_*.pt checkpoints to average", file=sys.stderr)
            return 1
        out = average_checkpoints(paths, args.out)
        if args.fp16:
            set_precision(out, out, torch.float16)
        print(f"averaged {', '.join(p.name for p in paths)} -> {out}")
    else:
        try:
            print(set_precision(args.path, args.out, getattr(torch, args.dtype)))
        except OSError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
