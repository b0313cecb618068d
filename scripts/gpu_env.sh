#!/usr/bin/env bash
# The Python environment of cem-ablate on a GPU machine that has torch, lightning,
# transformers, scipy and pytest but cannot reach a package index (this workplace's
# `cuda` image: Python 3.12, torch 2.11+cu130). The missing packages travel as wheels.
#
#   scripts/gpu_env.sh download     # here, with an index: the wheels into .whl/ (~20 MB, git-ignored)
#   source scripts/gpu_env.sh       # there, in the repo root: install into /tmp/site, export PYTHONPATH
#
# The list is the dependency closure of optuna and mlflow-skinny (SQLite tracking
# store: SQLAlchemy + alembic) minus what the image already has, resolved with
# `pip install --dry-run --report --python-version 3.12 --only-binary=:all:`.
# `datasets` travels too (with dill and multiprocess): the image's own pyarrow (25.0.1, seen
# 2026-11-25) serves it, so text sources (the stdlib corpus of scripts/gpu_mup_evidence.sh) load. cem-ablate itself is not installed: the repo root goes on
# PYTHONPATH, and a dist-info with the package's entry points (the registry finds
# the built-in components through them) goes into /tmp/site.

WHEELS=(
  optuna==5.0.0 mlflow-skinny==3.17.2 alembic==1.20.1 sqlalchemy==2.1.9 mako==1.4.3 colorlog==6.12.0
  cachetools==7.3.2 databricks-sdk==0.156.0 google-auth==2.62.2 pyasn1==0.6.5 pyasn1_modules==0.4.2
  cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0
  pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5
  typing_extensions==4.16.0 gitpython==3.2.1 gitdb==4.0.12 smmap==5.0.3 importlib_metadata==9.1.0
  opentelemetry-api==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2
  opentelemetry-semantic-conventions==0.66b2 protobuf==7.36.2 python-dotenv==1.2.4 sqlparse==0.6.1
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
)

if [[ "${1:-}" == "download" ]]; then
  set -euo pipefail
  mkdir -p .whl .git/info
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
  du -sh .whl
  exit 0
fi

# sourced on the GPU machine
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || return 1 2>/dev/null || exit 1
mkdir -p /tmp/site/cem_ablate-0.1.0.dist-info
printf 'Metadata-Version: 2.1\nName: cem-ablate\nVersion: 0.1.0\n' > /tmp/site/cem_ablate-0.1.0.dist-info/METADATA
printf '[cem_ablate.components]\nbuiltin = components\n\n[console_scripts]\ncem-ablate = cem_ablate.cli.main:main\n' \
  > /tmp/site/cem_ablate-0.1.0.dist-info/entry_points.txt
mkdir -p /tmp/site/bin
printf '#!/bin/sh\nexec python3 -m cem_ablate.cli.main "$@"\n' > /tmp/site/bin/cem-ablate
chmod +x /tmp/site/bin/cem-ablate
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/site/bin:$PATH"
export MLFLOW_DISABLE_TELEMETRY=true HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export CEM_ABLATE_CACHE="${CEM_ABLATE_CACHE:-$PWD/.cache/cem-ablate}"  # inductor + token caches (git-ignored .cache/)
