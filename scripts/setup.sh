#!/usr/bin/env bash
# Installs the Debian packages that strata builds and tests with (only what is missing), then
# configures and builds it in build/. Run as root on Debian 12.
set -eu
cd "$(dirname "$0")/.."

packages=(g++ cmake ninja-build ccache git libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev nlohmann-json3-dev libxxhash-dev libssl-dev libpcre2-dev pkg-config
  clang-format clang libclang-rt-dev python3 python3-numpy python3-jinja2 python3-jsonschema
  libucx-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/strata-ccache}
build=${STRATA_BUILD_DIR:-build}
# A unity build unless STRATA_UNITY=OFF (CMakeLists.txt says why).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_UNITY="${STRATA_UNITY:-ON}" \
  >/dev/null
jobs=$(nproc)
cmake --build "$build" -j "$jobs"
