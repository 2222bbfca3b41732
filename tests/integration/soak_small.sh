#!/usr/bin/env bash
# The soak of bench/soak.sh, small: 400 requests at 32 clients, half streamed, a tenth of the
# clients going away mid-request: no unexpected error, every slot idle at the end, the server
# still up. The RSS is reported, not judged: a run this short says nothing about growth (the
# full soak does).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
command -v curl >/dev/null || { echo "soak_small: curl not found, skipping"; exit 77; }
# Under a sanitizer (STRATA_TEST_SANITIZED=1), 160 requests after 40: as many clients, fewer
# rounds.
requests=400 warmup=100
if [ "${STRATA_TEST_SANITIZED:-0}" = 1 ]; then requests=160 warmup=40; fi
SOAK_RSS_CHECK=0 bash "$here/../../bench/soak.sh" "$1" $requests 32 $warmup
