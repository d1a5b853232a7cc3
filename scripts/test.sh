#!/usr/bin/env bash
# README Quickstart command 2: install everything (CPU torch first, from the local wheel) and run the test suite.
# Skip the slow suites locally with: bash scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/sandbox-deps.sh
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -c constraints.txt -e ".[train,ray,embed,dev]"
.venv/bin/python -m pytest "$@"
