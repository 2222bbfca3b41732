#!/usr/bin/env bash
# The test command: set up, build, and run every test (unit, integration, fuzz, style).
set -eu
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${STRATA_BUILD_DIR:-build}
cd "$build"
ctest --output-on-failure -j "$(nproc)" --timeout 900
