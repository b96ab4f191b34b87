#!/usr/bin/env bash
# Fine-tuning on a lent GPU through the device tool, in the same lease as the CUDA check
# (docs/training.md, "On a lent GPU"): the runs train while the check's parts are staged, pause
# while it measures, and go on until the lease's end.
#
#   bash model/gpu_train.sh prepare          here, before the lease: make .gpu/ (below)
#   bash model/gpu_train.sh aside | back     here, before the first call and after the last:
#                                            keep what the device does not need from travelling
#   bash model/gpu_train.sh start            first call: unpack the carried corpus and checkpoint
#                                            (.gpu/), start each run in its own session so it
#                                            outlives the call
#   bash model/gpu_train.sh pause | resume   SIGSTOP / SIGCONT, so the check sees an idle GPU
#   bash model/gpu_train.sh status           each run's last progress line, the GPU's load
#   bash model/gpu_train.sh snapshot         each run's last checkpoints averaged, to $OUT, while
#                                            the runs go on
#   bash model/gpu_train.sh finish DEADLINE  train on until DEADLINE (seconds since the epoch)
#                                            less the time to stop; then stop the runs (each saves
#                                            a checkpoint), average each run's last checkpoints,
#                                            and write them to $OUT in pieces (fp16 weights)
#
# .gpu/ is made here beforehand by `prepare`: data.tar.xz (corpus v3's train and dev files,
# the corpus built first if data/en-de-v3 has none: a few minutes and 3 GB of downloads) and
# spm-16000.model (corpus v3's vocabulary for recipes/en-de-v3big.yaml, trained if missing:
# about five minutes). The shipped weights travel in the working tree (bundles/en-de): `start`
# rebuilds them on the device (export.unbundle) unless .gpu/init.pt is carried.
# Back here: cat train-back.tar.part-* | tar -x, then python -m model.checkpoint precision
# RUN.pt RUN-fp32.pt makes each averaged run a float32 checkpoint again.
#
# A run's options are --set options, except two: recipe=FILE trains that recipe instead of
# GPU_RECIPE, and init=none starts from scratch instead of from the shipped weights (its
# tokenizer then comes from the recipe or a tokenizer= option, e.g. .gpu/spm-16000.model), e.g.
#   GPU_RUNS='big recipe=recipes/en-de-v3big.yaml init=none tokenizer=.gpu/spm-16000.model'
# init=FILE starts from another checkpoint, e.g. a run that came back from an earlier lease
# (its fp16 average as it came back; the recipe's tokenizer is set aside for the checkpoint's):
#   GPU_RUNS='big2 recipe=recipes/en-de-v3big.yaml init=.gpu/big.pt'
# `prepare` carries it when GPU_INIT names it. The device tool carries at most 64 MiB a call,
# the working tree included, so such a checkpoint travels xz-packed in pieces, one folder per
# call (.gpu-2, .gpu-3, ...: each must be ignored by git, as .gitignore's '/.gpu*/' does).
# The machine keeps ignored folders between calls while it is warm, and `start`, in the call
# that carries .gpu, joins the pieces and checks them against .gpu/RUN.pt.sha256.
#
# `snapshot`, in the call that runs `start`, writes each run's last checkpoints averaged to
# $OUT (snapshot.tar.part-*) while the runs go on: if the next call, `finish`, does not come
# before the warm machine is given back, that copy is what the lease leaves.
set -uo pipefail

WORK=${GPU_TRAIN_DIR:-/tmp/gpu-train}
CARRY=${GPU_TRAIN_CARRY:-.gpu}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/gpu-train-out}
RECIPE=${GPU_RECIPE:-recipes/en-de-v3ft2.yaml}
# The runs side by side, ';'-separated: a name, then --set options on top of the recipe.
RUNS=${GPU_RUNS:-"lr06 lr_scale=0.6;lr10 lr_scale=1.0"}
COMMON=${GPU_COMMON:-"batch_tokens=25000 eval_every=1500 save_every=500 save_every_minutes=0 keep_last=8 threads=4 hurried_share=0.15"}
# The runs whose weights come back (space-separated names; default: all). Two of the big
# model's fp16 averages are more than one call brings back: `snapshot` may bring one and
# `finish` the other; the logs of every run come back each time.
BACK=${GPU_BACK:-}
REPO=$(cd "$(dirname "$0")/.." && pwd)
# everyday sentences with references, never trained on: logged as dev_everyday_bleu/chrf
EVERYDAY=$REPO/recipes/everyday-dev
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

# Tracked files a lease's calls do not need and the tree cannot carry beside the corpus: the
# bundle's int8 variant and its reranking language model (the device rebuilds the weights from
# the fp32 variant). `aside`, before a lease's first call, takes them out of the index (the
# deletion stays staged, never committed) and has git ignore them: they stay here and do not
# travel. `back`, after its last call, undoes both.
ASIDE=${GPU_ASIDE-bundles/en-de/weights.int8.bin bundles/en-de/lm.ngram.bin}

# the repository's own ignore file (.git/info/exclude; a worktree's is elsewhere)
exclude_file() {
    local path; path=$(git -C "$REPO" rev-parse --git-path info/exclude)
    case "$path" in /*) echo "$path" ;; *) echo "$REPO/$path" ;; esac
}

aside() {
    local p exclude; exclude=$(exclude_file)
    mkdir -p "$(dirname "$exclude")"
    for p in $ASIDE; do
        git -C "$REPO" rm -q --cached --ignore-unmatch -- "$p" || exit 3
        grep -qxF "/$p" "$exclude" 2>/dev/null || echo "/$p" >>"$exclude"
    done
    say "set aside until 'back' (commit nothing before): $ASIDE"
}

back() {
    local p exclude; exclude=$(exclude_file)
    for p in $ASIDE; do
        if [ -f "$exclude" ]; then grep -vxF "/$p" "$exclude" >"$exclude.new"; mv "$exclude.new" "$exclude"; fi
        git -C "$REPO" reset -q -- "$p" || exit 3
    done
    say "back in the index: $ASIDE"
}

# Bytes a call may carry beside the working tree (tracked and untracked files git does not
# ignore, less what `aside` keeps back), with 2 MiB to spare: pieces made before a session's
# last commits still fit beside the tree those commits grew (more would leave no room for the
# corpus, .gpu's data.tar.xz).
room() {
    if [ -n "${GPU_CARRY_ROOM:-}" ]; then echo "$GPU_CARRY_ROOM"; return; fi
    local tree
    tree=$(cd "$REPO" && { git ls-files -z; git ls-files -z -o --exclude-standard; } \
        | grep -zvxF -e "${ASIDE// /$'\n'}" -e /dev/null/never \
        | du --files0-from=- -cb 2>/dev/null | tail -1 | cut -f1)
    echo $(( (64 - 2) * 1024 * 1024 - tree ))
}

# FILE moved into the piece folder $CARRY-N, which git must ignore (else it would travel in
# every call)
apart() {
    mkdir -p "$CARRY-$2" && mv "$1" "$CARRY-$2/"
    git -C "$REPO" check-ignore -q "$(realpath "$CARRY-$2")" 2>/dev/null
    if [ $? -eq 1 ]; then
        say "$CARRY-$2 is not ignored by git: it would travel in every call"; exit 3
    fi
}

# The order of the calls when N > 1: one per piece folder, then the one carrying $CARRY.
calls() {
    if [ "$1" -gt 1 ]; then
        say "carry, one device call each, no more than the warm time apart:" \
            "$(for i in $(seq 2 "$1"); do printf '%s ' "$(basename "$CARRY")-$i"; done)then" \
            "$(basename "$CARRY") with start"
    fi
}

prepare() {
    local root=${GPU_CORPUS_ROOT:-.}
    local corpus=$root/data/en-de-v3
    local room piece; room=$(room)
    mkdir -p "$CARRY"
    # a vocabulary an earlier prepare set apart comes back before the pieces are cleared
    for piece in "$CARRY"-[0-9]*/spm-16000.model; do
        if [ -f "$piece" ]; then mv "$piece" "$CARRY/"; fi
    done
    rm -rf "$CARRY"/init.pt "$CARRY"/*.sha256 "$CARRY"/*.part-* "$CARRY"-[0-9]*
    if [ ! -f "$corpus/train.en" ]; then
        "$PY" -m model.corpus build --pair en-de --out "$corpus" \
            --cache "${GPU_CORPUS_CACHE:-.cache}" || exit 3
    fi
    (cd "$root" && tar -cf - data/en-de-v3/train.* data/en-de-v3/dev.*) | xz -9 -T2 \
        >"$CARRY/data.tar.xz" || exit 3
    if [ -n "${GPU_INIT:-}" ]; then
        # a run to go on with, its tokenizer inside: the vocabulary stays behind
        local name; name=$(basename "$GPU_INIT")
        rm -f "$CARRY/spm-16000.model"
        (cd "$(dirname "$GPU_INIT")" && sha256sum "$name") >"$CARRY/$name.sha256" || exit 3
        mkdir -p "$WORK/pieces" && rm -f "$WORK/pieces/"*
        xz -6 -T2 -c "$GPU_INIT" | split -b "$room" - "$WORK/pieces/$name.xz.part-" || exit 3
        local n=1 pieces; pieces=$(ls "$WORK/pieces/"*)
        for piece in $pieces; do
            # the last piece rides with the corpus when there is room for it
            if [ "$piece" = "$(tail -1 <<<"$pieces")" ] && [ $(( $(du -cb "$CARRY" \
                | tail -1 | cut -f1) + $(stat -c %s "$piece") )) -le "$room" ]; then
                mv "$piece" "$CARRY/"; continue
            fi
            n=$((n + 1))
            apart "$piece" "$n"
        done
        calls "$n"
    else
        if [ ! -f "$CARRY/spm-16000.model" ]; then
            "$PY" -m model.vocab_trial --corpus "$corpus" --sizes 16000 \
                --max-sentences 600000 --out "$WORK/vocab" \
                && cp "$WORK/vocab/spm-16000.model" "$CARRY/" || exit 3
        fi
        # the vocabulary of a run from scratch rides in a call of its own if the corpus
        # leaves no room for it
        if [ "$(du -cb "$CARRY" | tail -1 | cut -f1)" -gt "$room" ]; then
            apart "$CARRY/spm-16000.model" 2
            calls 2
        fi
    fi
    if [ "$(du -cb "$CARRY" | tail -1 | cut -f1)" -gt "$room" ]; then
        say "$CARRY is larger than a call carries beside the working tree ($room bytes)"; exit 3
    fi
    ls -la "$CARRY"
    for piece in "$CARRY"-[0-9]*; do if [ -d "$piece" ]; then ls -la "$piece"; fi; done
}

# A checkpoint carried in pieces (prepare with GPU_INIT): joined into $CARRY and checked.
join_pieces() {
    local sums name
    for sums in "$CARRY"/*.sha256; do
        [ -f "$sums" ] || continue
        name=$(basename "$sums" .sha256)
        local parts count
        parts=$(for f in "$CARRY"/"$name".xz.part-* "$CARRY"-[0-9]*/"$name".xz.part-*; do
            [ -f "$f" ] && echo "$(basename "$f") $f"; done | sort | cut -d' ' -f2)
        # shellcheck disable=SC2086  # the paths hold no spaces
        [ -n "$parts" ] && cat $parts 2>/dev/null | xz -dc >"$CARRY/$name" 2>/dev/null
        count=$(wc -w <<<"$parts")
        if ! (cd "$CARRY" && sha256sum -c --quiet "$name.sha256" >/dev/null 2>&1); then
            say "$name: its pieces are missing or damaged (found: $count);" \
                "carry each $CARRY-N folder prepare made, one call each, while the machine is warm"
            exit 3
        fi
        say "$name: joined from $count pieces"
    done
}

start() {
    mkdir -p "$WORK"
    tar -xJf "$CARRY/data.tar.xz" -C "$WORK" || exit 3
    join_pieces
    for piece in "$CARRY"-[0-9]*/spm-16000.model; do
        if [ -f "$piece" ]; then cp "$piece" "$CARRY/"; fi
    done
    if [ -f "$CARRY/init.pt" ]; then
        cp "$CARRY/init.pt" "$WORK/init.pt" || exit 3
    elif runs | grep -qv ' init='; then  # a run starts from the shipped weights
        "$PY" -m export.unbundle "${GPU_BUNDLE:-$REPO/bundles/en-de}" --out "$WORK/init.pt" \
            >/dev/null || exit 3
    fi
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
    pack back train-back
}

# Each run's log and its last checkpoints averaged in fp16, to $OUT/PREFIX.tar.part-* (pieces
# the device tool brings back).
pack() {
    local dir=$WORK/$1 prefix=$2 name
    rm -rf "$dir" "$OUT/$prefix".tar.part-* && mkdir -p "$dir" "$OUT"
    for name in $(runs | cut -d' ' -f1); do
        grep -a '"event": "eval"' "$WORK/$name/train.log.jsonl" | tail -4
        cp "$WORK/$name/train.log.jsonl" "$dir/$name.log.jsonl"
        tr '\r' '\n' <"$WORK/$name.out" | grep -av '%|' | tail -5 >"$dir/$name.out"
        if [ -n "$BACK" ] && ! grep -qw -- "$name" <<<"$BACK"; then continue; fi
        "$PY" -m model.checkpoint average "$WORK/$name" "$dir/$name.pt" --last 5 --fp16 \
            || say "$name: no checkpoint to average"
    done
    (cd "$dir" && tar -cf - .) | split -b 15M - "$OUT/$prefix.tar.part-"
    ls -la "$OUT"
}

case "${1:-}" in
    prepare) prepare ;;
    aside) aside ;;
    back) back ;;
    start) start ;;
    pause) kill -STOP $(pids) 2>/dev/null; say "paused: $(pids | tr '\n' ' ')" ;;
    resume) kill -CONT $(pids) 2>/dev/null ;;
    status) progress ;;
    snapshot) progress; pack snapshot snapshot ;;
    finish) finish "${2:?finish DEADLINE}" ;;
    *) echo "usage: bash model/gpu_train.sh prepare|aside|back|start|pause|resume|status|snapshot|finish DEADLINE" >&2; exit 2 ;;
esac
