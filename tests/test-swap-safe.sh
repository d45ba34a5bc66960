#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The swap verdict (plugin/throttle/guards/throttle-verdict.h): one answer,
# safe or not with every reason, the same in the start's one warning
# line, in the JSON stats and in the metrics (read with real parsers:
# metrics-check.py swap).  At the defaults the reasons are what this
# machine refuses; throttle-swap=off names every guard and prints
# nothing; remote storage adds vm.min_free_kbytes and
# vm.watermark_boost_factor, read again each time
# it is asked (a file stood in for it); set rt off adds rt, set rt auto
# takes it away; and a kernel nbd client (a client named nbd-client, of
# the server's uid) connecting to a server that is not safe is logged
# as an error naming every reason, whatever throttle-swap says, while
# another client is not.
source "${abs_srcdir:-$(dirname "$0")}/functions.sh"
requires_file "$THROTTLE_FILTER"
requires $PY -c 'import nbd'
requires $PY -c 'import prometheus_client.parser'

check=$srcdir/metrics-check.py
ALL_GUARDS=io-flusher,rt,oom,mlock,reserve

# What this machine refuses at the defaults: the guards, and locking
# all of nbdkit's memory (CAP_IPC_LOCK, bit 14, or no RLIMIT_MEMLOCK),
# without which the default reserve (20M) is locked only within the
# limit.
can_io_flusher=$(yes_no probe_io_flusher)
can_oom=$(yes_no probe_oom_protect)
can_rt=$(yes_no probe_rt)
capeff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
limit=$(ulimit -l)
can_lock=no
if [ "$limit" = unlimited ] || (( (0x$capeff >> 14) & 1 )); then
  can_lock=yes
fi
expect=
[ $can_io_flusher = yes ] || expect+=,io-flusher
[ $can_rt = yes ] || expect+=,rt
[ $can_oom = yes ] || expect+=,oom
if [ $can_lock = no ]; then
  expect+=,mlock
  (( 20 * 1024 > limit )) && expect+=,reserve
fi
expect=${expect#,}
echo "this machine refuses: ${expect:-nothing}"

# verdict NAME SAFE REASONS: the stats and the metrics of the server
# started as NAME say so.
verdict ()
{
  $PY "$check" swap "$tmp/$1.ctl" "$2" "$3" ||
    { cat "$tmp/$1.log"; fail "$1: the verdict is not $2 ($3): see above"; }
}
# warnings NAME: the filter's warning lines in NAME's log, but those
# of mallopt, which a sanitizer's malloc refuses.
warnings ()
{
  case "${SANITIZERS:-no}" in
    no|"") grep 'throttle: warning: ' "$tmp/$1.log" || : ;;
    *) grep 'throttle: warning: ' "$tmp/$1.log" | grep -v 'mallopt refused' || : ;;
  esac
}
# attached NAME: the lines that say a kernel client attached unsafely.
attached ()
{
  grep 'error: throttle: NOT SAFE for swap, yet a kernel nbd client attached' \
    "$tmp/$1.log" || :
}

# A client named nbd-client (the same interpreter: /proc/PID/comm is
# "nbd-client"), and python3: each connects, reads, disconnects.
mkdir "$tmp/bin"
ln -s "$PY" "$tmp/bin/nbd-client"
cat > "$tmp/client.py" <<'EOF'
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pread(4096, 0)
h.shutdown()
EOF
# client PROGRAM: connects to the last server started.
client ()
{
  timeout 30 "$1" "$tmp/client.py" "$uri" || fail "$1: the client failed"
}

# --- the defaults: what this machine refuses, in one line -------------------
start_nbdkit auto --filter="$THROTTLE_FILTER" memory 1M \
  throttle-control="$tmp/auto.ctl"
if [ -n "$expect" ]; then
  verdict auto no "$expect"
  [ "$(warnings auto | wc -l)" = 1 ] ||
    { warnings auto; fail "defaults: not one warning line"; }
  warnings auto | grep -q 'warning: not safe for swap: .*For ordinary throttling set throttle-swap=off; to make it safe, see SWAP SAFETY in nbdkit-throttle-filter(1)$' ||
    { warnings auto; fail "defaults: the warning does not name throttle-swap"; }
  for r in ${expect//,/ }; do
    warnings auto | grep -qF -- " $r (" ||
      { warnings auto; fail "defaults: the warning does not name $r"; }
  done
  echo "ok: defaults: one warning line, naming $expect and throttle-swap"
else
  verdict auto yes ""
  [ -z "$(warnings auto)" ] || { warnings auto; fail "a safe server warned"; }
  grep -q 'throttle: safe for swap' "$tmp/auto.log" ||
    fail "defaults: no debug line saying safe"
fi
client "$tmp/bin/nbd-client"
if [ -n "$expect" ]; then
  [ "$(attached auto | wc -l)" = 1 ] ||
    { cat "$tmp/auto.log"; fail "defaults: a kernel client attached, not said once"; }
  attached auto | grep -q "(peer PID [0-9]* is nbd-client, uid $(id -u), a kernel nbd client on this machine)" ||
    { attached auto; fail "defaults: the line does not name the peer"; }
  echo "ok: defaults: a kernel client attaching is said: $(attached auto | cut -c1-160)..."
else
  [ -z "$(attached auto)" ] || fail "a safe server complained of a kernel client"
fi

# set rt off takes rt away, now; set rt auto gives it back.
if [ $can_rt = yes ]; then
  ctl_send "$tmp/auto.ctl" "set rt off" | grep -q '"ok":true' ||
    fail "set rt off refused"
  verdict auto no "${expect:+$expect,}rt"
  ctl_send "$tmp/auto.ctl" "stats" | grep -q '"rt":"set rt off (control socket)"' ||
    fail "stats do not say why rt is a reason"
  ctl_send "$tmp/auto.ctl" "set rt auto" | grep -q '"ok":true' ||
    fail "set rt auto refused"
  verdict auto "$([ -n "$expect" ] && echo no || echo yes)" "$expect"
  echo "ok: set rt off makes rt a reason, set rt auto takes it away"
fi
stop_nbdkit $pid

# --- throttle-swap=off: quiet, and every guard a reason ------------------------
start_nbdkit off --filter="$THROTTLE_FILTER" memory 1M throttle-swap=off \
  throttle-control="$tmp/off.ctl"
verdict off no "$ALL_GUARDS"
[ -z "$(warnings off)" ] || { warnings off; fail "throttle-swap=off warned"; }
ctl_send "$tmp/off.ctl" stats | grep -q '"swap":{"mode":"off","safe":false,"unsafe":{"io-flusher":"throttle-swap=off",' ||
  fail "throttle-swap=off: stats do not say who turned the guards off"
echo "ok: throttle-swap=off: no warning, every guard a reason in stats and metrics"
# Quiet at start, not when it matters: a kernel client is said, other
# clients are not.
client "$PY"
[ -z "$(attached off)" ] || { attached off; fail "python3 was taken for a kernel client"; }
client "$tmp/bin/nbd-client"
[ "$(attached off | wc -l)" = 1 ] ||
  { cat "$tmp/off.log"; fail "throttle-swap=off: a kernel client attached, not said once"; }
attached off | grep -q 'missing: io-flusher (throttle-swap=off); rt (throttle-swap=off); oom (throttle-swap=off); mlock (throttle-swap=off); reserve (throttle-swap=off); see SWAP SAFETY' ||
  { attached off; fail "throttle-swap=off: the line does not name every reason"; }
echo "ok: throttle-swap=off: a kernel client attaching is said, naming every guard"
stop_nbdkit $pid

# --- a guard's own parameter overrides it ---------------------------------------
start_nbdkit mix --filter="$THROTTLE_FILTER" memory 1M throttle-swap=off \
  throttle-reserve=1M throttle-control="$tmp/mix.ctl"
verdict mix no io-flusher,rt,oom,mlock
stop_nbdkit $pid

# --- storage over a network: vm.min_free_kbytes, read when asked ----------------
echo 1970 > "$tmp/min_free"
echo 15000 > "$tmp/boost"
THROTTLE_MIN_FREE_FILE="$tmp/min_free" THROTTLE_BOOST_FILE="$tmp/boost" \
  start_nbdkit remote --filter="$THROTTLE_FILTER" memory 1M throttle-swap=off \
  throttle-remote=true throttle-control="$tmp/remote.ctl"
verdict remote no "$ALL_GUARDS,min-free-kbytes,watermark-boost"
ctl_send "$tmp/remote.ctl" stats | grep -q '"min-free-kbytes":"vm.min_free_kbytes is 1970, below 16384, the least for storage over a network (throttle-remote=true): set sysctl vm.min_free_kbytes=16384"' ||
  fail "stats do not say why vm.min_free_kbytes is a reason"
ctl_send "$tmp/remote.ctl" stats | grep -q '"watermark-boost":"vm.watermark_boost_factor is 15000: .*set sysctl vm.watermark_boost_factor=0"' ||
  fail "stats do not say why watermark boosting is a reason"
echo 16384 > "$tmp/min_free"
verdict remote no "$ALL_GUARDS,watermark-boost"
echo 0 > "$tmp/boost"
verdict remote no "$ALL_GUARDS"
echo "ok: remote storage: vm.min_free_kbytes below 16384 and a boost factor above 0 are reasons, read again"
stop_nbdkit $pid

start_refused "throttle-swap=sometimes: expected auto, on" throttle-swap=sometimes

# --- throttle-swap=on: every guard it cannot take, in one error line ----------
# Without CAP_SYS_RESOURCE both io-flusher and oom are refused (as root,
# capsh drops it from the bounding set for nbdkit); the rest as at the
# defaults.  One restart must be enough to learn them all.
wrap=() has_resource=no
(( (0x$capeff >> 24) & 1 )) && has_resource=yes
if [ $has_resource = yes ]; then
  if [ "$(yes_no probe_capsh_drop)" = yes ]; then
    wrap=(capsh --drop=cap_sys_resource -- -c 'exec "$0" "$@"')
  else
    echo "note: CAP_SYS_RESOURCE and no capsh to drop it: throttle-swap=on's refusal not tested"
  fi
fi
if [ $has_resource = no ] || [ ${#wrap[@]} -gt 0 ]; then
  on=io-flusher,oom
  for r in rt mlock reserve; do
    case ",$expect," in *",$r,"*) on+=,$r ;; esac
  done
  # In the order of the verdict's reasons, as the line gives them.
  on=$(for r in io-flusher rt oom mlock reserve; do
         case ",$on," in *",$r,"*) printf '%s ' "$r" ;; esac
       done)
  on=(${on})
  rc=0
  "${wrap[@]}" "$NBDKIT" -U - --filter="$THROTTLE_FILTER" memory 1M \
    throttle-swap=on --run true >"$tmp/on.log" 2>&1 || rc=$?
  [ $rc != 0 ] && [ $rc -lt 128 ] ||
    { cat "$tmp/on.log"; fail "throttle-swap=on without CAP_SYS_RESOURCE: exit $rc"; }
  [ "$(grep -c 'error:' "$tmp/on.log")" = 1 ] ||
    { cat "$tmp/on.log"; fail "throttle-swap=on: not one error line"; }
  line=$(grep 'error:' "$tmp/on.log")
  line=${line#*error: }
  case $line in
    "throttle-swap=on: ${#on[@]} required guards cannot be taken: ${on[0]}: "*) ;;
    *) cat "$tmp/on.log"; fail "throttle-swap=on: the line does not begin with the ${#on[@]} guards refused" ;;
  esac
  for r in "${on[@]:1}"; do
    case $line in
      *"; $r: "*) ;;
      *) cat "$tmp/on.log"; fail "throttle-swap=on: the one error does not name $r" ;;
    esac
  done
  case $line in
    *"; use throttle-swap=auto, or "*" to start without them") ;;
    *) cat "$tmp/on.log"; fail "throttle-swap=on: the line does not say how to start without them" ;;
  esac
  echo "ok: throttle-swap=on: one error line naming ${on[*]}"
fi
echo "test-swap-safe: PASS"
