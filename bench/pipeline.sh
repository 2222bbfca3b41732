#!/usr/bin/env bash
# The split under load: two 1-thread workers, `strata serve` with the model's layers split over
# them (directly, or through a `strata proxy` link in front of each), and the load client
# (`strata bench serve`), for every arm x pipeline groups N x concurrency C x link. Prints one
# row per (arm, N, C, link): output tok/s, mean TTFT and TPOT, and per decode step (both stages
# together, from the differences of the server's strata_rpc_* counters over the load) the RPC
# messages, round trips and KiB sent and received; then the greedy md5 of one fixed request
# per (arm, N, link), and whether they are all identical and equal to a run without a split.
#
#   bench/pipeline.sh STRATA [--quick] [--model FILE] [--n-embd 1024] [--n-layer 8]
#       [--n-head 16] [--n-head-kv 4] [--n-ff 2816] [--n-vocab 512] [--dtype q8_0]
#       [--groups "1 2 4"] [--concurrency "8 32"] [--links "direct 1:1000"] [--rounds 2]
#       [--prompt-tokens 32] [--max-tokens 96] [--md5-tokens 64] [--no-local] [--keep DIR]
#       [--max-others PCT] [--arms "NAME ..."]
#
# A link is "direct" (no proxy) or DELAY_MS:MBIT: a proxy in front of each worker, delaying each
# direction by DELAY_MS (one way) and carrying at most MBIT Mbit/s each way. Each (arm, N, link)
# is one server, loaded once per C with ROUNDS x C requests. --quick is a smoke run (a small
# model, N 1 and 2, C 4, a few short requests). Without --no-local, a server without a split
# (`-t 2`) gives the reference md5 and reference rows. Everything runs on this machine: the
# workers, the server, the proxies and the load client share its cores; the last column says
# how much of the CPU other work took during each row, and --max-others PCT waits for and
# re-runs rows that other work disturbed more than that. --arms runs only the arms named.
#
# Binds 127.0.0.1 only; stops everything it starts. Needs curl and jq.
set -eu

# The arms: "NAME|extra flags of strata serve|environment of strata serve". A new way to run the
# split is one line here. Star: the hidden state goes worker -> server -> worker; hand-off
# (the default): straight from worker to worker.
arms=(
  "cpu-sampling/star||STRATA_RPC_HANDOFF=0"
  "backend-sampling/star|--backend-sampling|STRATA_RPC_HANDOFF=0"
  "cpu-sampling/hand-off||"
  "backend-sampling/hand-off|--backend-sampling|"
)

strata=${1:?usage: bench/pipeline.sh STRATA [options] (see the head of this file)}
shift
model=""
n_embd=1024 n_layer=8 n_head=16 n_head_kv=4 n_ff=2816 n_vocab=512 dtype=q8_0
groups="1 2 4"
concurrency="8 32"
links="direct 1:1000"
rounds=2 prompt=32 gen=96 md5_tokens=64
local_run=1
keep=""
max_others=""
only_arms=""
quick() {
  n_embd=256 n_layer=4 n_head=8 n_head_kv=4 n_ff=512 n_vocab=512 dtype=q8_0
  groups="1 2" concurrency="4" rounds=1 prompt=16 gen=16 md5_tokens=16
}
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick; shift; continue ;;
    --no-local) local_run=0; shift; continue ;;
  esac
  [ $# -ge 2 ] || { echo "bench/pipeline.sh: $1 needs a value" >&2; exit 1; }
  case $1 in
    --model) model=$2 ;;
    --n-embd) n_embd=$2 ;;
    --n-layer) n_layer=$2 ;;
    --n-head) n_head=$2 ;;
    --n-head-kv) n_head_kv=$2 ;;
    --n-ff) n_ff=$2 ;;
    --n-vocab) n_vocab=$2 ;;
    --dtype) dtype=$2 ;;
    --groups) groups=$2 ;;
    --concurrency) concurrency=$2 ;;
    --links) links=$2 ;;
    --rounds) rounds=$2 ;;
    --prompt-tokens) prompt=$2 ;;
    --max-tokens) gen=$2 ;;
    --md5-tokens) md5_tokens=$2 ;;
    --keep) keep=$2 ;;
    --max-others) max_others=$2 ;;
    --arms) only_arms=$2 ;;
    *) echo "bench/pipeline.sh: unknown option $1" >&2; exit 1 ;;
  esac
  shift 2
done
for tool in curl jq; do
  command -v $tool >/dev/null || { echo "bench/pipeline.sh: needs $tool" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$keep" ]; then mkdir -p "$keep" && cp -r "$tmp"/. "$keep"/; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
die() { echo "bench/pipeline.sh: $*" >&2; exit 1; }
note() { echo "$*" >&2; }

# start NAME TIMEOUT_S COMMAND...: runs COMMAND in the background (stdout in NAME.out, stderr in
# NAME.err) and waits for its "listening on ADDRESS" line; sets $addr and $last_pid.
start() {
  local name=$1 limit=$2
  shift 2
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  last_pid=$!
  pids+=("$last_pid")
  addr=""
  for _ in $(seq 1 $((limit * 20))); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$tmp/$name.out" | head -n 1)
    [ -n "$addr" ] && return 0
    kill -0 "$last_pid" 2>/dev/null || { tail -n 5 "$tmp/$name.err" >&2; die "$name exited at start"; }
    sleep 0.05
  done
  die "$name did not start listening within $limit s"
}

stop() {  # PID
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Sums of the server's RPC counters over every worker: messages, round trips, bytes sent,
# bytes received, graphs sent, workers.
rpc_totals() {
  curl -sf "$1/metrics" | awk '
    /^strata_rpc_messages_total\{/ { m += $NF }
    /^strata_rpc_round_trips_total\{/ { r += $NF }
    /^strata_rpc_bytes_total\{.*direction="sent"/ { s += $NF }
    /^strata_rpc_bytes_total\{.*direction="received"/ { v += $NF }
    /^strata_rpc_decode_steps_total\{/ { g += $NF; n++ }
    END { printf "%.0f %.0f %.0f %.0f %.0f %.0f\n", m, r, s, v, g, n }'
}

# cpu_ticks [SHELL_PID]: CPU time in clock ticks, "BUSY TOTAL OWN": the machine's busy and total
# (busy + idle) time over all cores, and the time of this script's processes (the script, its
# live children, and the children they have waited for, such as the load client, which the
# subshell SHELL_PID ran). BUSY - OWN is what other work took.
cpu_ticks() {
  local own=0 p
  for p in $$ ${1:-} "${pids[@]}"; do
    # utime stime cutime cstime: fields 14-17, counted after the ")" that ends the name.
    [ -r "/proc/$p/stat" ] &&
      own=$((own + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13 + $14 + $15}')))
  done
  # Busy: user, nice, system, and steal (the time the host gave its other guests: other work
  # too). Interrupts are left out: loopback traffic is ours, and the kernel books much of it
  # there, not to a process.
  awk -v own=$own '/^cpu / { busy = $2 + $3 + $4 + $9; print busy, busy + $5 + $6 + $7 + $8, own }' \
    /proc/stat
}

# The md5 of the greedy continuation of one fixed prompt; "error" when the request fails.
greedy_md5() {
  local body
  body=$(printf '{"prompt":"Once upon a time","n_predict":%d,"temperature":0,"ignore_eos":true,"cache_prompt":false}' "$md5_tokens")
  local content
  if curl -sf "$1/completion" -H 'Content-Type: application/json' -d "$body" >"$tmp/md5.json" &&
    content=$(jq -e -r .content "$tmp/md5.json"); then
    printf '%s' "$content" | md5sum | cut -c1-32
  else
    echo error
  fi
}

# The machine's busy share (percent of all cores) over the next half second. Between rows the
# benchmark's own processes are idle, so this is other work.
busy_now() {
  local a b
  a=$(awk '/^cpu / { print $2 + $3 + $4 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
  sleep 0.5
  b=$(awk '/^cpu / { print $2 + $3 + $4 + $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
  echo "$a $b" | awk '{ t = $4 - $2; printf "%.0f\n", (t > 0 ? 100 * ($3 - $1) / t : 0) }'
}

# run_row LABEL URL N LINK C: one run of the load client; prints the row's fields:
# "tok/s TTFT TPOT errors msg/step RT/step KiB-sent KiB-received others%".
run_row() {
  local label=$1 url=$2 n=$3 link=$4 c=$5
  local json=$tmp/load-${label//\//_}-$n-$c-${link//:/_}.json
  local before after cpu_before others perf step rc=0 self=$BASHPID
  before=$(rpc_totals "$url")
  cpu_before=$(cpu_ticks "$self")
  # Failed requests are counted in the row (exit status 2); any other failure stops the run.
  "$strata" bench serve --url "$url" -c "$c" -n $((rounds * c)) --prompt-tokens "$prompt" \
    --max-tokens "$gen" --json "$json" >"${json%.json}.txt" 2>&1 || rc=$?
  if [ $rc != 0 ] && { [ $rc != 2 ] || [ ! -s "$json" ]; }; then
    cat "${json%.json}.txt" >&2
    die "the load client failed ($label N=$n C=$c link=$link)"
  fi
  others=$(echo "$cpu_before $(cpu_ticks "$self")" | awk '{
    busy = $4 - $1; total = $5 - $2; own = $6 - $3; o = total > 0 ? 100 * (busy - own) / total : 0
    printf "%.0f\n", (o < 0 ? 0 : o) }')
  after=$(rpc_totals "$url")
  perf=$(jq -r '"\(.output_tok_s) \(.ttft_ms.mean) \(.tpot_ms.mean) \(.errors)"' "$json")
  step=$(echo "$before $after" | awk '{
    if ($12 == 0) { print "- - - -"; exit }
    steps = ($11 - $5) / $12
    if (steps <= 0) { print "- - - -"; exit }
    printf "%.2f %.2f %.1f %.1f\n", ($7 - $1) / steps, ($8 - $2) / steps,
           ($9 - $3) / steps / 1024, ($10 - $4) / steps / 1024 }')
  echo "$perf $step $others"
}

# load LABEL URL N LINK KEY: a row per C appended to $tmp/rows, each after KEY N C (the order
# of the table: arm, link, N, C). With --max-others PCT, a row waits (up to 2 minutes) for the
# machine to be quieter than PCT before it starts, and runs up to 3 times while other work took
# more than PCT of the CPU during it; the attempt with the least other work is kept.
load() {
  local label=$1 url=$2 n=$3 link=$4 key=$5 c
  for c in $concurrency; do
    local best="" row
    for _ in 1 2 3; do
      if [ -n "$max_others" ]; then
        local waited=0
        while [ "$(busy_now)" -gt "$max_others" ] && [ $waited -lt 240 ]; do
          waited=$((waited + 1))
        done
      fi
      note "  $label N=$n C=$c link=$link: $((rounds * c)) requests"
      row=$(run_row "$label" "$url" "$n" "$link" "$c")
      if [ -z "$best" ] || [ "${row##* }" -lt "${best##* }" ]; then best=$row; fi
      if [ -z "$max_others" ] || [ "${best##* }" -le "$max_others" ]; then break; fi
      note "    other work took ${row##* }% of the CPU: again"
    done
    echo "$key $n $c $label $n $c $link $best" >>"$tmp/rows"
  done
}

slots=0
for c in $concurrency; do [ "$c" -gt "$slots" ] && slots=$c; done
ctx=$((slots * (prompt + gen + md5_tokens + 16)))
if [ -z "$model" ]; then
  model=$tmp/model.gguf
  "$strata" gguf gen -o "$model" --n-embd "$n_embd" --n-layer "$n_layer" --n-head "$n_head" \
    --n-head-kv "$n_head_kv" --n-ff "$n_ff" --n-vocab "$n_vocab" --dtype "$dtype" --seed 1 \
    >/dev/null || die "gguf gen failed"
  shape="synthetic llama, n_embd $n_embd, $n_layer layers, n_ff $n_ff, n_vocab $n_vocab, $dtype"
else
  shape=$(basename "$model")
fi
size_mib=$(($(stat -c %s "$model") / 1048576))
: >"$tmp/rows"
: >"$tmp/md5s"
# Other work on the machine moves every number here: the load averages are part of the result.
load_before=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")

ref_md5=""
if [ $local_run = 1 ]; then
  note "local server (no split, -t 2)"
  start local-serve 600 "$strata" serve -m "$model" -np "$slots" -c "$ctx" -t 2 --metrics --port 0
  url=http://127.0.0.1:${addr##*:}
  load "local" "$url" 1 "-" "0 0"
  ref_md5=$(greedy_md5 "$url")
  stop "$last_pid"
fi

start worker-a 60 "$strata" worker -t 1 --port 0 --cache "$tmp/cache-a"
worker_a=$addr
start worker-b 60 "$strata" worker -t 1 --port 0 --cache "$tmp/cache-b"
worker_b=$addr

# Every link's proxies first, so that the links of one (arm, N) run back to back: their ratio
# is then measured under the same load of the machine.
declare -A rpc_of
for link in $links; do
  if [ "$link" = direct ]; then
    rpc_of[$link]="$worker_a,$worker_b"
  else
    delay=${link%%:*} mbit=${link#*:}
    start "proxy-a-$link" 60 "$strata" proxy --to "$worker_a" --delay-ms "$delay" --mbit "$mbit"
    proxy_a=$addr
    start "proxy-b-$link" 60 "$strata" proxy --to "$worker_b" --delay-ms "$delay" --mbit "$mbit"
    rpc_of[$link]="$proxy_a,$addr"
  fi
done
arm_i=0
for arm in "${arms[@]}"; do
  arm_i=$((arm_i + 1))
  IFS='|' read -r name flags arm_env <<<"$arm"
  if [ -n "$only_arms" ] && [[ " $only_arms " != *" $name "* ]]; then continue; fi
  for n in $groups; do
    link_i=0
    for link in $links; do
      link_i=$((link_i + 1))
      note "$name, N=$n, link $link"
      # shellcheck disable=SC2086
      start "serve-${name//\//_}-$n-${link//:/_}" 600 env $arm_env "$strata" serve -m "$model" -np "$slots" \
        -c "$ctx" -t 1 --pipeline-groups "$n" --metrics --rpc "${rpc_of[$link]}" \
        --device RPC0,RPC1 -ts 1,1 --port 0 $flags
      url=http://127.0.0.1:${addr##*:}
      load "$name" "$url" "$n" "$link" "$arm_i $link_i"
      echo "$name $n $link $(greedy_md5 "$url")" >>"$tmp/md5s"
      stop "$last_pid"
    done
  done
done

echo "# bench/pipeline.sh: $shape ($size_mib MiB)"
echo "# 2 workers with 1 thread each, the layers split 1:1; server -t 1; $(nproc) cores on one machine"
echo "# $prompt-token prompts, $gen tokens generated, $rounds x C requests per row; link: direct, or a"
echo "# proxy per worker with DELAY_MS:MBIT each way. Per step: one decode step of both stages."
echo "# load average (1, 5, 15 min) before: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")"
echo
echo "| arm | N | C | link | tok/s | TTFT ms | TPOT ms | msg/step | RT/step | KiB sent/step | KiB recv/step | errors | others' CPU |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
sort -k1,1n -k2,2n -k3,3n -k4,4n "$tmp/rows" | cut -d' ' -f5- >"$tmp/table"
while read -r label n c link toks ttft tpot errors msg rt sent recv others; do
  printf '| %s | %s | %s | %s | %.1f | %.0f | %.1f | %s | %s | %s | %s | %s | %s%% |\n' "$label" "$n" \
    "$c" "$link" "$toks" "$ttft" "$tpot" "$msg" "$rt" "$sent" "$recv" "$errors" "$others"
done <"$tmp/table"

# Throughput against the first N of the list, and against the first link (direct by default).
awk -v groups="$groups" -v links="$links" -v cs="$concurrency" '
  $1 != "local" { tok[$1 " " $2 " " $3 " " $4] = $5; if (!($1 in seen)) { seen[$1] = 1; arm[++na] = $1 } }
  END {
    ng = split(groups, g, " "); nl = split(links, l, " "); nc = split(cs, c, " ")
    if (ng > 1) {
      printf "\n| arm | link | C |"; for (i = 2; i <= ng; i++) printf " N=%s / N=%s |", g[i], g[1]
      printf "\n|---|---|---|"; for (i = 2; i <= ng; i++) printf "---|"; printf "\n"
      for (a = 1; a <= na; a++) for (j = 1; j <= nl; j++) for (k = 1; k <= nc; k++) {
        base = tok[arm[a] " " g[1] " " c[k] " " l[j]]; if (base == "") continue
        printf "| %s | %s | %s |", arm[a], l[j], c[k]
        for (i = 2; i <= ng; i++) printf " %.2f |", tok[arm[a] " " g[i] " " c[k] " " l[j]] / base
        printf "\n"
      }
    }
    if (nl > 1) {
      printf "\n| arm | N | C |"; for (j = 2; j <= nl; j++) printf " %s / %s |", l[j], l[1]
      printf "\n|---|---|---|"; for (j = 2; j <= nl; j++) printf "---|"; printf "\n"
      for (a = 1; a <= na; a++) for (i = 1; i <= ng; i++) for (k = 1; k <= nc; k++) {
        base = tok[arm[a] " " g[i] " " c[k] " " l[1]]; if (base == "") continue
        printf "| %s | %s | %s |", arm[a], g[i], c[k]
        for (j = 2; j <= nl; j++) printf " %.2f |", tok[arm[a] " " g[i] " " c[k] " " l[j]] / base
        printf "\n"
      }
    }
  }' "$tmp/table"
echo
echo "greedy md5 of \"Once upon a time\" + $md5_tokens tokens:"
[ -n "$ref_md5" ] && echo "  local (no split): $ref_md5"
while read -r label n link md5; do echo "  $label N=$n link=$link: $md5"; done <"$tmp/md5s"
first=$(head -n 1 "$tmp/md5s" | awk '{print $4}')
same=yes
while read -r _ _ _ md5; do [ "$md5" = "$first" ] && [ "$md5" != error ] || same=no; done <"$tmp/md5s"
if [ -n "$ref_md5" ]; then
  [ "$first" = "$ref_md5" ] || same=no
  echo "identical across every arm, N and link, and equal to the local run: $same"
else
  echo "identical across every arm, N and link: $same"
fi
[ $same = yes ]
