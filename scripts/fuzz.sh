#!/usr/bin/env bash
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]
# Builds the libFuzzer targets (src/**/*_fuzz.cc) with clang, AddressSanitizer and UBSan in
# their own directory (STRATA_FUZZ_DIR, default build-fuzz) and runs each for SECONDS (default
# 60). Targets: protocol (RPC message decoders), graph (graph deserialiser); default both.
# Exits 77 (skipped) when clang or libFuzzer is not installed; 1 when a target finds a crash.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(protocol graph)
out=${STRATA_FUZZ_DIR:-build-fuzz}
cxx=${STRATA_FUZZ_CXX:-clang++}
mkdir -p "$out"

if ! command -v "$cxx" >/dev/null; then
  echo "fuzz: $cxx not found, skipping (apt-get install clang libclang-rt-dev)"
  exit 77
fi
probe="$out/probe.cc"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe"
if ! "$cxx" -fsanitize=fuzzer,address "$probe" -o "$out/probe" 2>/dev/null; then
  echo "fuzz: libFuzzer not available to $cxx, skipping (apt-get install libclang-rt-dev)"
  exit 77
fi

flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -Isrc)

build() {  # name, sources..., -- libs...
  local name=$1
  shift
  echo "fuzz: building $name"
  "$cxx" "${flags[@]}" "$@" -o "$out/$name"
}

# src/core as objects (the dtype table pulls in the kernels), each SIMD file with its flags as
# CMakeLists.txt gives them; prints the object paths.
core_objects() {
  mkdir -p "$out/core"
  local src obj extra
  for src in src/core/*.cc; do
    case $src in *_test.cc | *_fuzz.cc) continue ;; esac
    obj="$out/core/$(basename "${src%.cc}").o"
    extra=()
    case $src in *_avx2.cc) extra=(-mavx2 -mfma -mf16c) ;; esac
    "$cxx" "${flags[@]}" -ffp-contract=off "${extra[@]}" -c "$src" -o "$obj" >&2 || return 1
    echo "$obj"
  done
}

# A valid graph as a seed, so that the fuzzer starts past the header checks: out = a + b over
# 8 floats (layout in src/graph/serialize.h).
seed_graph() {
  python3 - "$1" <<'PY'
import struct, sys
def tensor(off):
    return struct.pack('<QQII4q4Q', 1, off, 0, 0, 8, 1, 1, 1, 4, 32, 32, 32)
node = struct.pack('<I5iI4i4f', 3, 0, 1, -1, -1, -1, 2, 0, 0, 0, 0, 0, 0, 0, 0)
data = struct.pack('<4I', 0x31524753, 1, 3, 1) + tensor(0) + tensor(32) + tensor(64) + node
open(sys.argv[1], 'wb').write(data)
PY
}

status=0
for t in "${targets[@]}"; do
  corpus="$out/corpus-$t"
  mkdir -p "$corpus"
  case $t in
    protocol)
      build protocol_fuzz src/rpc/protocol_fuzz.cc src/rpc/protocol.cc -lxxhash
      printf '\x00\x01\x00\x00\x00\x00\x00\x00\x00' >"$corpus/seed-hello"
      bin=protocol_fuzz
      ;;
    graph)
      core_objects >"$out/core.list" || { echo "fuzz: src/core does not build"; exit 1; }
      mapfile -t core <"$out/core.list"
      build graph_fuzz src/graph/serialize_fuzz.cc src/graph/serialize.cc src/graph/graph.cc \
        src/graph/op_table.cc "${core[@]}" -lpthread
      seed_graph "$corpus/seed-add"
      bin=graph_fuzz
      ;;
    *)
      echo "fuzz: unknown target '$t' (protocol, graph)"
      exit 2
      ;;
  esac
  echo "fuzz: running $bin for ${seconds}s"
  if ! "$out/$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/$bin-" "$corpus" 2>"$out/$bin.log"; then
    tail -n 40 "$out/$bin.log"
    echo "fuzz: $bin FAILED (log: $out/$bin.log)"
    status=1
  else
    grep -E "stat::number_of_executed_units|Done" "$out/$bin.log" | head -3 || true
    echo "fuzz: $bin ok"
  fi
done
exit $status
