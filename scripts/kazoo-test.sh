#!/usr/bin/env bash
# Runs kazoo's own test suite (pinned in tests/compat/requirements.txt)
# against 3-server Meridian clusters that kazoo's harness starts through
# tests/compat/javashim/java. Extra arguments go to pytest (e.g. -k lock).
# Uses ports 20000-20030, as kazoo's harness does by default.
# MERIDIAN_KEYSPACE=/kazootests puts every test's chroot in a regional
# keyspace (tests/compat/meridian_keyspace.py).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/pyenv.sh
go build -o bin/meridian ./cmd/meridian
exec .venv/bin/python tests/compat/kazoo_suite.py bin/meridian "$@"
