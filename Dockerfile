# Torch-free runtime image of the translation service (CPU, ONNX Runtime).
#
#   docker build -t nmt-service .
#   docker run --rm -p 127.0.0.1:8000:8000 nmt-service
#
# Build arguments:
#   BASE_IMAGE  the Python 3.11+ image both stages start from (default python:3.11-slim; any
#               Debian-like image with python, python -m venv and pip works)
#   EXTRAS      the optional dependencies installed with the service (default documents,pdf:
#               every document format; empty for .txt, .html and .md only)
# Optional BuildKit secrets, read only while pip runs and never stored in a layer:
#   ca          a CA bundle for pip (PIP_CERT), for builds behind a TLS-inspecting proxy
#   pipenv      a file of KEY=VALUE lines (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, ...) for pip
# The CUDA variant is Dockerfile.cuda.

ARG BASE_IMAGE=python:3.11-slim
ARG EXTRAS=documents,pdf

# --- build: a virtual environment with the runtime dependencies, the app and its kernels ----
FROM ${BASE_IMAGE} AS build
ARG EXTRAS

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
# a C++ compiler for our native kernels (app/engine/kernels), in this stage only: the runtime
# stage gets the built libraries and no toolchain
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
# Dependencies first, from pyproject.toml alone, so that code changes reuse this layer. Only
# app/ is copied: model/, export/ and bench/ (torch and friends) stay out of the image.
COPY pyproject.toml README.md ./
RUN --mount=type=secret,id=ca --mount=type=secret,id=pipenv \
    set -eu; \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi; \
    if [ -s /run/secrets/pipenv ]; then set -a; . /run/secrets/pipenv; set +a; fi; \
    mkdir app && touch app/__init__.py; \
    pip install ".${EXTRAS:+[$EXTRAS]}" ; \
    pip uninstall -y nmt-service; \
    rm -rf app build *.egg-info

# setup.py builds the native kernels into the venv's package (ONNX Runtime's C API headers:
# Debian's, fetched by app/engine/kernels/fetch_headers.sh). They are built for this build
# machine's CPU; where the image runs on a CPU without the features they were built for, the
# server leaves them out and says so (app.engine.kernels.runtime), on ONNX Runtime's kernels.
COPY setup.py ./
COPY app ./app
RUN --mount=type=secret,id=ca --mount=type=secret,id=pipenv \
    set -eu; \
    if [ -s /run/secrets/ca ]; then export PIP_CERT=/run/secrets/ca; fi; \
    if [ -s /run/secrets/pipenv ]; then set -a; . /run/secrets/pipenv; set +a; fi; \
    pip install --no-deps . ; \
    pip check; \
    python -c "import app.http.app, onnxruntime, sentencepiece"; \
    if python -c "import torch" 2>/dev/null; then echo "torch must not be installed" >&2; exit 1; fi; \
    cd / && python -c "from app.engine.kernels import runtime; print(runtime.report().line())"; \
    rm -rf /root/.cache

# --- runtime: the venv, the shipped bundles, a non-root user --------------------------------
FROM ${BASE_IMAGE} AS runtime
ARG EXTRAS

LABEL org.opencontainers.image.title="nmt-service" \
      org.opencontainers.image.description="Self-hosted machine translation (ONNX Runtime, CPU)" \
      org.opencontainers.image.licenses="MIT"

# a fixed uid/gid, so that mounted volumes can be prepared for it (chown 10001)
RUN groupadd --system --gid 10001 nmt \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin nmt
# a PDF's translation is drawn in DejaVu Sans where Helvetica lacks a character (app.documents.
# pdf_file): the font comes with the pdf extra
RUN case ",${EXTRAS}," in *,pdf,*) \
        apt-get update -q \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
           fonts-dejavu-core \
        && rm -rf /var/lib/apt/lists/* ;; \
    esac

COPY --from=build /opt/venv /opt/venv
# root-owned and read-only for the service user: the model cannot be changed at run time
COPY bundles/ /opt/nmt/bundles/
# translated files and document jobs (NMT_FILES_DIR, NMT_JOBS_DIR): the one writable place,
# a volume in docker compose (a named volume takes this directory's owner)
RUN mkdir -p /opt/nmt/data && chown 10001:10001 /opt/nmt/data

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NMT_HOST=0.0.0.0 \
    NMT_PORT=8000 \
    NMT_MODELS_DIR=/opt/nmt/bundles \
    NMT_PROVIDER=cpu

WORKDIR /opt/nmt
USER 10001:10001
EXPOSE 8000

# ready = models loaded and warmed up; the start period covers loading a large model
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health/ready' % os.environ.get('NMT_PORT', '8000'), timeout=4)"]

# SIGTERM: readiness turns 503, in-flight requests finish (NMT_GRACE_PERIOD), exit 0.
# Give `docker stop` more time than the grace period: docker stop -t 30 / stop_grace_period.
STOPSIGNAL SIGTERM
CMD ["nmt", "serve"]
