#!/usr/bin/env bash
# The GPU machine's side of bench.cuda_check (docs/cuda.md), run from the repository root by the
# device tool, one call per carried part, back to back (the machine keeps /tmp only while warm):
#
#   bash bench/cuda_check.sh stage   every call but the last: keep the carried part(s) in /tmp
#   bash bench/cuda_check.sh run     the last call: check and join the parts, install the wheels
#                                    to /tmp/site, make what the payload lacks, run the check
#
# The parts come from `python -m bench.cuda_prepare .cuda` (here, before the session's first
# device call). CUDA_CARRY names another carried folder; CHECK_ARGS adds options to the check.
set -uo pipefail

CARRY=${CUDA_CARRY:-.cuda}
STAGE=${CUDA_STAGE:-/tmp/cuda-stage}
PAYLOAD=${CUDA_PAYLOAD:-/tmp/cuda-carry}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/cuda-out}
say() { echo "[cuda_check.sh $(date -u +%T)] $*"; }

stage() {
    mkdir -p "$STAGE"
    cp "$CARRY"/part-* "$CARRY"/parts.sha256 "$STAGE"/ 2>/dev/null
    say "staged: $(cd "$STAGE" && ls | tr '\n' ' ')($(du -sm "$STAGE" | cut -f1) MiB)"
}

# CUDA 13 and cuDNN 9 as the image's torch installed them (pip's nvidia-* packages): on the
# library path for onnxruntime-gpu, in this process and in the server it starts
nvidia_libraries() {
    "$PY" - <<'EOF'
import glob, os
import nvidia  # a namespace package: one folder per installed nvidia-* wheel below it
dirs = {os.path.dirname(p) for root in nvidia.__path__
        for p in glob.glob(os.path.join(root, "**", "lib*.so*"), recursive=True)}
print(":".join(sorted(dirs)))
EOF
}

# CTranslate2's wheel is built for CUDA 12 and opens libcublas.so.12 by name (dlopen), calling
# eight cuBLAS functions whose signatures CUDA 13 kept. Where no CUDA 12 cuBLAS exists, a link of
# that name to CUDA 13's lets it run; its rows carry their BLEU, so a wrong result would show.
cublas12_link() {
    if ldconfig -p | grep -q 'libcublas.so.12'; then return; fi
    local dir found
    for dir in ${LD_LIBRARY_PATH//:/ }; do
        [ -e "$dir/libcublas.so.12" ] && return
        [ -e "$dir/libcublas.so.13" ] && found=$dir/libcublas.so.13
    done
    [ -n "${found:-}" ] || return
    mkdir -p /tmp/cublas12 && ln -sfn "$found" /tmp/cublas12/libcublas.so.12
    export LD_LIBRARY_PATH=/tmp/cublas12:$LD_LIBRARY_PATH
    say "no CUDA 12 cuBLAS: libcublas.so.12 -> $found for CTranslate2"
}

probe() {
    say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
    local cublas12
    cublas12="$(ldconfig -p | grep -c 'libcublas.so.12') in ldconfig; $(ls \
        /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/libcublas.so.12* \
        /usr/local/cuda*/lib64/libcublas.so.12* 2>/dev/null | tr '\n' ' ')"
    say "CUDA 12 cuBLAS (CTranslate2's CUDA build needs it): $cublas12"
}

run() {
    stage
    if ! (cd "$STAGE" && sha256sum -c --quiet parts.sha256); then
        say "parts missing or damaged"; exit 3
    fi
    rm -rf "$PAYLOAD" && mkdir -p "$PAYLOAD"
    cat "$STAGE"/part-* | tar -x -C "$PAYLOAD" || exit 3
    say "payload: $(ls "$PAYLOAD" | tr '\n' ' ')"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site "$PAYLOAD"/wheels/*.whl || exit 3
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    LD_LIBRARY_PATH="$(nvidia_libraries)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    cublas12_link
    probe
    "$PY" -c "import onnxruntime as o; print('onnxruntime', o.__version__, \
        o.get_available_providers())"
    bundle=bundles/en-de
    [ -d "$PAYLOAD/bundle" ] && bundle=$PAYLOAD/bundle
    if [ ! -d "$PAYLOAD/bundle-fp16" ]; then
        say "making the fp16 bundle"
        "$PY" -m bench.cuda_prepare --bundle "$bundle" --make-fp16 "$PAYLOAD/bundle-fp16" \
            || { rm -rf "$PAYLOAD/bundle-fp16"; say "fp16 bundle not made: the check skips fp16"; }
    fi
    if [ ! -d "$PAYLOAD/ct2-model" ] && "$PY" -c "import ctranslate2" 2>/dev/null; then
        say "making the CTranslate2 model"
        "$PY" -m bench.cuda_prepare --bundle "$bundle" --make-ct2 "$PAYLOAD/ct2-model" \
            || { rm -rf "$PAYLOAD/ct2-model"; say "no CTranslate2 model: the check skips it"; }
    fi
    mkdir -p "$OUT"
    # shellcheck disable=SC2086  # CHECK_ARGS: several options
    timeout 420 "$PY" -m bench.cuda_check --out "$OUT" --carry "$PAYLOAD" --bundle "$bundle" \
        --provider cuda ${CHECK_ARGS:-} 2>&1 | tee "$OUT/cuda_check.log"
}

case "${1:-}" in
    stage) stage; if [ "$(ls "$STAGE" | wc -l)" -le 1 ]; then probe; fi ;;  # on the first call
    run) run ;;
    *) echo "usage: bash bench/cuda_check.sh stage|run" >&2; exit 2 ;;
esac
