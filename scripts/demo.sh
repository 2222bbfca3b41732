#!/usr/bin/env bash
# The main job: set up, build, write a synthetic model and generate text with it; then, when
# the small real model is beside the checkout, let it tell a story.
set -eu
cd "$(dirname "$0")/.."
bash scripts/setup.sh
build=${STRATA_BUILD_DIR:-build}
model=$build/demo-q8_0.gguf
"$build"/strata gguf gen -o "$model" --n-embd 512 --n-layer 4 --n-head 8 --n-head-kv 4 \
  --n-ff 1408 --n-vocab 512 --dtype q8_0 --seed 1
echo "== a synthetic model (random weights: its text is noise by design)"
"$build"/strata run -m "$model" -p "Hello" -n 32 --temp 0 --ignore-eos
story=../shared/models/stories260K.gguf
if [ -f "$story" ]; then
  echo "== stories260K, a small real model"
  "$build"/strata run -m "$story" -p "Once upon a time" -n 64 --temp 0
fi
