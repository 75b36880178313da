#!/usr/bin/env bash
# Creates .venv with the pinned Python packages the compatibility tests use.
# Idempotent: reinstalls only when requirements change.
set -euo pipefail
cd "$(dirname "$0")/.."
req=tests/compat/requirements.txt
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! cmp -s "$req" .venv/.installed 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" .venv/.installed
fi
