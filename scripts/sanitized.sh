#!/usr/bin/env bash
# usage: scripts/sanitized.sh REPORT_DIR COMMAND...
# Runs COMMAND (a test of a sanitizer build) with the reports of the sanitizers, its own and
# those of every process it starts, written under REPORT_DIR instead of to stderr: a server
# that a test starts sends its stderr to /dev/null, and a race it found would go unseen. Prints
# the reports and fails when there are any; otherwise exits as COMMAND did (77: skipped).
set -u
dir=$1
shift
rm -rf "$dir"
mkdir -p "$dir"
for v in ASAN_OPTIONS TSAN_OPTIONS UBSAN_OPTIONS; do
  export "$v=${!v:+${!v}:}log_path=$dir/report"
done
"$@"
rc=$?
if [ "$rc" -gt 128 ]; then
  echo "sanitized: $1 was killed by signal $((rc - 128)) ($(kill -l "$((rc - 128))"))"
fi
if compgen -G "$dir/report*" >/dev/null; then
  for f in "$dir"/report*; do
    echo "=== sanitizer report $f"
    cat "$f"
  done
  echo "sanitized: the sanitizers reported the errors above"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] && rc=1
fi
exit "$rc"
