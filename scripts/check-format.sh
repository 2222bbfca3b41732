#!/usr/bin/env bash
# Fails when any tracked C++ file differs from what clang-format would write.
set -eu
clang_format=${1:-clang-format}
files=$(git ls-files '*.cc' '*.h' 2>/dev/null || find src tools tests bench -name '*.cc' -o -name '*.h')
[ -n "$files" ] || exit 0
bad=0
for f in $files; do
  if ! "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: clang-format -i $f)"
    bad=1
  fi
done
exit $bad
