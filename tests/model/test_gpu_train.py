"""model/gpu_train.sh, the script a lent GPU's lease runs, run here on a toy corpus: one run
fine-tunes the carried checkpoint, one trains another recipe from scratch, both come back
as averaged fp16 checkpoints in $OUT's pieces, and a later lease goes on from one of them,
carried in pieces that fit beside the working tree."""

import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from model.checkpoint import read_checkpoint
from model.train import load_train_config, train

from .test_training import toy_corpus, write_split

ROOT = Path(__file__).parents[2]
TOY = {"vocab_size": 40, "n_heads": 2, "n_encoder_layers": 1, "n_decoder_layers": 1,
       "d_ff": 64, "dropout": 0.0, "batch_tokens": 400, "warmup_steps": 10, "max_len": 32,
       "bleu_sentences": 4, "average_last": 1}


def recipe(path: Path, d_model: int) -> Path:
    path.write_text("\n".join(f"{k}: {v}" for k, v in {**TOY, "d_model": d_model}.items()) + "\n")
    return path


def unpack(out: Path, prefix: str, into: Path) -> list[str]:
    """The tar that came back in $OUT's pieces PREFIX.tar.part-*, unpacked; its file names."""
    pieces = sorted(out.glob(f"{prefix}.tar.part-*"))
    into.mkdir()
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in pieces))) as tar:
        tar.extractall(into, filter="data")
    return [p.name for p in into.iterdir()]


def start_and_wait(env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """`gpu_train.sh start`, then wait until the runs it started have ended."""
    done = subprocess.run(["bash", str(ROOT / "model/gpu_train.sh"), "start"], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and subprocess.run(
        ["pgrep", "-f", f"out_dir={env['GPU_TRAIN_DIR']}/"], capture_output=True).returncode == 0:
        time.sleep(0.5)
    return done


def test_runs_fine_tune_or_start_from_scratch_come_back_averaged_and_go_on_later(tmp_path):
    # The carried corpus, labelled as corpus v3 is (the script weighs these three labels).
    data = tmp_path / "data/en-de-v3"
    data.mkdir(parents=True)
    pairs = toy_corpus(300, seed=3)
    write_split(data / "train", pairs)
    write_split(data / "dev", pairs[:8])
    for lang, side in (("en", 0), ("de", 1)):  # write_split would take ".general" for a suffix
        (data / f"dev.general.{lang}").write_text("".join(p[side] + "\n" for p in pairs[8:16]))
    labels = ("dictionary", "phrase", "general")
    (data / "train.domain").write_text("".join(f"{labels[i % 3]}\n" for i in range(len(pairs))))
    carry = tmp_path / "carry"
    carry.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(data, arcname="data/en-de-v3")
    (carry / "data.tar.xz").write_bytes(lzma.compress(buffer.getvalue()))
    # The checkpoint to fine-tune: a toy model of width 32.
    small = recipe(tmp_path / "small.yaml", 32)
    init = train(load_train_config(str(small), [
        f"train={data / 'train'}", f"dev={data / 'dev'}", f"out_dir={tmp_path / 'init'}",
        "max_steps=3", "eval_every=3", "save_every=3"]))
    (carry / "init.pt").write_bytes(init.read_bytes())
    init_step = read_checkpoint(init)["step"]

    out, work = tmp_path / "out", tmp_path / "work"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_TRAIN_DIR": str(work),
           "GPU_TRAIN_CARRY": str(carry), "OUT": str(out), "GPU_TRAIN_SETTLE": "0",
           "GPU_RECIPE": str(small),
           "GPU_COMMON": "max_steps=4 eval_every=4 save_every=2 keep_last=4 threads=1",
           "GPU_RUNS": f"ft lr_scale=0.5 max_steps={init_step + 4};"
                       f"scratch recipe={recipe(tmp_path / 'wide.yaml', 48)} init=none max_steps=6"}
    script = ["bash", str(ROOT / "model/gpu_train.sh")]
    # Let both runs reach their last step (each saves then), then stop and pack them.
    started = start_and_wait(env, timeout=240)
    assert started.returncode == 0, started.stderr
    assert "started scratch: " in started.stdout and "from scratch" in started.stdout
    for name in ("ft", "scratch"):
        log = (work / f"{name}.out").read_text()
        assert "final checkpoint" in log, log[-2000:]
    # the copy a lease keeps if its last call never comes
    snapshot = subprocess.run([*script, "snapshot"], env=env, cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    assert snapshot.returncode == 0, snapshot.stderr
    assert sorted(unpack(out, "snapshot", tmp_path / "snap")) == [
        "ft.log.jsonl", "ft.out", "ft.pt", "scratch.log.jsonl", "scratch.out", "scratch.pt"]
    # two big runs' weights are more than a call brings back: one run's come back at a time
    one = subprocess.run([*script, "snapshot"], env={**env, "GPU_BACK": "scratch"}, cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr
    assert sorted(unpack(out, "snapshot", tmp_path / "one")) == [
        "ft.log.jsonl", "ft.out", "scratch.log.jsonl", "scratch.out", "scratch.pt"]
    finished = subprocess.run([*script, "finish", str(int(time.time()))], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr

    back = tmp_path / "back"
    unpack(out, "train-back", back)
    ft, scratch = read_checkpoint(back / "ft.pt"), read_checkpoint(back / "scratch.pt")
    # The fine-tuned run went on from the carried checkpoint's step, with its width; the other
    # trained its own recipe from step 0.
    assert ft["step"] == init_step + 4 and ft["config"]["d_model"] == 32
    assert scratch["step"] == 6 and scratch["config"]["d_model"] == 48
    assert (back / "ft.log.jsonl").exists() and (back / "scratch.log.jsonl").exists()
    # every evaluation scored the everyday sentences besides the general dev split
    evals = [json.loads(line) for line in (back / "ft.log.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e.get("event") == "eval"]
    assert evals and all("dev_everyday_chrf" in e and "dev_general_chrf" in e for e in evals)

    # A later lease goes on with the run that came back (its fp16 average, carried as it is),
    # without the shipped weights: the carry holds the corpus and that checkpoint alone.
    (carry / "init.pt").unlink()
    (carry / "scratch.pt").write_bytes((back / "scratch.pt").read_bytes())
    # its recipe names a vocabulary, as the big one does: the checkpoint's own comes first
    wide = recipe(tmp_path / "wide-again.yaml", 48)
    wide.write_text(wide.read_text() + f"tokenizer: {work / 'scratch/spm.model'}\n")
    later = {**env, "GPU_TRAIN_DIR": str(tmp_path / "work2"),
             "GPU_RUNS": f"again recipe={wide} init={carry / 'scratch.pt'} max_steps=9"}
    started = start_and_wait(later, timeout=240)
    assert started.returncode == 0, started.stderr
    log = (tmp_path / "work2/again.out").read_text()
    assert "initialised from" in log and "(step 6)" in log, log[-2000:]
    again = read_checkpoint(tmp_path / "work2/again/step_9.pt")
    assert again["config"]["d_model"] == 48 and again["tokenizer"] == scratch["tokenizer"]


def carried(tmp_path: Path, seed: int, vocabulary: bytes, **extra: str) -> tuple[Path, dict]:
    """A toy corpus v3 under tmp_path and a carry folder holding `vocabulary` as its
    spm-16000.model; the environment `gpu_train.sh` runs with."""
    data = tmp_path / "data/en-de-v3"
    data.mkdir(parents=True)
    write_split(data / "train", toy_corpus(20, seed=seed))
    write_split(data / "dev", toy_corpus(4, seed=seed + 1))
    carry = tmp_path / "carry"
    carry.mkdir()
    (carry / "spm-16000.model").write_bytes(vocabulary)
    return carry, {**os.environ, "PYTHON": sys.executable, "GPU_TRAIN_CARRY": str(carry),
                   "GPU_CORPUS_ROOT": str(tmp_path), "GPU_TRAIN_DIR": str(tmp_path / "work"),
                   "GPU_TRAIN_SETTLE": "0", **extra}


def prepare(env: dict, room: int) -> subprocess.CompletedProcess:
    """`gpu_train.sh prepare` with `room` bytes a call carries beside the tree."""
    return subprocess.run(["bash", str(ROOT / "model/gpu_train.sh"), "prepare"],
                          env={**env, "GPU_CARRY_ROOM": str(room)}, capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_prepare_packs_the_corpus_and_start_rebuilds_the_shipped_weights(tmp_path, tiny_bundle):
    data = tmp_path / "data/en-de-v3"
    data.mkdir(parents=True)
    pairs = toy_corpus(50, seed=4)
    write_split(data / "train", pairs)
    write_split(data / "dev", pairs[:8])
    (data / "test.en").write_text("not carried\n")
    carry = tmp_path / "carry"
    carry.mkdir()
    (carry / "spm-16000.model").write_bytes(b"kept: a vocabulary already there is not retrained")
    work = tmp_path / "work"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_TRAIN_CARRY": str(carry),
           "GPU_CORPUS_ROOT": str(tmp_path), "GPU_BUNDLE": str(tiny_bundle),
           "GPU_TRAIN_DIR": str(work), "GPU_TRAIN_SETTLE": "0"}
    done = subprocess.run(["bash", str(ROOT / "model/gpu_train.sh"), "prepare"], env=env,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress((carry / "data.tar.xz").read_bytes()))) \
            as tar:
        assert sorted(tar.getnames()) == [f"data/en-de-v3/{split}.{lang}"
                                          for split in ("dev", "train") for lang in ("de", "en")]
        assert tar.extractfile("data/en-de-v3/train.en").read().decode().splitlines() == [
            en for en, _ in pairs]
    # The shipped weights travel in the working tree, not in the carry: `start` rebuilds them.
    assert sorted(p.name for p in carry.iterdir()) == ["data.tar.xz", "spm-16000.model"]
    assert (carry / "spm-16000.model").read_bytes().startswith(b"kept")
    started = start_and_wait({**env, "GPU_RUNS": "ft max_steps=150"})
    assert started.returncode == 0, started.stderr
    assert read_checkpoint(work / "init.pt")["step"] == 150  # the tiny bundle's checkpoint


def test_a_run_to_go_on_with_travels_in_pieces_that_fit_beside_the_tree(tmp_path,
                                                                         tiny_checkpoint):
    run = tmp_path / "big.pt"
    run.write_bytes(tiny_checkpoint.read_bytes())
    carry, env = carried(tmp_path, 5, b"not needed beside a run: its tokenizer is inside",
                         GPU_INIT=str(run))

    def prepared(room: int) -> subprocess.CompletedProcess:
        done = prepare(env, room)
        assert done.returncode == 0, done.stderr
        return done

    # Room for all of it beside the tree: one piece, with the corpus, in one call.
    prepared(10**9)
    assert sorted(p.name for p in carry.iterdir()) == [
        "big.pt.sha256", "big.pt.xz.part-aa", "data.tar.xz"]
    packed = (carry / "big.pt.xz.part-aa").stat().st_size
    # Room for less than half (the bytes a call carries beside the tree): two calls with a
    # piece each, and the short last piece rides with the corpus.
    room = (packed - 300) // 2
    done = prepared(room)
    folders = sorted(tmp_path.glob("carry-*"))
    assert [f.name for f in folders] == ["carry-2", "carry-3"]
    assert sorted(p.name for p in carry.iterdir()) == [
        "big.pt.sha256", "big.pt.xz.part-ac", "data.tar.xz"]
    assert all(sum(f.stat().st_size for f in d.iterdir()) <= room for d in [carry, *folders])
    assert "carry-2 carry-3 then " in done.stdout  # the order of the calls

    # `start` joins the pieces; the run names the joined checkpoint and goes on from its step.
    step = read_checkpoint(run)["step"]
    runs = {"GPU_RUNS": f"again init={carry / 'big.pt'} max_steps={step}"}
    started = start_and_wait({**env, **runs})
    assert started.returncode == 0, started.stderr
    assert "big.pt: joined from 3 pieces" in started.stdout
    assert (carry / "big.pt").read_bytes() == run.read_bytes()

    # A piece left behind (a call that never came): a clear refusal, no training on a torso.
    (carry / "big.pt").unlink()
    for piece in folders[-1].iterdir():
        piece.unlink()
    started = start_and_wait({**env, **runs, "GPU_TRAIN_DIR": str(tmp_path / "work2")})
    assert started.returncode == 3
    assert "big.pt: its pieces are missing or damaged" in started.stdout
    assert not (tmp_path / "work2/again.out").exists()


def test_a_vocabulary_with_no_room_beside_the_corpus_travels_in_a_call_of_its_own(tmp_path):
    vocab = b"a vocabulary for a run from scratch " * 200
    carry, env = carried(tmp_path, 7, vocab)
    assert prepare(env, 10**9).returncode == 0
    assert not list(tmp_path.glob("carry-*"))
    corpus = (carry / "data.tar.xz").stat().st_size
    # Room for the corpus, not for the corpus and the vocabulary: the vocabulary goes apart.
    done = prepare(env, corpus + len(vocab) // 2 + 4096)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in carry.iterdir()) == ["data.tar.xz"]
    assert (tmp_path / "carry-2/spm-16000.model").read_bytes() == vocab
    assert "carry-2 then carry with start" in done.stdout
    # Not even room for the corpus: a refusal.
    assert prepare(env, corpus // 2).returncode == 3

    # `start` puts it back beside the corpus, where a run's tokenizer= names it.
    prepare(env, corpus + len(vocab) // 2 + 4096)
    started = start_and_wait({**env, "GPU_RUNS": "none init=none max_steps=0"})
    assert (carry / "spm-16000.model").read_bytes() == vocab, started.stdout + started.stderr


def test_aside_keeps_what_a_lease_does_not_need_from_travelling_and_back_restores_it(tmp_path):
    repo = tmp_path / "repo"
    (repo / "model").mkdir(parents=True)
    (repo / "model/gpu_train.sh").write_bytes((ROOT / "model/gpu_train.sh").read_bytes())
    (repo / "bundles/en-de").mkdir(parents=True)
    for name in ("weights.int8.bin", "lm.ngram.bin", "weights.fp32.bin"):
        (repo / "bundles/en-de" / name).write_bytes(name.encode() * 1000)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                              text=True).stdout

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")

    def script(verb: str) -> None:
        done = subprocess.run(["bash", str(repo / "model/gpu_train.sh"), verb], cwd=repo,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr

    def travelling() -> set[str]:  # the device tool's rule: tracked, or untracked not ignored
        return set(git("ls-files").split()) | set(
            git("ls-files", "-o", "--exclude-standard").split())

    everything = travelling()
    script("aside")
    assert travelling() == everything - {"bundles/en-de/weights.int8.bin",
                                         "bundles/en-de/lm.ngram.bin"}
    assert (repo / "bundles/en-de/lm.ngram.bin").exists()  # kept here
    script("aside")  # twice: the same
    assert travelling() == everything - {"bundles/en-de/weights.int8.bin",
                                         "bundles/en-de/lm.ngram.bin"}
    script("back")
    assert travelling() == everything
    assert git("status", "--porcelain") == ""
    assert "lm.ngram.bin" not in (repo / ".git/info/exclude").read_text()
