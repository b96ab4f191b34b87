#!/usr/bin/env bash
# Print a directory holding ONNX Runtime's C API headers (onnxruntime_cxx_api.h) for building
# app/engine/kernels, fetching them if the system has none: Debian packages them as
# libonnxruntime-dev from trixie on. On an older Debian the package is downloaded from trixie
# with this machine's own apt source (nothing installed) and only its headers unpacked into
# DEST (default: a new temporary directory). Exit 1, with the reason on stderr, if neither works.
set -euo pipefail
for dir in /usr/include/onnxruntime /usr/local/include/onnxruntime; do
    if [ -f "$dir/onnxruntime_cxx_api.h" ]; then echo "$dir"; exit 0; fi
done
dest="${1:-$(mktemp -d)}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
source_file=/etc/apt/sources.list.d/debian.sources
mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
if [ -f "$source_file" ]; then
    # the main archive's stanzas (not the security archive's), their suites set to trixie
    awk -v RS= -v ORS='\n\n' '!/security/' "$source_file" \
        | sed -E 's/^Suites:.*/Suites: trixie/' > "$work/parts/trixie.sources"
elif grep -qsE '^deb ' /etc/apt/sources.list; then
    # one-line sources (debootstrap writes these): the main archive's first one, as trixie
    grep -E '^deb ' /etc/apt/sources.list | grep -v security | head -1 \
        | sed -E 's/\[[^]]*\] *//' | awk '{print "deb", $2, "trixie main"}' \
        > "$work/parts/trixie.list"
else
    echo "no Debian archive in $source_file or /etc/apt/sources.list to fetch from" >&2; exit 1
fi
apt_opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$work/parts"
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
          -o APT::Sandbox::User=root -o Acquire::http::Timeout=30 -o Acquire::https::Timeout=30)
apt-get -q "${apt_opts[@]}" update >/dev/null
(cd "$work" && apt-get -q "${apt_opts[@]}" download libonnxruntime-dev >/dev/null)
dpkg-deb -x "$work"/libonnxruntime-dev_*.deb "$work/root"
mkdir -p "$dest"
cp -r "$work/root/usr/include/onnxruntime/." "$dest/"
echo "$dest"
