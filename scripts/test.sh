#!/usr/bin/env bash
# The test command: set up, build, and run every test (unit, integration, fuzz, style) in the
# Release build, the unit and integration tests again under AddressSanitizer + UBSan (with the
# libFuzzer targets, build-asan/), and the tests of code that threads share under
# ThreadSanitizer (build-tsan/). The sanitizer builds use clang; without it they are skipped
# with a message. One ctest runs the tests of all three folders: its summary is the last line.
set -eu
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${STRATA_BUILD_DIR:-build}
jobs=$(nproc)
more=()
if command -v clang++ >/dev/null; then
  for san in address:asan thread:tsan; do
    dir="$PWD/$build-${san#*:}"
    san=${san%:*}
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
      -DSTRATA_SANITIZE=$san -DSTRATA_BENCH=OFF -DSTRATA_UNITY="${STRATA_UNITY:-ON}" >/dev/null
    cmake --build "$dir" -j "$jobs"
    more+=("$dir")
  done
else
  echo "test: clang++ not found, the sanitizer builds are skipped (apt-get install clang)"
fi
more_dirs=$(IFS=';' && echo "${more[*]}")
cmake -S . -B "$build" -DSTRATA_MORE_TEST_DIRS="$more_dirs" >/dev/null
cd "$build"
# One more test than cores: many tests wait on sockets and child processes, and the fuzz
# targets run for a fixed time whatever CPU they get.
ctest --output-on-failure -j "$((jobs + 1))" --timeout 900
