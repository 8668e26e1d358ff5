#!/usr/bin/env bash
# Set up everything gossamer needs on a fresh machine: Java 17 for Spark (apt, when `java` is
# missing), a virtualenv in .venv, and the Python dependencies (pyspark, pyarrow, ...).
# Idempotent: a second run only checks that nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "gossamer needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1)); set PYTHON=..." >&2
  exit 1
fi

if ! command -v java >/dev/null 2>&1; then
  echo "setup: java not found, installing OpenJDK 17 for Spark"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get here; install Java 17 yourself (Spark needs it)" >&2
    exit 1
  fi
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "setup: /usr/bin/chromium not found, installing Debian's chromium for the browser tests"
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "setup: no apt-get here; install chromium as /usr/bin/chromium yourself" \
      "(tests/test_browser.py skips without it)" >&2
  else
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi

stamp=.venv/.gossamer-setup
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python dependencies into .venv (first time takes a minute)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,bench]'
  echo "$want" > "$stamp"
fi
# the Spark driver's class archive (gossamer.pipeline.classes, built by .warmup): every later analysis starts
# faster; without it they still run, so a failure here only says so
if ! .venv/bin/python -c 'import sys; from gossamer.pipeline.classes import java_options; sys.exit(0 if java_options() else 1)'; then
  echo "setup: building the Spark driver's class archive (once, about a minute)"
  .venv/bin/python -c 'from gossamer.pipeline.warmup import build_class_archive; build_class_archive()' >/dev/null 2>&1 \
    || echo "setup: no Spark class archive was built (analyses start a few seconds slower)"
fi
echo "setup: ok ($(.venv/bin/python --version), $(java -version 2>&1 | head -n1))"
