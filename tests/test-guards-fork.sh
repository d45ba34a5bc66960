#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# What the plugin runs inherits none of the guards.  nbdkit's eval
# plugin forks a shell for every method; its scripts record their own
# task flags, scheduling policy and oom_score_adj.  With the filter at
# its defaults and a client named nbd-client (a kernel nbd client on
# this machine, for throttle-rt=auto) nbdkit's threads run SCHED_FIFO
# (as root here) from the connection's open on, and
# where the kernel grants them PF_MEMALLOC_NOIO / PF_LOCAL_THROTTLE and
# oom_score_adj -1000; the scripts, forked from the connection thread
# (open) and from the request threads (pread), must come out SCHED_OTHER,
# without the flags, and with the oom_score_adj nbdkit had before the
# filter.  The threads that served requests must also carry
# SCHED_RESET_ON_FORK, which covers the children that no fork handler
# sees (posix_spawn, vfork).
#
# Where this machine refuses PR_SET_IO_FLUSHER and oom_score_adj -1000
# (no CAP_SYS_RESOURCE), those two are asserted only trivially here (the
# parent never had them); tests/swap (the guest, disk-wt-c1) asserts them
# with the guards really set.

. "${abs_srcdir:-$(dirname "$0")}/functions.sh"

requires_file "$THROTTLE_FILTER"
requires "$NBDKIT" eval --version
requires "$PY" -c 'import nbd'

requires_root "nbdkit's threads must be allowed SCHED_FIFO"

can_io_flusher=$(yes_no probe_io_flusher)
can_oom=$(yes_no probe_oom_protect)
can_rt=$(yes_no probe_rt)
echo "this machine: PR_SET_IO_FLUSHER $can_io_flusher, oom_score_adj -1000 $can_oom, SCHED_FIFO $can_rt"
[ $can_rt = yes ] ||
    fail "SCHED_FIFO is refused here although root: real-time throttling must be on"

# nbdkit starts with oom_score_adj raised by one (raising needs no
# privilege), so a child restored to a constant 0 would be caught.
base=$(cat /proc/self/oom_score_adj)
start_adj=$(( base < 1000 ? base + 1 : base ))
cat > "$tmp/nbdkit-adj" <<EOF
#!/bin/sh
echo $start_adj > /proc/self/oom_score_adj || exit 1
exec "$NBDKIT" "\$@"
EOF
chmod +x "$tmp/nbdkit-adj"
# python3 under the name of the kernel's nbd client: throttle-rt=auto
# makes nbdkit real-time for it.
ln -s "$PY" "$tmp/nbd-client"

# Fields of /proc/self/stat after the command name: 9 flags, 40
# rt_priority, 41 policy.
record='set -- $(cut -d")" -f2- /proc/self/stat); echo "$0 flags=${7} prio=${38} policy=${39} oom=$(cat /proc/self/oom_score_adj)" >> '"$tmp/children"
flagbits=$((0x00080000 | 0x00100000))   # PF_MEMALLOC_NOIO | PF_LOCAL_THROTTLE

# check MODEL: nbdkit with the eval plugin in thread model MODEL, 8
# concurrent reads, then the children's and nbdkit's own state.
check ()
{
  local model=$1 fifo=0 reset=0 noio=0 n=0 bad=0 name flags prio policy rof adj
  : > "$tmp/children"
  NBDKIT="$tmp/nbdkit-adj" start_nbdkit "$model" --threads=4 \
    --filter="$THROTTLE_FILTER" eval \
    thread_model="echo $model" get_size='echo 1M' \
    open="sh -c '$record' open-child" \
    pread="sh -c '$record' pread-child; dd if=/dev/zero count=\$3 iflag=count_bytes status=none"
  # nbdkit's threads (fields 9 flags and 41 policy), read while the
  # connection is open: those that served requests run SCHED_FIFO.
  "$tmp/nbd-client" - "$uri" "$pid" > "$tmp/threads" <<'EOF' || fail "$model: reads failed"
import nbd, os, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
bufs = [nbd.Buffer(512) for _ in range(8)]
cookies = [h.aio_pread(b, i * 4096) for i, b in enumerate(bufs)]
for c in cookies:
    while not h.aio_command_completed(c):
        h.poll(-1)
task = "/proc/%s/task" % sys.argv[2]
for t in os.listdir(task):
    f = open("%s/%s/stat" % (task, t)).read().rsplit(")", 1)[1].split()
    # sched_getscheduler reports SCHED_RESET_ON_FORK (0x40000000) too.
    print(f[6], f[38], int(os.sched_getscheduler(int(t)) & 0x40000000 != 0))
h.shutdown()
EOF
  while read -r flags policy rof; do
    n=$((n + 1))
    if [ "$policy" = 1 ]; then fifo=$((fifo + 1)); fi
    if [ "$rof" = 1 ]; then reset=$((reset + 1)); fi
    if (( flags & flagbits )); then noio=$((noio + 1)); fi
  done < "$tmp/threads"
  adj=$(cat /proc/$pid/oom_score_adj)
  echo "$model: nbdkit: $n threads, $fifo SCHED_FIFO, $reset of them with SCHED_RESET_ON_FORK, $noio with the io-flusher flags, oom_score_adj $adj"
  (( fifo == n )) || fail "$model: only $fifo of $n nbdkit threads run SCHED_FIFO"
  (( reset >= 1 )) || fail "$model: no request thread has SCHED_RESET_ON_FORK"
  if [ $can_io_flusher = yes ]; then
    (( noio == n )) || fail "$model: only $noio of $n nbdkit threads have the io-flusher flags"
  fi
  if [ $can_oom = yes ]; then
    [ "$adj" = -1000 ] || fail "$model: nbdkit's oom_score_adj is $adj, not -1000"
  else
    [ "$adj" = "$start_adj" ] || fail "$model: nbdkit's oom_score_adj changed to $adj"
  fi
  stop_nbdkit "$pid"

  grep -q '^open-child ' "$tmp/children" || fail "$model: the open script left no record"
  grep -q '^pread-child ' "$tmp/children" || fail "$model: no pread script left a record"
  while read -r name flags prio policy adj; do
    flags=${flags#flags=} prio=${prio#prio=} policy=${policy#policy=} adj=${adj#oom=}
    if [ "$policy" != 0 ] || [ "$prio" != 0 ] || (( flags & flagbits )) ||
       [ "$adj" != "$start_adj" ]; then
      echo "  $name: flags $(printf %#x "$flags") policy $policy priority $prio oom_score_adj $adj"
      bad=$((bad + 1))
    fi
  done < "$tmp/children"
  (( bad == 0 )) ||
    fail "$model: $bad of $(wc -l < "$tmp/children") children inherited guards (want policy 0, priority 0, no flags, oom_score_adj $start_adj)"
  echo "$model: $(wc -l < "$tmp/children") children: policy SCHED_OTHER, no io-flusher flags, oom_score_adj $start_adj"
}

check parallel
check serialize_requests
echo "$0: all passed"
