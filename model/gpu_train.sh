#!/usr/bin/env bash
# Fine-tuning on a lent GPU through the device tool, in the same lease as the CUDA check
# (docs/training.md, "On a lent GPU"): the runs train while the check's parts are staged, pause
# while it measures, and go on until the lease's end.
#
#   bash model/gpu_train.sh prepare          here, before the lease: make .gpu/ (below)
#   bash model/gpu_train.sh start            first call: unpack the carried corpus and checkpoint
#                                            (.gpu/), start each run in its own session so it
#                                            outlives the call
#   bash model/gpu_train.sh pause | resume   SIGSTOP / SIGCONT, so the check sees an idle GPU
#   bash model/gpu_train.sh status           each run's last progress line, the GPU's load
#   bash model/gpu_train.sh finish DEADLINE  train on until DEADLINE (seconds since the epoch)
#                                            less the time to stop; then stop the runs (each saves
#                                            a checkpoint), average each run's last checkpoints,
#                                            and write them to $OUT in pieces (fp16 weights)
#
# .gpu/ is made here beforehand by `prepare`: data.tar.xz (corpus v3's train and dev files,
# the corpus built first if data/en-de-v3 has none: a few minutes and 3 GB of downloads),
# init.pt (the shipped bundle's weights, export.unbundle) and spm-16000.model (corpus v3's
# vocabulary for recipes/en-de-v3big.yaml, trained if missing: about five minutes).
# Back here: cat train-back.tar.part-* | tar -x, then python -m model.checkpoint precision
# RUN.pt RUN-fp32.pt makes each averaged run a float32 checkpoint again.
#
# A run's options are --set options, except two: recipe=FILE trains that recipe instead of
# GPU_RECIPE, and init=none starts from scratch instead of from .gpu/init.pt (its tokenizer
# then comes from the recipe or a tokenizer= option, e.g. .gpu/spm-16000.model), e.g.
#   GPU_RUNS='big recipe=recipes/en-de-v3big.yaml init=none tokenizer=.gpu/spm-16000.model'
# init=FILE starts from another checkpoint, e.g. a run that came back from an earlier lease
# (its fp16 average as it came back; the recipe's tokenizer is set aside for the checkpoint's):
#   GPU_RUNS='big2 recipe=recipes/en-de-v3big.yaml init=.gpu/big.pt'
# `prepare` carries it in place of the shipped weights when GPU_INIT names it.
set -uo pipefail

WORK=${GPU_TRAIN_DIR:-/tmp/gpu-train}
CARRY=${GPU_TRAIN_CARRY:-.gpu}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gpu-train-out}
RECIPE=${GPU_RECIPE:-recipes/en-de-v3ft2.yaml}
# The runs side by side, ';'-separated: a name, then --set options on top of the recipe.
RUNS=${GPU_RUNS:-"lr06 lr_scale=0.6;lr10 lr_scale=1.0"}
COMMON=${GPU_COMMON:-"batch_tokens=25000 eval_every=1500 save_every=500 save_every_minutes=0 keep_last=8 threads=4 hurried_share=0.15"}
# everyday sentences with references, never trained on: logged as dev_everyday_bleu/chrf
EVERYDAY=$(cd "$(dirname "$0")/.." && pwd)/recipes/everyday-dev
STOP_SECONDS=60  # to stop, average and pack
SETTLE=${GPU_TRAIN_SETTLE:-45}  # seconds start waits before it shows the runs' first progress
say() { echo "[gpu_train.sh $(date -u +%T)] $*"; }

runs() { tr ';' '\n' <<<"$RUNS" | sed '/^ *$/d'; }
pids() { pgrep -f "model.train .*out_dir=$WORK/" || true; }

progress() {
    local name
    for name in $(runs | cut -d' ' -f1); do
        say "$name: $(tr '\r' '\n' <"$WORK/$name.out" | grep -a 'step' | tail -1)"
    done
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null || true
}

prepare() {
    local root=${GPU_CORPUS_ROOT:-.} bundle=${GPU_BUNDLE:-bundles/en-de}
    local corpus=$root/data/en-de-v3
    mkdir -p "$CARRY"
    if [ ! -f "$corpus/train.en" ]; then
        "$PY" -m model.corpus build --pair en-de --out "$corpus" \
            --cache "${GPU_CORPUS_CACHE:-.cache}" || exit 3
    fi
    (cd "$root" && tar -cf - data/en-de-v3/train.* data/en-de-v3/dev.*) | xz -9 -T2 \
        >"$CARRY/data.tar.xz" || exit 3
    if [ -n "${GPU_INIT:-}" ]; then
        # a run to go on with, its tokenizer inside: neither the shipped weights nor the
        # vocabulary travel beside it (the device tool carries 64 MiB)
        rm -f "$CARRY/init.pt" "$CARRY/spm-16000.model"
        cp "$GPU_INIT" "$CARRY/$(basename "$GPU_INIT")" || exit 3
    else
        "$PY" -m export.unbundle "$bundle" --out "$CARRY/init.pt" || exit 3
        if [ ! -f "$CARRY/spm-16000.model" ]; then
            "$PY" -m model.vocab_trial --corpus "$corpus" --sizes 16000 \
                --max-sentences 600000 --out "$WORK/vocab" \
                && cp "$WORK/vocab/spm-16000.model" "$CARRY/" || exit 3
        fi
    fi
    ls -la "$CARRY"
}

start() {
    mkdir -p "$WORK"
    tar -xJf "$CARRY/data.tar.xz" -C "$WORK" || exit 3
    if [ -f "$CARRY/init.pt" ]; then cp "$CARRY/init.pt" "$WORK/init.pt" || exit 3; fi
    local data=$WORK/data/en-de-v3 name opts
    while read -r name opts; do
        local sets=() recipe=$RECIPE init=(--init-from "$WORK/init.pt")
        for kv in $COMMON $opts; do
            case $kv in
                recipe=*) recipe=${kv#recipe=} ;;
                init=none) init=() ;;
                init=*) init=(--init-from "${kv#init=}" --set tokenizer=) ;;
                *) sets+=(--set "$kv") ;;
            esac
        done
        setsid nohup "$PY" -m model.train --config "$recipe" "${init[@]}" \
            --set "out_dir=$WORK/$name" --set "train=$data/train" --set "dev=$data/dev" \
            --set "dev_extra={\"general\": \"$data/dev.general\", \"everyday\": \"$EVERYDAY\"}" \
            --set 'domain_sample={"dictionary": 0.6, "phrase": 4.0, "general": 1.75}' \
            "${sets[@]}" >"$WORK/$name.out" 2>&1 </dev/null &
        say "started $name: $recipe ${init[*]:-from scratch} ${sets[*]}"
    done < <(runs)
    sleep "$SETTLE"
    progress
}

finish() {
    local deadline=$1 left
    kill -CONT $(pids) 2>/dev/null
    left=$(( deadline - $(date +%s) - STOP_SECONDS ))
    say "training $left s more"
    if [ "$left" -gt 0 ]; then sleep "$left"; fi
    progress
    kill -TERM $(pids) 2>/dev/null
    for _ in $(seq 60); do [ -z "$(pids)" ] && break; sleep 1; done
    mkdir -p "$WORK/back" "$OUT"
    local name
    for name in $(runs | cut -d' ' -f1); do
        grep -a '"event": "eval"' "$WORK/$name/train.log.jsonl" | tail -4
        cp "$WORK/$name/train.log.jsonl" "$WORK/back/$name.log.jsonl"
        tr '\r' '\n' <"$WORK/$name.out" | grep -av '%|' | tail -5 >"$WORK/back/$name.out"
        "$PY" -m model.checkpoint average "$WORK/$name" "$WORK/back/$name.pt" --last 5 --fp16 \
            || say "$name: no checkpoint to average"
    done
    (cd "$WORK/back" && tar -cf - .) | split -b 15M - "$OUT/train-back.tar.part-"
    ls -la "$OUT"
}

case "${1:-}" in
    prepare) prepare ;;
    start) start ;;
    pause) kill -STOP $(pids) 2>/dev/null; say "paused: $(pids | tr '\n' ' ')" ;;
    resume) kill -CONT $(pids) 2>/dev/null ;;
    status) progress ;;
    finish) finish "${2:?finish DEADLINE}" ;;
    *) echo "usage: bash model/gpu_train.sh prepare|start|pause|resume|status|finish DEADLINE" >&2; exit 2 ;;
esac
