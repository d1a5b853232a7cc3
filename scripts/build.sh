#!/usr/bin/env bash
# README Quickstart command 1: install the data pipeline (no torch) and build the bundled sample offline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/sandbox-deps.sh
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/pip install -q -c constraints.txt -e .
.venv/bin/gust build "$@"
echo "gust is installed in .venv: run \`source .venv/bin/activate\` (or use .venv/bin/gust); next steps: README Quickstart"
