#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# make bench: nbdkit-throttle side by side with no filter and with
# nbdkit's rate filter, in one run.  See BENCHMARKS.md for the cases.
#
# Configurations alternate within each round (and the order rotates
# from round to round) so that machine noise hits all of them alike;
# ratios are taken within a round and the median over rounds is
# reported.  Every server is a fresh nbdkit; its memory is written once
# before a measured run so no configuration pays for page faults that
# another does not.
#
# Environment (set by 'make bench'): THROTTLE_FILTER, THROTTLE_LOAD,
# TEST_PLUGIN (tests/.libs/test-inflight-plugin.so), abs_top_srcdir,
# abs_top_builddir, NBDKIT.
#
# Knobs:
#   BENCH_TIME          seconds per measured run (default 2)
#   BENCH_TIME_2M       seconds per run of case 2m (default 2.5 x
#                       BENCH_TIME: its 1M job completes few writes a
#                       second, and its maximum latency needs many)
#   BENCH_TIME_1P       seconds per pinned 4K run of case 1 (default 2.5
#                       x BENCH_TIME: the ratio the goal is judged on)
#   BENCH_ROUNDS        rounds (default 3; case 1 gets BENCH_ROUNDS1,
#                       default 2 more)
#   BENCH_ADAPT_TIME    seconds per run of case 5, a whole number, at
#                       least 2 (default 10; 2 for a smoke run)
#   BENCH_CASES         which cases to run, of "1 instr 2 2m 4 5" (the
#                       default: all); spaces or commas between them
#   INSTR_REPEAT        rounds of case instr (default 3, 1 for a smoke
#                       run)
#   BENCH_OUT           where BENCHMARKS.md and bench/*.svg go.  Default:
#                       abs_top_srcdir for a full run, but
#                       abs_top_builddir/bench-out for a smoke run or a
#                       subset of the cases, so that those never
#                       overwrite the committed report
#   BENCH_SMOKE=1       a short run that only checks the plumbing:
#                       BENCH_TIME=0.5, one round, BENCH_IDLE=warn
#                       (each still overridable)
# Instructions per request alone, to compare two builds in a few
# minutes (callgrind: the machine's load does not change the counts,
# so no idle check; one valgrind at a time, though):
#   make bench BENCH_CASES=instr      (report in bench-out/BENCHMARKS.md,
#                                      numbers in bench-results/instr.tsv)
# The machine must be idle (other work on it is the main noise).
# Before the first run the script samples it: the 1-minute load
# average, and the share of CPU time idle in /proc/stat over a few
# seconds.  When either is over its threshold it waits and samples
# again; when the last try is still busy it stops with a message.
#   BENCH_MAX_LOAD      highest 1-minute load average (default nproc/4)
#   BENCH_MIN_IDLE      lowest CPU idle percentage (default 90)
#   BENCH_IDLE_SECS     length of the CPU sample in seconds (default 3)
#   BENCH_IDLE_RETRIES  samples after the first when busy (default 5)
#   BENCH_IDLE_WAIT     seconds between samples (default 60)
#   BENCH_IDLE=warn     sample and report, but run even when busy
#                       (BENCHMARKS.md then says so); default: check

set -u
: "${THROTTLE_FILTER:?set THROTTLE_FILTER to the built nbdkit-throttle-filter.so}"
: "${THROTTLE_LOAD:?set THROTTLE_LOAD to the built throttle-load}"
: "${abs_top_srcdir:?set abs_top_srcdir}"
: "${abs_top_builddir:?set abs_top_builddir}"
NBDKIT=${NBDKIT:-nbdkit}
TEST_PLUGIN=${TEST_PLUGIN:-$abs_top_builddir/tests/.libs/test-inflight-plugin.so}
die () { echo "bench: $*" >&2; exit 1; }

SMOKE=${BENCH_SMOKE:-0}
case $SMOKE in
  1) T=${BENCH_TIME:-0.5} ROUNDS=${BENCH_ROUNDS:-1} extra1=0 IDLE_MODE=${BENCH_IDLE:-warn}
     T5=${BENCH_ADAPT_TIME:-2} ;;
  0) T=${BENCH_TIME:-2} ROUNDS=${BENCH_ROUNDS:-3} extra1=2 IDLE_MODE=${BENCH_IDLE:-check}
     T5=${BENCH_ADAPT_TIME:-10} ;;
  *) die "BENCH_SMOKE=$SMOKE: expected 0 or 1" ;;
esac
T2M=${BENCH_TIME_2M:-$(awk "BEGIN { print $T * 2.5 }")}
T1P=${BENCH_TIME_1P:-$(awk "BEGIN { print $T * 2.5 }")}
ALL_CASES="1 instr 2 2m 4 5"
CASES=${BENCH_CASES:-$ALL_CASES}
CASES=${CASES//,/ }
MAX_LOAD=${BENCH_MAX_LOAD:-$(awk "BEGIN { print $(nproc) / 4 }")}
MIN_IDLE=${BENCH_MIN_IDLE:-90}
IDLE_SECS=${BENCH_IDLE_SECS:-3}
IDLE_RETRIES=${BENCH_IDLE_RETRIES:-5}
IDLE_WAIT=${BENCH_IDLE_WAIT:-60}
bench_dir=$abs_top_srcdir/bench

for c in $CASES; do
  [[ " $ALL_CASES " = *" $c "* ]] ||
    die "BENCH_CASES: unknown case '$c' (the cases are: $ALL_CASES)"
done
[ -n "${CASES// /}" ] || die "BENCH_CASES names no case (the cases are: $ALL_CASES)"
# want CASE: true when CASE is to run.
want () { [[ " $CASES " = *" $1 "* ]]; }
case $IDLE_MODE in
  check|warn) ;;
  *) die "BENCH_IDLE=$IDLE_MODE: expected check or warn" ;;
esac
for v in BENCH_TIME:$T BENCH_TIME_2M:$T2M BENCH_TIME_1P:$T1P BENCH_MAX_LOAD:$MAX_LOAD \
         BENCH_MIN_IDLE:$MIN_IDLE BENCH_IDLE_SECS:$IDLE_SECS; do
  [[ ${v#*:} =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
    die "${v%%:*}=${v#*:}: expected a number"
done
for v in BENCH_TIME:$T BENCH_TIME_2M:$T2M BENCH_TIME_1P:$T1P BENCH_IDLE_SECS:$IDLE_SECS; do
  awk "BEGIN { exit !(${v#*:} > 0) }" || die "${v%%:*}=${v#*:}: must be more than 0"
done
[[ $ROUNDS =~ ^[0-9]+$ ]] || die "BENCH_ROUNDS=$ROUNDS: expected a whole number"
ROUNDS1=${BENCH_ROUNDS1:-$((ROUNDS + extra1))}
for v in BENCH_ROUNDS1:$ROUNDS1 \
         BENCH_IDLE_RETRIES:$IDLE_RETRIES BENCH_IDLE_WAIT:$IDLE_WAIT; do
  [[ ${v#*:} =~ ^[0-9]+$ ]] || die "${v%%:*}=${v#*:}: expected a whole number"
done
[ "$ROUNDS" -ge 1 ] || die "BENCH_ROUNDS=$ROUNDS: must be at least 1"
[[ $T5 =~ ^[0-9]+$ ]] && [ "$T5" -ge 2 ] ||
  die "BENCH_ADAPT_TIME=$T5: expected a whole number of seconds, at least 2"
[ "$ROUNDS1" -ge 1 ] || die "BENCH_ROUNDS1=$ROUNDS1: must be at least 1"
INSTR_REPEAT=${INSTR_REPEAT:-$([ "$SMOKE" = 1 ] && echo 1 || echo 3)}
[[ $INSTR_REPEAT =~ ^[0-9]+$ ]] && [ "$INSTR_REPEAT" -ge 1 ] ||
  die "INSTR_REPEAT=$INSTR_REPEAT: expected a whole number, at least 1"
# A smoke run or a subset of the cases must not replace the committed
# report with a partial one.
partial=no
[ "$SMOKE" = 1 ] && partial=yes
for c in $ALL_CASES; do want "$c" || partial=yes; done
if [ $partial = yes ]; then
  OUT=${BENCH_OUT:-$abs_top_builddir/bench-out}
else
  OUT=${BENCH_OUT:-$abs_top_srcdir}
fi
for f in "$THROTTLE_FILTER" "$THROTTLE_LOAD"; do
  [ -e "$f" ] || die "$f is not built (run make first)"
done
command -v python3 >/dev/null || die "python3 is needed: apt-get install python3"
command -v gnuplot >/dev/null || die "gnuplot is needed: apt-get install gnuplot-nox"
have_fio=no
if command -v fio >/dev/null && fio --enghelp=nbd >/dev/null 2>&1; then
  have_fio=yes
fi
have_inflight=no
[ -e "$TEST_PLUGIN" ] && have_inflight=yes

res=$abs_top_builddir/bench-results
rm -rf "$res"
mkdir -p "$res" || die "cannot create $res"
index=$res/index.tsv
: > "$index"
tmp=$(mktemp -d /tmp/bench.XXXXXX)
server_pid=
bg_pids=()
cleanup () {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
  [ ${#bg_pids[@]} -gt 0 ] && kill "${bg_pids[@]}" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sock=$tmp/sock
uri="nbd+unix:///?socket=$sock"

# pin on|off: with on, the next servers run on the last CPU and their
# clients on the others (taskset), so that the server's one CPU bounds
# the rate and a ratio is the filter's CPU cost per request.  Needs 2
# CPUs; with fewer, pinned runs are skipped (see case 1).
pin_server=() pin_client=()
pin () {
  local last=$(($(nproc) - 1))
  if [ "$1" = on ]; then
    pin_server=(taskset -c "$last") pin_client=(taskset -c "0-$((last - 1))")
  else
    pin_server=() pin_client=()
  fi
}

# start_server ARGS...: nbdkit in the foreground of a background job, so
# this script knows its pid and it dies with us.  Returns 1 (with
# nbdkit's message in $tmp/server.log) if it does not come up.
start_server () {
  rm -f "$sock"
  "${pin_server[@]}" "$NBDKIT" -f --exit-with-parent -U "$sock" "$@" \
    2>"$tmp/server.log" &
  server_pid=$!
  local i
  for i in $(seq 100); do
    [ -S "$sock" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  wait "$server_pid" 2>/dev/null
  server_pid=
  return 1
}

# stop_server: sets server_rss to nbdkit's peak RSS in KiB (VmHWM),
# then stops it and waits, so that plugins write their state at unload.
# (Not in a $(...) subshell: only this shell can wait for nbdkit.)
stop_server () {
  server_rss=$(awk '/^VmHWM:/ { print $2 }' "/proc/$server_pid/status" 2>/dev/null)
  server_rss=${server_rss:-0}
  kill -TERM "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
}

# prefill SPAN: write the area once so that page faults are not measured.
prefill () {
  "$THROTTLE_LOAD" --sequential -b 1M -q 8 -n "$1" --span "$1" --timeout 60 \
    "$uri" >/dev/null 2>"$tmp/prefill.err" ||
    { cat "$tmp/prefill.err" >&2; return 1; }
}

# record CASE WORKLOAD CONFIG ROUND TOOL RESULT RSS STATE
record () {
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$index"
}

# server_args CONFIG BACKEND...: the nbdkit command line of a configuration.
#   none                no filter
#   throttle:CAP[:MODE] the throttle, capacity CAP, throttle-mode MODE
#   rate:BITS           nbdkit's rate filter
# Filters listed first are outermost, so the throttle (or rate filter)
# always sees requests before the backend's own filters.
server_args () {
  local config=$1 extra=; shift
  # CONFIG+key=value+...: extra filter parameters.
  if [[ $config = *+* ]]; then
    extra=${config#*+}
    extra=${extra//+/ }
    config=${config%%+*}
  fi
  case $config in
    none) echo "$*" ;;
    throttle:*:*)
      local c=${config#throttle:}
      echo "--filter=$THROTTLE_FILTER $* throttle-capacity=${c%%:*} throttle-mode=${c#*:} $extra" ;;
    throttle:*) echo "--filter=$THROTTLE_FILTER $* throttle-capacity=${config#throttle:} $extra" ;;
    # The default burstiness (2 s of tokens) would let a 2 s run go at
    # twice the rate: a short bucket makes the rate what it says.
    rate:*) echo "--filter=rate $* rate=${config#rate:} burstiness=0.1 $extra" ;;
    *) die "unknown configuration $config" ;;
  esac
}

# measure CASE WORKLOAD CONFIG ROUND SPAN "BACKEND" TOOL ARGS...
#   Starts the server for CONFIG over BACKEND, prefills SPAN (unless
#   0), runs TOOL (load or fio) with ARGS, records the result.
measure () {
  measure_once "$@" && return 0
  # A server killed from outside (a shared machine) is noise, not a
  # result: one retry, counted in BENCHMARKS.md; a second failure stops.
  retried=$((retried + 1))
  echo "bench: retrying $1.$2.$3 round $4 once" >&2
  measure_once "$@" || die "$1.$2.$3 round $4 failed twice"
}
retried=0

measure_once () {
  local case=$1 wl=$2 config=$3 round=$4 span=$5 backend=$6 tool=$7
  shift 7
  local tag="$case.$wl.${config//[:\/+=]/_}.$tool.$round" args
  local out=$res/$tag.json state=$res/$tag.state poller=
  # shellcheck disable=SC2086
  args=$(server_args "$config" $backend)
  args=${args//@STATE@/$state}
  # UNITS_POLL=SECS: the units in flight and the requests waiting,
  # sampled that often over the control socket, to tell units left idle
  # while requests wait from those left idle while none does.
  if [ -n "${UNITS_POLL:-}" ] && [[ $config = throttle:* ]]; then
    rm -f "$tmp/ctl"
    args="$args throttle-control=$tmp/ctl"
  fi
  # shellcheck disable=SC2086
  if ! start_server $args; then
    if [[ $config = *:writethrough ]] &&
       grep -q "throttle-mode" "$tmp/server.log"; then
      # writethrough is the filter's only mode when it knows no other.
      echo "  $tag: throttle-mode not accepted; writethrough is the default: running without it"
      # shellcheck disable=SC2086
      args=$(server_args "${config%:writethrough}" $backend)
      args=${args//@STATE@/$state}
    fi
  fi
  # shellcheck disable=SC2086
  if [ -z "$server_pid" ] && ! start_server $args; then
    if grep -Eq "throttle-mode|unknown parameter throttle-" "$tmp/server.log"; then
      record "$case" "$wl" "$config" "$round" "$tool" "unavailable" 0 -
      echo "  $tag: not available: $(grep -m1 -E "throttle-mode|unknown parameter" "$tmp/server.log")"
      return 0
    fi
    cat "$tmp/server.log" >&2
    die "$tag: nbdkit $args did not start"
  fi
  if [ "$span" != 0 ] && ! prefill "$span"; then
    stop_server
    die "$tag: prefill failed"
  fi
  # Writeback acknowledged the prefill before the backend has it: let
  # the pool drain so the measured run starts from an empty pool.
  [[ $config = *writeback* && $span != 0 ]] && sleep 1
  if [ -n "${UNITS_POLL:-}" ] && [[ $config = throttle:* ]]; then
    start_poller "$res/$tag.units" "$UNITS_POLL"
  fi
  local ok=yes
  if [ "$tool" = load ]; then
    "${pin_client[@]}" "$THROTTLE_LOAD" --json --timeout 30 \
      --histogram "$res/$tag.cdf" "$@" \
      "$uri" >"$out" 2>"$res/$tag.err" || ok=no
  else
    # fio chats on stdout ("connected to NBD server"): JSON to a file.
    # json+ adds each job's latency histogram (for case 2m's CDF).
    # Options before the first --name apply to every job: ARGS may
    # bring their own job sections, else they make up one job.
    [[ " $* " = *" --name="* ]] || set -- --name=bench "$@"
    "${pin_client[@]}" fio --output-format=json+ --output="$out" \
      --ioengine=nbd --uri="$uri" \
      --runtime="$(awk "BEGIN { print int(${RUN_TIME:-$T} * 1000) }")ms" \
      --time_based=1 "$@" >"$res/$tag.err" 2>&1 || ok=no
  fi
  stop_poller
  bg_pids=()
  stop_server
  local rss=$server_rss
  if [ $ok = no ]; then
    echo "bench: $tag: the client failed:" >&2
    cat "$res/$tag.err" "$tmp/server.log" >&2
    return 1
  fi
  [ -e "$state" ] || state=-
  record "$case" "$wl" "$config" "$round" "$tool" "$out" "$rss" "$state"
  printf '  %-44s done\n' "$tag"
}

# start_poller OUT [PERIOD]: capacity-poll.py on the server's control
# socket $tmp/ctl, writing OUT, in the caller's $poller (and bg_pids);
# returns once it has created OUT, its time 0, so that the caller's
# load starts then.
start_poller () {
  local out=$1 i
  rm -f "$out"
  python3 "$bench_dir/capacity-poll.py" "$tmp/ctl" "$@" &
  poller=$!
  bg_pids+=("$poller")
  for i in $(seq 500); do
    [ -e "$out" ] && return 0
    kill -0 "$poller" 2>/dev/null || break
    sleep 0.01
  done
  stop_server
  die "$tag: capacity-poll.py did not start"
}

# stop_poller: ends start_poller's poller, if the caller started one.
stop_poller () {
  [ -n "$poller" ] || return 0
  kill "$poller" 2>/dev/null
  wait "$poller" 2>/dev/null
  poller=
}

# rotate N ROUND ITEMS...: ITEMS rotated left by ROUND.
rotate () {
  local r=$2; shift 2
  local n=$#; local a=("$@") i
  for ((i = 0; i < n; i++)); do echo "${a[(i + r) % n]}"; done
}

# sample_idle: sets idle_load (the 1-minute load average), idle_cpu
# (percent of all CPUs' time spent idle or waiting for I/O over
# IDLE_SECS seconds) and idle_steal (percent stolen by the hypervisor,
# which counts as busy), and returns 0 when both are within the
# thresholds.
sample_idle () {
  local a b
  a=$(head -1 /proc/stat)
  sleep "$IDLE_SECS"
  b=$(head -1 /proc/stat)
  idle_load=$(cut -d' ' -f1 /proc/loadavg)
  # cpu user nice system idle iowait irq softirq steal (guest time is
  # already counted in user and nice).
  read -r idle_cpu idle_steal < <(
    awk -v a="$a" -v b="$b" 'BEGIN {
      split(a, x); split(b, y)
      for (i = 2; i <= 9; i++) total += y[i] - x[i]
      idle = (y[5] - x[5]) + (y[6] - x[6])
      steal = y[9] - x[9]
      if (total <= 0) total = 1
      printf "%.1f %.1f\n", 100 * idle / total, 100 * steal / total
    }')
  awk -v l="$idle_load" -v ml="$MAX_LOAD" -v c="$idle_cpu" -v mc="$MIN_IDLE" \
    'BEGIN { exit !(l <= ml && c >= mc) }'
}

# idle_check: sample until the machine is idle, at most 1 +
# IDLE_RETRIES times, IDLE_WAIT seconds apart.  Stops the benchmark if
# it never is (unless BENCH_IDLE=warn).  Sets idle_report for the
# machine section.
idle_check () {
  local try samples=0 verdict=busy
  for ((try = 1; try <= IDLE_RETRIES + 1; try++)); do
    samples=$try
    if sample_idle; then verdict=idle; break; fi
    echo "bench: the machine is busy: load average $idle_load (at most $MAX_LOAD wanted)," \
         "CPU idle ${idle_cpu}% over ${IDLE_SECS} s (at least ${MIN_IDLE}% wanted)" >&2
    [ "$IDLE_MODE" = warn ] && break
    if [ $try -le "$IDLE_RETRIES" ]; then
      echo "bench: sampling again in $IDLE_WAIT s ($try of $IDLE_RETRIES retries)" >&2
      sleep "$IDLE_WAIT"
    fi
  done
  idle_report="load average $idle_load, CPU idle ${idle_cpu}% (steal ${idle_steal}%) over ${IDLE_SECS} s; sample $samples of at most $((IDLE_RETRIES + 1))"
  if [ $verdict = idle ]; then
    idle_report="$idle_report: idle"
  elif [ "$IDLE_MODE" = warn ]; then
    idle_report="$idle_report: **busy, run anyway (BENCH_IDLE=warn): these numbers mean little**"
    echo "bench: BENCH_IDLE=warn: running anyway" >&2
  else
    die "the machine stayed busy over $((IDLE_RETRIES + 1)) samples $IDLE_WAIT s apart;" \
        "benchmarks on a busy machine are noise.  Stop the other work and run it alone," \
        "or change BENCH_MAX_LOAD / BENCH_MIN_IDLE / BENCH_IDLE_RETRIES / BENCH_IDLE_WAIT," \
        "or set BENCH_IDLE=warn to run anyway" \
        "(see the top of bench/bench.sh)"
  fi
}

echo "bench: cases $CASES; rounds: $ROUNDS ($ROUNDS1 for case 1, $INSTR_REPEAT for case instr); $T s per run; results in $res"
if [ "${CASES// /}" = instr ]; then
  # Instruction counts do not move with the load: no reason to wait.
  idle_report="skipped: case instr alone, whose counts do not depend on the machine's load"
else
  echo "bench: sampling the machine's idle state (${IDLE_SECS} s)"
  idle_check
fi
echo "bench: idle check: $idle_report"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# --- 1. overhead: a capacity that never binds ------------------------
# 4K random writes at queue depth 64, 1M sequential writes at 8.
# 'rate' is nbdkit's rate filter at a rate that never binds either: the
# cost of a peer filter on the same path.  The throttle runs with its
# defaults (throttle-rt=auto: real-time only while a kernel nbd client
# is connected, so not here), with throttle-rt=on to show what
# real-time request threads cost a client on the same CPUs, and with
# throttle-rt=off to tell the cost of the budget alone.  Case 1 is
# the noisiest (differences of a few percent), so it gets more rounds.
SPAN1=256M
BE1="memory 1G"
want 1 &&
for ((r = 0; r < ROUNDS1; r++)); do
  echo "case 1, round $r"
  for c in $(rotate 5 $r none throttle:1G throttle:1G+throttle-rt=on throttle:1G+throttle-rt=off rate:1T); do
    measure 1 4k-randwrite-qd64 "$c" $r $SPAN1 "$BE1" load \
      -t "$T" -q 64 -b 4k --random --span $SPAN1
    measure 1 1M-seqwrite-qd8 "$c" $r $SPAN1 "$BE1" load \
      -t "$T" -q 8 -b 1M --sequential --span $SPAN1
  done
  if [ $have_fio = yes ]; then
    for c in $(rotate 2 $r none throttle:1G); do
      measure 1 4k-randwrite-qd64x2 "$c" $r $SPAN1 "$BE1" fio \
        --rw=randwrite --bs=4k --iodepth=64 --numjobs=2 --size=$SPAN1
      measure 1 1M-seqwrite-qd8 "$c" $r $SPAN1 "$BE1" fio \
        --rw=write --bs=1M --iodepth=8 --size=$SPAN1
      if [ "$(nproc)" -ge 2 ]; then
        pin on
        RUN_TIME=$T1P measure 1 4k-randwrite-qd64x2-pinned "$c" $r $SPAN1 "$BE1" fio \
          --rw=randwrite --bs=4k --iodepth=64 --numjobs=2 --size=$SPAN1
        measure 1 1M-seqwrite-qd8-pinned "$c" $r $SPAN1 "$BE1" fio \
          --rw=write --bs=1M --iodepth=8 --size=$SPAN1
        pin off
      fi
    done
  fi
done

# --- instr. instructions per request -------------------------------------
# Counted by callgrind in the server: the one measure of the filter's
# cost that the machine's load does not move.  nbdkit runs under
# valgrind for two fio runs of 4K random writes (2 connections, queue
# depth 64 each) that differ only in their number of requests; the
# difference of the two totals over the difference of the requests
# leaves out start-up and exit.  The backend is nbdkit's null plugin,
# which discards writes (the memory plugin's page zeroing moved the
# count by about 150 from run to run).
#
# valgrind runs one thread at a time, and over the bare null plugin a
# request is done before the next one is read: none ever waits, so no
# capacity binds there.  The binding configurations run over nbdkit's
# delay filter below the throttle (INSTR_DELAY per write), where
# requests overlap, and are set against no filter over the same delay:
#   null    no filter; rate:1T; throttle:1G, the throttle's defaults
#           with a capacity that never binds
#   delay   no filter, the baseline of the two below; throttle:64K: 2
#           connections of 16 nbdkit threads want up to 128K, twice the
#           capacity
#   delay2  two fio jobs (a connection each) on export names a and b,
#           each wanting up to 64K, so neither export's 64K binds, under
#           throttle-server-capacity=64K, which does
# Whether a request waits depends on timing, so those two also get a
# control socket, and the share of the larger run's extra requests
# that waited for the budget that binds (the export's, or the
# server's) is reported with them.  That share, and with it the count,
# falls on a busy machine (valgrind's one running thread is late to
# read new requests): the null rows do not move with the load, the
# binding rows do, a little.
#
# Each round counts every configuration once; a difference or ratio
# over no filter pairs a configuration with its baseline of the same
# round.  Results:
#   $res/instr.tsv         lines #sizes (MiB per job), #delay, #run
#                          (date, commit, nbdkit), then SETUP CONFIG
#                          and the instructions per request of each round
#   $res/instr-waited.tsv  SETUP CONFIG BUDGET and the share of
#                          requests that waited, of each round
INSTR_SMALL=8 INSTR_LARGE=40    # MiB per fio job
INSTR_SPAN=256M
INSTR_DELAY=4ms
INSTR_CONFIGS=("null none" "null rate:1T" "null throttle:1G" "delay none"
               "delay throttle:64K"
               "delay2 throttle:64K+throttle-server-capacity=64K")
THROTTLE_CTL=${THROTTLE_CTL:-$abs_top_builddir/tools/throttle-ctl}

# instr_waited BUDGET: prints "WAITED ADMITTED" of the default export's
# budget (export) or the server's (server), from the control socket.
instr_waited () {
  "$THROTTLE_CTL" --json "$tmp/ctl" stats | python3 -c '
import json, sys
j = json.load(sys.stdin)
if sys.argv[1] == "server":
    b = j["server"]
else:
    b = [e for e in j["exports"] if e["name"] == ""][0]
print(b["waited"], b["admitted"])' "$1"
}

# instr_count SETUP CONFIG: sets instr_ir to the instructions per
# request, and instr_share to the share of requests that waited (empty
# where nothing is meant to bind).
instr_count () {
  local setup=$1 config=$2 backend="null 1G" args n i ir budget=
  local total=() waited=() admitted=() wa
  [[ $setup = delay* ]] && backend="--filter=delay null 1G delay-write=$INSTR_DELAY"
  # shellcheck disable=SC2086
  args=$(server_args "$config" $backend)
  if [[ $setup = delay* && $config = throttle:* ]]; then
    args="$args throttle-control=$tmp/ctl"
    budget="export"
    [[ $config = *throttle-server-capacity=* ]] && budget=server
  fi
  for n in $INSTR_SMALL $INSTR_LARGE; do
    rm -f "$sock" "$tmp/ctl" "$tmp/cg.out"
    # shellcheck disable=SC2086
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
      "$NBDKIT" -f -U "$sock" $args 2>"$tmp/server.log" &
    server_pid=$!
    for i in $(seq 300); do
      [ -S "$sock" ] && { [ -z "$budget" ] || [ -S "$tmp/ctl" ]; } && break
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.1
    done
    [ -S "$sock" ] || { cat "$tmp/server.log" >&2; die "instr: $setup $config: nbdkit under valgrind did not start"; }
    if [ "$setup" = delay2 ]; then
      fio --ioengine=nbd --rw=randwrite --bs=4k --iodepth=64 \
        --size=$INSTR_SPAN --io_size="${n}M" \
        --name=a --uri="nbd+unix:///a?socket=$sock" \
        --name=b --uri="nbd+unix:///b?socket=$sock" >"$tmp/fio.out" 2>&1
    else
      fio --ioengine=nbd --uri="$uri" --name=instr --rw=randwrite --bs=4k \
        --iodepth=64 --numjobs=2 --size=$INSTR_SPAN --io_size="${n}M" \
        >"$tmp/fio.out" 2>&1
    fi || { cat "$tmp/fio.out" "$tmp/server.log" >&2; die "instr: $setup $config: fio failed"; }
    if [ -n "$budget" ]; then
      wa=$(instr_waited $budget) || die "instr: $setup $config: no statistics from $tmp/ctl"
      waited+=("${wa% *}") admitted+=("${wa#* }")
    fi
    kill -TERM "$server_pid"
    wait "$server_pid" 2>/dev/null
    server_pid=
    ir=$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$tmp/cg.out")
    [ -n "$ir" ] || die "instr: $setup $config: no totals in callgrind's output"
    total+=("$ir")
  done
  # 2 jobs of 4K requests: 256 of them per MiB.
  instr_ir=$(( (total[1] - total[0]) / ((INSTR_LARGE - INSTR_SMALL) * 2 * 256) ))
  instr_share=
  [ -n "$budget" ] &&
    instr_share=$(awk -v w="$((waited[1] - waited[0]))" -v a="$((admitted[1] - admitted[0]))" \
                    'BEGIN { printf "%.3f", (a > 0 ? w / a : 0) }')
}

if ! want instr; then
  :
elif [ $have_fio = no ]; then
  echo "bench: case instr skipped: fio with its nbd engine is not installed (apt-get install fio)"
elif ! command -v valgrind >/dev/null; then
  echo "bench: case instr skipped: valgrind is not installed (apt-get install valgrind)"
else
  declare -A instr_irs instr_shares
  for ((r = 0; r < INSTR_REPEAT; r++)); do
    echo "case instr, round $r"
    for e in "${INSTR_CONFIGS[@]}"; do
      # shellcheck disable=SC2086
      instr_count $e
      instr_irs[$e]+=$'\t'$instr_ir
      [ -n "$instr_share" ] && instr_shares[$e]+=$'\t'$instr_share
      printf '  %-52s %5d instructions per request%s\n' "$e" "$instr_ir" \
        "${instr_share:+, waited $instr_share}"
    done
  done
  {
    printf '#sizes\t%s\t%s\n' $INSTR_SMALL $INSTR_LARGE
    printf '#delay\t%s\n' $INSTR_DELAY
    printf '#run\t%s\t%s\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" \
      "$(git -C "$abs_top_srcdir" describe --always --dirty 2>/dev/null || echo unknown)" \
      "$("$NBDKIT" --version | head -1)"
    for e in "${INSTR_CONFIGS[@]}"; do
      printf '%s\t%s%s\n' "${e% *}" "${e#* }" "${instr_irs[$e]}"
    done
  } > "$res/instr.tsv"
  for e in "${INSTR_CONFIGS[@]}"; do
    [ -n "${instr_shares[$e]:-}" ] || continue
    budget="export"
    [[ $e = *throttle-server-capacity=* ]] && budget=server
    printf '%s\t%s\t%s%s\n' "${e% *}" "${e#* }" $budget "${instr_shares[$e]}"
  done > "$res/instr-waited.tsv"
fi

# --- 2. under pressure ------------------------------------------------
# The backend (tests' inflight plugin) sleeps 10 ms per request and
# records the peak bytes and requests in flight.  4 connections keep
# 64 requests queued, 4 times the capacity; nbdkit gets 64 threads so
# the throttle alone bounds what reaches the backend.  rate: nbdkit's
# rate filter at capacity/delay, the same throughput limit.
BE2="--threads=64 $TEST_PLUGIN delay-ms=10 statefile=@STATE@"
if want 2 && [ $have_inflight = yes ]; then
  for ((r = 0; r < ROUNDS; r++)); do
    echo "case 2, round $r"
    # 4K only: capacity 64K = 16 requests = 6.25 MiB/s at 10 ms.
    for c in $(rotate 3 $r none throttle:64K rate:50M); do
      measure 2 4k-randwrite-4x16 "$c" $r 0 "$BE2" load \
        -t "$T" -c 4 -q 16 -b 4k --random
    done
    # 1M writes mixed into a 4K stream: capacity 2M = 200 MiB/s at 10 ms.
    for c in $(rotate 3 $r none throttle:2M rate:1600M); do
      measure 2 mix-4k95-1M5-4x16 "$c" $r 0 "$BE2" load \
        -t "$T" -c 4 -q 16 -b 4k:95,1M:5 --random
    done
  done
elif want 2; then
  echo "bench: case 2 skipped: $TEST_PLUGIN is not built (make -C tests test-inflight-plugin.la)"
fi

# --- 2m. mixed sizes, fio: the budget before and after serving in parts --
# The mixed-size workload of the speed goal: fio's nbd engine, 4 jobs of 4K
# random writes at iodepth 16 plus one job of 1M sequential writes at
# iodepth 4, in one fio run; capacity 2M over the 10 ms backend of case
# 2 (limit 2M / 10 ms = 200 MiB/s).  throttle-split=false is the strict
# whole-request FIFO from before; the default serves the 1M writes in
# parts.  group_reporting merges the four 4K jobs into one entry of
# fio's JSON (their latency histograms too); new_group keeps the 1M
# job apart.
if ! want 2m; then
  :
elif [ $have_fio = no ]; then
  echo "bench: case 2m skipped: fio with its nbd engine is not installed (apt-get install fio)"
elif [ $have_inflight = no ]; then
  echo "bench: case 2m skipped: $TEST_PLUGIN is not built (make -C tests test-inflight-plugin.la)"
else
  for ((r = 0; r < ROUNDS; r++)); do
    echo "case 2m, round $r"
    for c in $(rotate 3 $r none throttle:2M+throttle-split=false throttle:2M); do
      RUN_TIME=$T2M UNITS_POLL=0.002 measure 2m mixed-4k4x16-1M1x4 "$c" $r 0 "$BE2" fio \
        --size=256M --group_reporting \
        --name=4k --rw=randwrite --bs=4k --iodepth=16 --numjobs=4 \
        --name=1M --new_group --rw=write --bs=1M --iodepth=4
    done
  done
fi

# --- 4. write-behind over a slow backend --------------------------------
# nbdkit's delay filter makes every write take 5 ms.  burst: 4M of 4K
# writes, less than the capacity, so writeback can absorb all of it;
# sustained: a timed run, longer than the pool lasts.  Writeback runs
# at its default, 16 writer threads (as many as nbdkit's request threads
# that writethrough uses), and with 4, the default over serialize_requests, to show what
# the writer count does.  rate: 100M bits
# = 12.5 MiB/s, what 16 threads at 5 ms can do with 4K writes.
SPAN4=64M
BE4="--filter=delay memory 1G delay-write=5ms"
want 4 &&
for ((r = 0; r < ROUNDS; r++)); do
  echo "case 4, round $r"
  for c in $(rotate 5 $r none throttle:8M:writethrough throttle:8M:writeback \
                throttle:8M:writeback+throttle-writeback-threads=4 rate:100M); do
    measure 4 4k-burst-4M-qd16 "$c" $r $SPAN4 "$BE4" load \
      -n 4M -q 16 -b 4k --random --span $SPAN4
    measure 4 4k-sustained-qd16 "$c" $r $SPAN4 "$BE4" load \
      -t "$T" -q 16 -b 4k --random --span $SPAN4
  done
done

# --- 5. a latency target: a reader among writers -------------------------
# The backend's latency grows with the bytes in flight: 1 ms plus the
# bytes in flight at a request's arrival / 100M per second (the inflight
# plugin's bandwidth=).  4 writers keep 8 writes of 256K each
# outstanding (8M in all, so a capacity of 8M, the ceiling, never
# binds) while one reader does 4K random reads at queue depth 1 from
# 1 s after the writers start: its numbers are the steady state, the
# capacity plot shows the start.  Every throttle configuration runs
# with throttle-rt=off (real-time request threads would charge the
# reads, and a charged read queues behind the writes) and a control
# socket, polled every 50 ms for the capacity and the units charged.
BE5="$TEST_PLUGIN delay-ms=1 bandwidth=100M"
adapt_args () {
  local throttle="--filter=$THROTTLE_FILTER $BE5 throttle-rt=off throttle-control=$tmp/ctl"
  case $1 in
    none) echo "$BE5" ;;
    ceiling) echo "$throttle throttle-capacity=8M" ;;
    floor) echo "$throttle throttle-capacity=256K" ;;
    adaptive) echo "$throttle throttle-capacity=8M throttle-min-capacity=256K throttle-latency-target=5ms" ;;
  esac
}

# measure_adapt CONFIG ROUND: one run of case 5, with a retry as measure.
measure_adapt () {
  measure_adapt_once "$@" && return 0
  retried=$((retried + 1))
  echo "bench: retrying 5.$1 round $2 once" >&2
  measure_adapt_once "$@" || die "5.$1 round $2 failed twice"
}

measure_adapt_once () {
  local config=$1 round=$2 tag="5.adapt.$1.$2" ok=yes poller= writers
  rm -f "$tmp/ctl"
  # shellcheck disable=SC2046
  if ! start_server $(adapt_args "$config"); then
    cat "$tmp/server.log" >&2
    die "$tag: nbdkit did not start"
  fi
  [ "$config" = none ] || start_poller "$res/$tag.cap"
  "$THROTTLE_LOAD" --json --timeout 30 -c 4 -q 8 -b 256k --random -t "$T5" \
    "$uri" >"$res/$tag.writers.json" 2>"$res/$tag.writers.err" &
  writers=$!
  bg_pids+=("$writers")
  sleep 1
  "$THROTTLE_LOAD" --json --timeout 30 --histogram "$res/$tag.reader.cdf" \
    -c 1 -q 1 -b 4k -r 100 --random -t "$((T5 - 1))" \
    "$uri" >"$res/$tag.reader.json" 2>"$res/$tag.reader.err" || ok=no
  wait "$writers" || ok=no
  stop_poller
  bg_pids=()
  stop_server
  if [ $ok = no ]; then
    echo "bench: $tag: a client failed:" >&2
    cat "$res/$tag.writers.err" "$res/$tag.reader.err" "$tmp/server.log" >&2
    return 1
  fi
  record 5 reader "$config" "$round" load "$res/$tag.reader.json" "$server_rss" -
  record 5 writers "$config" "$round" load "$res/$tag.writers.json" "$server_rss" -
  printf '  %-44s done\n' "$tag"
}

if want 5 && [ $have_inflight = yes ]; then
  for ((r = 0; r < ROUNDS; r++)); do
    echo "case 5, round $r"
    for c in $(rotate 4 $r none ceiling floor adaptive); do
      measure_adapt "$c" $r
    done
  done
elif want 5; then
  echo "bench: case 5 skipped: $TEST_PLUGIN is not built (make -C tests test-inflight-plugin.la)"
fi

# --- the report ----------------------------------------------------------
# The machine after the run, with our own processes gone: was other
# work started meanwhile?
sample_idle
idle_after="load average $idle_load, CPU idle ${idle_cpu}% (steal ${idle_steal}%) over ${IDLE_SECS} s"

machine () {
  echo "- nproc: $(nproc)"
  echo "- CPU: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "- kernel: $(uname -r)"
  echo "- nbdkit: $("$NBDKIT" --version | head -1)"
  echo "- libnbd: $(pkg-config --modversion libnbd 2>/dev/null || echo unknown)"
  if [ $have_fio = yes ]; then echo "- fio: $(fio --version)"; fi
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- cases run: $CASES$([ "$SMOKE" = 1 ] && echo " (**smoke run**: checks the plumbing, its numbers mean nothing)")"
  echo "- rounds: $ROUNDS1 for case 1, $INSTR_REPEAT for case instr, $ROUNDS for the others; $T s per timed run, $T1P s in case 1's pinned 4K runs, $T2M s in case 2m, $T5 s in case 5"
  echo "- runs retried after a failure: $retried"
  echo "- idle check before the run (BENCH_IDLE=$IDLE_MODE; wanted: load average <= $MAX_LOAD (BENCH_MAX_LOAD), CPU idle >= ${MIN_IDLE}% (BENCH_MIN_IDLE), up to $IDLE_RETRIES more samples $IDLE_WAIT s apart (BENCH_IDLE_RETRIES, BENCH_IDLE_WAIT)): $idle_report"
  echo "- idle sample after the run: $idle_after"
  echo "- load average (1/5/15 min) before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg)"
}
machine > "$res/machine.md"

python3 "$bench_dir/summarize.py" "$index" "$res/machine.md" "$res" \
  > "$res/BENCHMARKS.md" || die "summarize.py failed"
mkdir -p "$OUT/bench" || die "cannot create $OUT/bench"
if ! cp "$res/BENCHMARKS.md" "$OUT/BENCHMARKS.md.tmp" ||
   ! mv "$OUT/BENCHMARKS.md.tmp" "$OUT/BENCHMARKS.md"; then
  die "cannot write $OUT/BENCHMARKS.md"
fi
wrote="$OUT/BENCHMARKS.md"
# summarize.py writes the plot commands for the curves that exist.
if [ -s "$res/plotcmd.gp" ]; then
  (cd "$res" && gnuplot -e "outfile='$OUT/bench/latency.svg'" \
     "$bench_dir/latency.gp") || die "gnuplot failed on latency.gp"
  wrote="$wrote $OUT/bench/latency.svg"
fi
if [ -s "$res/plotcmd-mixed.gp" ]; then
  (cd "$res" && gnuplot -e "outfile='$OUT/bench/mixed-cdf.svg'" \
     "$bench_dir/mixed-cdf.gp") || die "gnuplot failed on mixed-cdf.gp"
  wrote="$wrote $OUT/bench/mixed-cdf.svg"
fi
if [ -s "$res/adaptcmd.gp" ]; then
  (cd "$res" && gnuplot -e "outfile='$OUT/bench/adapt.svg'" \
     "$bench_dir/adapt.gp") || die "gnuplot failed on adapt.gp"
  wrote="$wrote $OUT/bench/adapt.svg"
fi
echo "bench: wrote $wrote"
