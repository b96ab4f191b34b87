"""Training really learns: a toy word-for-word translation task, end to end through model.train."""

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from export.verify import reference_log_probs
from model.checkpoint import checkpoint_paths, load_model, read_checkpoint
from model.data import collate, prepare_batch
from model.evaluate import translate_beam, translate_greedy
from model.hardware import machine
from model.search import beam_search, greedy_search
from model.tokenizer import PAD_ID
from model.train import (
    Trainer,
    batch_loss,
    encode_pairs,
    inverse_sqrt_lr,
    load_train_config,
    main,
    train,
    train_config_from_dict,
)

LEXICON = {
    "red": "rot",
    "blue": "blau",
    "green": "gruen",
    "house": "haus",
    "tree": "baum",
    "dog": "hund",
    "cat": "katze",
    "small": "klein",
    "big": "gross",
    "old": "alt",
    "new": "neu",
    "and": "und",
}


def toy_corpus(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = sorted(LEXICON)
    pairs = []
    for _ in range(n):
        sentence = [rng.choice(words) for _ in range(rng.randint(2, 5))]
        pairs.append((" ".join(sentence), " ".join(LEXICON[w] for w in sentence)))
    return pairs


def write_split(prefix, pairs) -> None:
    prefix.with_suffix(".en").write_text("\n".join(s for s, _ in pairs) + "\n", encoding="utf-8")
    prefix.with_suffix(".de").write_text("\n".join(t for _, t in pairs) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    train_pairs = toy_corpus(3000, seed=1)
    seen = {s for s, _ in train_pairs}
    held_out = [p for p in toy_corpus(400, seed=2) if p[0] not in seen][:40]
    write_split(root / "train", train_pairs)
    write_split(root / "dev", held_out)
    overrides = {
        "train": str(root / "train"),
        "dev": str(root / "dev"),
        "out_dir": str(root / "run"),
        "vocab_size": 40,
        "d_model": 64,
        "n_heads": 4,
        "n_encoder_layers": 2,
        "n_decoder_layers": 2,
        "d_ff": 128,
        "dropout": 0.0,
        "batch_tokens": 800,
        "warmup_steps": 100,
        "lr_scale": 0.3,
        "max_steps": 600,
        "eval_every": 600,
        "save_every": 200,
        "keep_last": 3,
        "average_last": 2,
        "bleu_sentences": 40,
        "threads": 1,
        "bf16": "off",
    }
    cfg = load_train_config(None, [f"{k}={json.dumps(v)}" for k, v in overrides.items()])
    final = train(cfg)
    return cfg, final, held_out


def test_batch_loss_projects_only_real_targets_and_equals_the_padded_loss(toy_run):
    cfg, final, held_out = toy_run
    model, tok, _ = load_model(final)
    batch = encode_pairs(tok, held_out[:6], cfg.max_len)  # targets of several lengths: padding
    loss, count = batch_loss(model, prepare_batch(batch, PAD_ID), cfg, torch.device("cpu"),
                             bf16=False)
    src, tgt_in, tgt_out = collate(batch, PAD_ID)
    logits = model(src, tgt_in)
    padded = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1), ignore_index=PAD_ID,
        label_smoothing=cfg.label_smoothing)
    assert count == int((tgt_out != PAD_ID).sum()) < tgt_out.numel()
    assert torch.allclose(loss, padded, atol=1e-6)


def test_loss_goes_down_and_greedy_reproduces_held_out_examples(toy_run):
    cfg, final, held_out = toy_run
    with open(f"{cfg.out_dir}/train.log.jsonl", encoding="utf-8") as f:
        log = [json.loads(line) for line in f]
    losses = [r["loss"] for r in log if "loss" in r]
    assert losses[-1] < losses[0] / 3
    model, tok, _ = load_model(final)
    sources = [s for s, _ in held_out]
    hyps = translate_greedy(model, tok, sources)
    exact = sum(h == t for h, (_, t) in zip(hyps, held_out, strict=True))
    assert exact >= 0.9 * len(held_out), list(zip(hyps, held_out, strict=True))[:5]
    # Beam search may pick another output than greedy, but never one the model scores lower.
    for source in sources[:10]:
        ids = tok.encode(source)
        best = beam_search(model, ids, beam_size=3)[0]
        greedy = greedy_search(model, [ids])[0]
        assert best.normalized >= normalized_score(model, ids, greedy) - 1e-4, source
    assert len(translate_beam(model, tok, sources[:2], beam_size=3)) == 2


def normalized_score(model, source: list[int], output: list[int]) -> float:
    """Teacher-forced log-prob of output + EOS per token, as beam search ranks hypotheses."""
    gold = [*output, model.config.eos_id]
    log_probs = reference_log_probs(model, source, output)  # (len(gold), V)
    return float(log_probs[range(len(gold)), gold].sum()) / len(gold)


def test_resume_continues_from_the_last_checkpoint(toy_run):
    cfg, final, _ = toy_run
    first_minutes = load_model(final)[2]["train_minutes"]
    assert first_minutes > 0
    # save_every_minutes: a checkpoint whenever that much time passed (here: every step)
    more = dataclasses.replace(
        cfg, max_steps=620, eval_every=610, average_last=1, save_every_minutes=1e-9
    )
    last = train(more, resume=True)
    _, _, state = load_model(last)
    assert state["step"] == 620
    with open(f"{cfg.out_dir}/train.log.jsonl", encoding="utf-8") as f:
        saves = [r for r in map(json.loads, f) if r.get("event") == "checkpoint"]
    assert [r["step"] for r in saves if r["reason"] == "timed"] == list(range(601, 621))
    assert all(r["reason"] != "timed" for r in saves if r["step"] <= 600)
    # Training time adds up across resumes, in the checkpoint and in the evaluation log.
    assert state["train_minutes"] >= first_minutes
    # a run that reaches its limit between evaluations ends with one
    assert [h["step"] for h in state["history"]] == [600, 610, 620]
    assert state["history"][1]["minutes"] >= round(first_minutes, 1)
    with pytest.raises(SystemExit, match="--resume"):
        train(more)


def test_a_run_back_on_an_earlier_machine_names_it_again(toy_run, tmp_path):
    cfg, final, _ = toy_run
    state = read_checkpoint(final)
    state["machines"] = [machine(), "an accelerator"]
    moved = tmp_path / "moved.pt"
    torch.save(state, moved)
    more = dataclasses.replace(cfg, out_dir=str(tmp_path / "more"), max_steps=602,
                               eval_every=1000, average_last=1)
    last = train(more, init_from=moved)
    assert load_model(last)[2]["machines"] == [machine(), "an accelerator", machine()]


def test_the_warm_up_schedule_rises_then_decays_as_inverse_square_root():
    lrs = [inverse_sqrt_lr(s, 256, 100, 1.0) for s in (1, 50, 100, 400)]
    assert lrs[0] < lrs[1] < lrs[2]
    assert lrs[3] == pytest.approx(lrs[2] / 2)


def test_init_from_starts_a_new_run_from_a_checkpoint(toy_run, tmp_path):
    cfg, final, _ = toy_run
    more = dataclasses.replace(cfg, out_dir=str(tmp_path / "more"), max_steps=620,
                               eval_every=610, rewarm_steps=40, average_last=1)
    last = train(more, init_from=final)
    _, tok, state = load_model(last)
    start = load_model(final)[2]
    assert state["step"] == 620 and state["epoch"] == start["epoch"] + 1
    # a run that reaches its limit between evaluations ends with one
    assert [h["step"] for h in state["history"]] == [600, 610, 620]
    assert state["train_minutes"] >= start["train_minutes"]
    assert start["machines"] == state["machines"] == [machine()]  # one machine, named once
    assert (tmp_path / "more" / "spm.model").read_bytes() == tok.model_proto == start["tokenizer"]
    with open(tmp_path / "more" / "train.log.jsonl", encoding="utf-8") as f:
        log = [json.loads(line) for line in f if '"loss"' in line]
    with open(f"{cfg.out_dir}/train.log.jsonl", encoding="utf-8") as f:
        first_loss = next(json.loads(line)["loss"] for line in f if '"loss"' in line)
    # The weights came along (the loss starts low) and the fresh optimizer's lr ramps up.
    assert log[0]["step"] == 620 and log[0]["loss"] < first_loss / 3
    ramped = inverse_sqrt_lr(620, cfg.model.d_model, cfg.warmup_steps, cfg.lr_scale) * 20 / 40
    assert log[0]["lr"] == pytest.approx(ramped)
    with pytest.raises(SystemExit, match="new out_dir"):
        train(more, init_from=final)
    wider = dataclasses.replace(more, model=dataclasses.replace(more.model, d_ff=256),
                                out_dir=str(tmp_path / "wider"))
    with pytest.raises(SystemExit, match="config"):
        train(wider, init_from=final)
    # another dropout is another way to train the same weights, not another model
    stronger = dataclasses.replace(more, model=dataclasses.replace(more.model, dropout=0.3),
                                   out_dir=str(tmp_path / "stronger"), max_steps=602)
    assert load_model(train(stronger, init_from=final))[2]["config"]["dropout"] == 0.3


def test_batches_made_by_worker_processes_train_the_same_weights(toy_run, tmp_path):
    """A GPU run makes its batches in worker processes (loader_workers): the same batches in
    the same order as made in the trainer, so the same weights, and a resumed run goes on as
    an unbroken one."""
    cfg, final, _ = toy_run
    runs = {}
    for workers in (0, 2):
        run = dataclasses.replace(cfg, out_dir=str(tmp_path / f"w{workers}"), max_steps=630,
                                  eval_every=1000, save_every=615, average_last=1,
                                  hurried_share=0.3, loader_workers=workers)
        runs[workers] = load_model(train(run, init_from=final))[0].state_dict()
    resumed = dataclasses.replace(cfg, out_dir=str(tmp_path / "w2"), max_steps=645,
                                  eval_every=1000, average_last=1, loader_workers=0,
                                  hurried_share=0.3)
    (tmp_path / "w2" / "step_630.pt").unlink()  # go on from step 615, inside the epoch
    again = load_model(train(resumed, resume=True))[0].state_dict()
    for name, weight in runs[0].items():
        assert torch.equal(weight, runs[2][name]), name
    assert any(not torch.equal(weight, again[name]) for name, weight in runs[0].items())


def _start_with_workers(cfg, final: Path, out: Path) -> tuple[subprocess.Popen, list[int]]:
    """A `python -m model.train` run with two loader workers, once it has reported a loss; its
    processes (the trainer first) as gpu_train.sh finds them, by its out_dir."""
    options = {**{k: v for k, v in dataclasses.asdict(cfg).items() if k != "model"},
               **dataclasses.asdict(cfg.model), "out_dir": str(out), "max_steps": 10**6,
               "eval_every": 10**6, "save_every": 10**6, "loader_workers": 2}
    command = [sys.executable, "-m", "model.train", "--init-from", str(final)]
    for key, value in options.items():
        command += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    log = out / "train.log.jsonl"
    deadline = time.monotonic() + 120
    while not (log.exists() and '"loss"' in log.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(proc.stdout.read())
        time.sleep(0.2)
    found = subprocess.run(["pgrep", "-f", f"model.train .*out_dir={out}"],
                           capture_output=True, text=True).stdout.split()
    pids = sorted(map(int, found), key=lambda pid: pid != proc.pid)
    return proc, pids


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead child its reaper has not waited for yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_stop_sent_to_every_process_of_a_run_saves_it(toy_run, tmp_path):
    """model/gpu_train.sh stops a run with SIGTERM to every process whose command line names
    its out_dir, the loader's workers included: the run still saves and exits cleanly."""
    cfg, final, _ = toy_run
    proc, pids = _start_with_workers(cfg, final, tmp_path / "stopped")
    try:
        assert len(pids) == 3 and pids[0] == proc.pid, pids  # the trainer and its two workers
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        _kill_all(pids)
    assert proc.returncode == 0, output
    log = (tmp_path / "stopped" / "train.log.jsonl").read_text()
    saves = [json.loads(line) for line in log.splitlines() if '"checkpoint"' in line]
    assert saves[-1]["reason"] == "stop" and Path(saves[-1]["path"]).exists()


def test_a_trainer_killed_outright_takes_its_workers_with_it(toy_run, tmp_path):
    """SIGKILL (or the OOM killer) leaves no trainer to end the workers: they ignore SIGTERM,
    and one holding batches nobody reads waited for ever."""
    cfg, final, _ = toy_run
    proc, pids = _start_with_workers(cfg, final, tmp_path / "killed")
    try:
        assert len(pids) == 3 and pids[0] == proc.pid, pids
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        alive = pids[1:]
        while alive and time.monotonic() < deadline:
            time.sleep(0.2)
            alive = [pid for pid in alive if _running(pid)]
        assert not alive, f"workers left running: {alive}"
    finally:
        _kill_all(pids)


def test_recipes_name_the_architecture_flat_or_under_model(tmp_path):
    flat = load_train_config(None, ["d_model=64", "n_heads=2", "vocab_size=100", "max_steps=5"])
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps({"model": {"d_model": 64, "n_heads": 2, "vocab_size": 100},
                                  "max_steps": 5}))
    nested = load_train_config(str(recipe), [])
    assert flat == nested and flat.model.d_model == 64 and flat.max_steps == 5
    # a checkpoint's recipe (dataclasses.asdict) reads back as the same config
    assert train_config_from_dict(dataclasses.asdict(flat)) == flat
    assert flat.model_config(37).vocab_size == 37 and flat.model_config(37).d_ff == 1024
    with pytest.raises(SystemExit, match="d_mdoel"):
        load_train_config(None, ["d_mdoel=64"])


def test_plain_mistakes_are_named_without_a_traceback(tmp_path, capsys):
    """A path that is not there, a value of the wrong type or a recipe that does not parse: one
    line saying what, before any training."""
    write_split(tmp_path / "train", toy_corpus(20, seed=1))
    run = ["--set", f"train={tmp_path / 'train'}", "--set", f"dev={tmp_path / 'train'}",
           "--set", f"out_dir={tmp_path / 'run'}"]
    assert main(["--config", str(tmp_path / "nope.yaml")]) == 1
    assert "nope.yaml" in capsys.readouterr().err
    assert main([*run, "--set", f"train={tmp_path / 'nope'}"]) == 1
    assert "nope.en" in capsys.readouterr().err
    assert main([*run, "--init-from", str(tmp_path / "nope.pt")]) == 1
    assert "nope.pt" in capsys.readouterr().err
    assert main([*run, "--set", f"tokenizer={tmp_path / 'nope.model'}"]) == 1
    assert "nope.model" in capsys.readouterr().err
    assert not list((tmp_path / "run").glob("*.pt"))
    with pytest.raises(SystemExit, match=r"batch_tokens='abc' \(expected int\).*dropout='x'"):
        load_train_config(None, ["batch_tokens=abc", "dropout=x"])
    recipe = tmp_path / "r.yaml"
    recipe.write_text("bf16: on\n")  # YAML reads a bare on as true, not as the word
    with pytest.raises(SystemExit, match="bf16=True"):
        load_train_config(str(recipe), [])
    recipe.write_text("max_steps: [1\n")
    with pytest.raises(SystemExit, match="not a YAML recipe"):
        load_train_config(str(recipe), [])
    # what the types allow: an int for a float, null where None is an option
    cfg = load_train_config(None, ["max_minutes=5", "decoder_start_id=null", "bf16=on"])
    assert cfg.max_minutes == 5 and cfg.model.decoder_start_id is None and cfg.bf16 == "on"


@pytest.mark.parametrize("recipe", sorted(Path(__file__).parents[2].glob("recipes/*.yaml")),
                         ids=lambda p: p.name)
def test_every_recipe_reads_and_builds_its_architecture(recipe):
    if recipe.name.endswith("-lm.yaml"):  # a reranking language model's (model/lm.py)
        from model.lm import load_lm_config

        lm = load_lm_config(str(recipe), [])
        assert lm.d_model % lm.n_heads == 0 and lm.batch_tokens > 0
        return
    cfg = load_train_config(str(recipe), [])
    model = cfg.model_config(8000)  # validates the architecture numbers
    assert model.d_model % model.n_heads == 0 and cfg.batch_tokens > 0


def test_everyday_dev_set_is_parallel_and_apart_from_the_model_cards_sentences():
    recipes = Path(__file__).parents[2] / "recipes"
    english = (recipes / "everyday-dev.en").read_text(encoding="utf-8").splitlines()
    german = (recipes / "everyday-dev.de").read_text(encoding="utf-8").splitlines()
    card = set((recipes / "everyday-en.txt").read_text(encoding="utf-8").splitlines())
    assert len(english) == len(german) >= 90 and all(english) and all(german)
    assert len(set(english)) == len(english) and not card & set(english)


def test_domain_sample_takes_a_seeded_share_of_a_domain_each_epoch(toy_run, tmp_path):
    cfg, final, _ = toy_run
    pairs = toy_corpus(3000, seed=1)
    # Label the toy corpus: sentences starting with "red" are a small "colour" domain.
    labels = ["colour" if s.startswith("red") else "rest" for s, _ in pairs]
    write_split(tmp_path / "train", pairs)
    (tmp_path / "train.domain").write_text("\n".join(labels) + "\n", encoding="utf-8")
    sampled = dataclasses.replace(
        cfg, train=str(tmp_path / "train"), out_dir=str(tmp_path / "run"),
        domain_sample={"rest": 0.25}, dev_extra={"again": cfg.dev}, max_steps=610,
        eval_every=610, average_last=1, rewarm_steps=10,
    )
    trainer = Trainer(sampled, init_from=final)
    colour, rest = len(trainer.by_domain["colour"]), len(trainer.by_domain["rest"])
    assert colour + rest == len(trainer.examples) and colour > 0
    first, second = trainer.epoch_examples(3), trainer.epoch_examples(4)
    for epoch in (first, second):
        kinds = Counter("colour" if e in trainer.by_domain["colour"] else "rest" for e in epoch)
        assert kinds == {"colour": colour, "rest": round(0.25 * rest)}
    assert first == trainer.epoch_examples(3)  # the same sample when a run resumes
    assert first != second  # a fresh sample per epoch
    last = trainer.run()
    history = load_model(last)[2]["history"]
    # The extra dev set is the same as the dev set here: the same greedy scores.
    assert history[-1]["dev_again_bleu"] == history[-1]["dev_bleu"] > 50
    with pytest.raises(SystemExit, match="domain_sample names"):
        Trainer(dataclasses.replace(sampled, out_dir=str(tmp_path / "x"),
                                    domain_sample={"nope": 0.5}), init_from=final)


def test_hurried_share_types_a_seeded_share_of_each_epoch_in_a_hurry(toy_run, tmp_path):
    cfg, _, _ = toy_run
    # The toy corpus as written sentences: capitalised, with a full stop or a question mark.
    pairs = [(f"{s.capitalize()}{m}", f"{t.capitalize()}{m}")
             for i, (s, t) in enumerate(toy_corpus(2000, seed=5)) for m in ".?"[i % 2]]
    write_split(tmp_path / "train", pairs)
    hurried = dataclasses.replace(cfg, train=str(tmp_path / "train"),
                                  out_dir=str(tmp_path / "run"), hurried_share=0.3,
                                  model=dataclasses.replace(cfg.model, vocab_size=80))
    trainer = Trainer(hurried)
    first, second = trainer.epoch_examples(3), trainer.epoch_examples(4)
    for epoch in (first, second):
        changed = [(trainer.tok.decode(old.src), trainer.tok.decode(old.tgt),
                    trainer.tok.decode(new.src), trainer.tok.decode(new.tgt))
                   for old, new in zip(trainer.examples, epoch, strict=True) if old != new]
        assert abs(len(changed) - 0.3 * len(pairs)) < 0.02 * len(pairs)
        for src, tgt, new_src, new_tgt in changed:
            assert new_src in (src.lower(), src[:-1], src[:-1].lower())
            assert new_tgt == (tgt if new_src[-1] in ".?" else tgt[:-1])
        kinds = Counter((s != s.lower(), n[-1] in ".?") for s, _, n, _ in changed)
        assert set(kinds) == {(True, True), (True, False)}  # lower-cased, mark gone or not
        assert kinds[True, False] > kinds[True, True]  # two kinds of three drop it
    assert first == trainer.epoch_examples(3)  # the same epoch when a run resumes
    assert first != second
    with pytest.raises(SystemExit, match="hurried_share"):
        load_train_config(None, ["hurried_share=1.5"])


def test_a_run_averaged_to_fp16_and_widened_again_keeps_its_weights(toy_run, tmp_path):
    """model/gpu_train.sh carries a run off a GPU machine as an fp16 average of its last
    checkpoints; widened to float32 here it loads as a model again."""
    from model.checkpoint import average_checkpoints
    from model.checkpoint import main as main_checkpoint

    cfg, _, _ = toy_run
    last = checkpoint_paths(Path(cfg.out_dir))[-2:]
    assert main_checkpoint(["average", cfg.out_dir, str(tmp_path / "half.pt"), "--last", "2",
                            "--fp16"]) == 0
    assert main_checkpoint(["precision", str(tmp_path / "half.pt"), str(tmp_path / "wide.pt")]) == 0
    exact = read_checkpoint(average_checkpoints(last, tmp_path / "exact.pt"))["model"]
    half = read_checkpoint(tmp_path / "half.pt")
    assert half["averaged_from"] == [str(p) for p in last] and "optimizer" not in half
    assert {t.dtype for t in half["model"].values() if t.is_floating_point()} == {torch.float16}
    _, _, state = load_model(tmp_path / "wide.pt")
    for name, tensor in state["model"].items():
        assert tensor.dtype == exact[name].dtype
        assert torch.allclose(tensor, exact[name], rtol=1e-3, atol=1e-4), name
    assert state["step"] == read_checkpoint(last[-1])["step"]
    assert main_checkpoint(["average", str(tmp_path / "nope"), str(tmp_path / "x.pt")]) == 1
    assert main_checkpoint(["precision", str(tmp_path / "nope.pt"), str(tmp_path / "x.pt")]) == 1
    assert not (tmp_path / "x.pt").exists()


def test_evaluate_names_a_checkpoint_or_test_set_that_is_not_there(toy_run, tmp_path, capsys):
    from model.evaluate import main as evaluate_main

    cfg, final, _ = toy_run
    assert evaluate_main(["--checkpoint", str(tmp_path / "nope.pt"), "--data", cfg.dev]) == 1
    assert "nope.pt" in capsys.readouterr().err
    assert evaluate_main(["--checkpoint", str(final), "--data", str(tmp_path / "nope")]) == 1
    assert "nope.en" in capsys.readouterr().err
