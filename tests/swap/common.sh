# Shared by build-initramfs.sh, run-guest.sh and check-swap.sh (sourced).

# The configurations of the swap-over-NBD guest test, one a line:
#   NAME  MUST  BOOTS  KERNEL-ARGS (read by the guest's /init)
# MUST=1: the suite fails unless every boot completes both phases and the
# guard check passes.  MUST=0: recorded in the table, never fails the suite.
# thr.minfree=16384 is the vm.min_free_kbytes the man page recommends.
# The MUST configurations are the deployment the reserve issue recommends
# for swap-in: the filter's defaults (real-time request threads where
# permitted, as in the guest) plus that vm.min_free_kbytes.
# thr.units=1: the same deployment started and stopped by the command
# lines of nbdkit-throttle-swap@.service, in its order (see init.sh).
swap_configs ()
{
    cat <<'EOF'
disk-wt-c1        1 3 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=1 thr.minfree=16384 thr.guards=1 thr.forkcheck=1
disk-wt-c2        1 3 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=2 thr.minfree=16384 thr.guards=1
disk-wb-c1        1 3 thr.plugin=disk thr.filter=1 thr.mode=writeback thr.conns=1 thr.minfree=16384 thr.guards=1
disk-wb-c2        1 3 thr.plugin=disk thr.filter=1 thr.mode=writeback thr.conns=2 thr.minfree=16384 thr.guards=1
units-wt-c2       1 3 thr.units=1 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=2 thr.minfree=16384 thr.guards=1
disk-wt-c1-nomin  0 1 thr.plugin=disk thr.filter=1 thr.mode=writethrough thr.conns=1 thr.minfree=0 thr.guards=1
filter-file       0 3 thr.plugin=file thr.filter=1 thr.conns=1 thr.minfree=16384 thr.guards=1
filter-memory     0 3 thr.plugin=memory thr.filter=1 thr.conns=1 thr.minfree=16384 thr.guards=1
baseline-file     0 3 thr.plugin=file thr.filter=0 thr.conns=1 thr.minfree=16384 thr.guards=0
EOF
}

# Prints one field of a configuration: swap_config NAME FIELD
# (FIELD: must, boots or args).  Fails for an unknown NAME.
swap_config ()
{
    swap_configs | awk -v n="$1" -v f="$2" '
        $1 == n { found = 1
                  if (f == "must") print $2
                  else if (f == "boots") print $3
                  else { s = ""; for (i = 4; i <= NF; i++) s = s (s ? " " : "") $i; print s } }
        END { exit !found }'
}

# The installed Debian kernel: the newest /boot/vmlinuz-*.
swap_kernel ()
{
    ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1
}

swap_kernel_version ()
{
    local k
    k=$(swap_kernel) && [ -n "$k" ] && echo "${k#/boot/vmlinuz-}"
}
