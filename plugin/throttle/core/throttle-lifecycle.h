/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: who does what, and when.
 *
 * The one description of the filter's lifecycle.  nbdkit 1.32 calls
 * the filter's callbacks (all in plugin/throttle/throttle.c) from top to
 * bottom; each calls the modules' hooks in the order listed, and where
 * a reason is given the order matters.  The modules' headers say what
 * a hook does and what its caller must hold, not when it is called:
 * change the order here and in throttle.c together.
 *
 * Modules: throttle.c (the filter), throttle-serve (its data path),
 * throttle-guards (with -realtime and -memlock under it), -writeback,
 * -control, -metrics-file, -capacity, -export, -quit, -pace, -abort,
 * -adapt-glue, -remote, -verdict; lib/ is called
 * through them.  Everything up to .after_fork, and .cleanup and
 * .unload, run in nbdkit's main thread with no connection thread.
 *
 * CALLBACK          MODULE      HOOK: WHAT, AND WHY THERE
 * ----------------- ----------- --------------------------------------------
 * (dlopen)          -           no .load: nothing runs before .config.
 *
 * .config           throttle.c  throttle-capacity, -metric, -reads, -split.
 *                   guards      throttle_guards_config.
 *                   control     throttle_control_config.
 *                   metrics-file throttle_metrics_file_config.
 *                   writeback   throttle_writeback_config.
 *                   adapt-glue  throttle_adapt_config.
 *                   remote      throttle_remote_config.
 *                   throttle.c  any other throttle-* key is an error, so a
 *                               typo never reaches the plugin; other keys
 *                               go to the plugin, after
 *                   remote      throttle_remote_plugin_key: the plugin's
 *                               keys are the only word on whether its
 *                               storage is remote, and pass only here.
 *
 * .config_complete  throttle.c  throttle_metric_load (lib/), the default
 *                               capacity: FIRST, every hook below needs
 *                               the metric and the capacity; then the
 *                               server-wide budget, which admission and
 *                               the writeback pool's size need.
 *                   adapt-glue  throttle_adapt_config_complete: the floor
 *                               is known before any budget exists.
 *                   export      throttle_export_init: the default export's
 *                               budget, shown by the control socket before
 *                               any client.
 *                   control     throttle_control_config_complete: binds the
 *                               socket, so misuse is reported before nbdkit
 *                               forks.
 *                   metrics-file throttle_metrics_file_config_complete:
 *                               writes the file a first time (it needs
 *                               the registry), so a path that cannot be
 *                               written is refused before nbdkit forks.
 *                   writeback   throttle_writeback_config_complete.
 *                   (adapt-glue registers its state per export with
 *                   throttle_export_add_feature before the first
 *                   export is made; adapt-glue and writeback their
 *                   JSON with throttle_report_add_json, and
 *                   capacity its set commands, before the control
 *                   thread exists.)
 *
 * .get_ready        guards      throttle_guards_get_ready: tries each guard
 *                               and undoes it, while errors still reach the
 *                               user's terminal; decides the memory
 *                               locks and the reserve (memlock).
 *                   writeback   throttle_writeback_get_ready: refuses a
 *                               thread model that forbids background
 *                               writes; in writeback mode installs the
 *                               SIGABRT drain (throttle_abort_install,
 *                               nbdkit < 1.33.10: throttle-compat.h).
 *                   throttle.c  reads are charged if the request threads
 *                               will be real-time.
 *                   remote      throttle_remote_get_ready: with the storage
 *                               remote, logs vm.min_free_kbytes and the
 *                               least it needs.  Refuses nothing.
 *                   verdict     throttle_verdict_get_ready, LAST: every
 *                               guard was tried and the storage judged;
 *                               says at once whether the server is safe
 *                               for swap (one warning line naming every
 *                               reason if not), while stderr is still the
 *                               user's terminal; adds the "swap" stats
 *                               and the metrics' families before the
 *                               control thread exists.
 *
 * (fork)            nbdkit daemonizes unless -f: threads and memory locks
 *                   do not survive it, so none is made before .after_fork.
 *
 * .after_fork       guards      throttle_guards_after_fork, FIRST: every
 *                               thread started later inherits the guards;
 *                               mlockall, the heap reserve (memlock);
 *                               throttle_realtime_start: set rt and the
 *                               "rt" stats (before the control thread
 *                               exists) and, where real-time is
 *                               permitted, the watcher thread (memory
 *                               pressure, the end of a hold).
 *                   verdict     throttle_verdict_after_fork: says it again
 *                               if setting the guards found a reason more
 *                               (-u dropped a capability, no reserve).
 *                   quit        throttle_quit_start: the shutdown prober.
 *                   adapt-glue  throttle_adapt_after_fork: with a target
 *                               configured, the clock thread that ends the
 *                               controllers' windows on time (a target first
 *                               set live starts it from the control thread).
 *                   throttle.c  notes that the server started: only then
 *                               is the summary printed at unload.
 *                   control     throttle_control_after_fork: the control
 *                               thread, whose loop also rewrites the
 *                               metrics file.
 *
 * .list_exports     writeback   throttle_writeback_list_exports: in
 *                               writeback mode the plugin's list less
 *                               the names .open refuses.
 *
 * .open             writeback   throttle_writeback_check_name, FIRST: in
 *                               writeback mode a name other than "" is
 *                               refused before anything is made or
 *                               counted for it.
 *                   realtime    throttle_realtime_open, before all but the
 *                               name check: tells the swap verdict who the
 *                               peer is (a kernel nbd client attaching to
 *                               a server not safe for swap is logged with
 *                               every reason), counts the peer; a kernel nbd
 *                               client of root or nbdkit's uid makes
 *                               nbdkit real-time before the plugin's open
 *                               forks anything and before nbdkit starts
 *                               the connection's workers (they inherit
 *                               the policy).  Every failure after it
 *                               calls throttle_realtime_close.
 *                   throttle.c  the plugin's open (next), then the
 *                               export's budget (throttle_export_open,
 *                               made by a name's first connection with
 *                               its adapt-glue state).
 *                   writeback   throttle_writeback_open: the first writable
 *                               open of an export makes its pool (mmap, not
 *                               the heap reserve) and its writer threads,
 *                               each of which starts with
 *                               throttle_guards_thread_enter and
 *                               throttle_abort_writer_thread.
 *                   pace        throttle_pace_init (nbdkit < 1.33.10).
 *
 * .prepare          throttle.c  throttle_prepare: the layers' block size
 *                               constraints decide which requests may be
 *                               served in parts.
 *
 * data callbacks    guards      throttle_guards_thread_enter, FIRST: before
 *                               the thread can fault or allocate.
 *                   throttle.c  refuses above throttle-max-request.
 *                   serve       throttle_serve: charges the budget (lib/)
 *                               and credits it when the plugin has
 *                               returned (a writeback write: when it is
 *                               on the backend); a large request's
 *                               parts one after another, in the
 *                               request's own thread.
 *                   adapt-glue  throttle_adapt_start / throttle_adapt_done
 *                               around the plugin's call.
 *                   writeback   throttle_writeback_* in either mode, but
 *                               throttle_writeback_pwrite only in
 *                               writeback mode: each passes a request
 *                               straight down when nothing is written
 *                               behind.
 *                   pace        throttle_pace_enter after the guards', and
 *                               throttle_pace_reply before returning,
 *                               whatever the result (nbdkit < 1.33.10).
 *
 * .finalize         writeback   throttle_writeback_finalize: a clean
 *                               disconnect waits for the export's pending
 *                               writes.
 *
 * .close            pace        throttle_pace_destroy.
 *                   realtime    throttle_realtime_close: the peer is no
 *                               longer counted (a hold may begin).
 *                   export      throttle_export_close: the last
 *                               connection to a name frees its budget.
 *
 * .cleanup          control     throttle_control_cleanup, FIRST: its thread
 *                               reads the writeback state freed next.
 *                   adapt-glue  throttle_adapt_cleanup: stops the clock,
 *                               after the control thread, which can start it.
 *                   writeback   throttle_writeback_cleanup: drains, stops the
 *                               writers and closes their plugin contexts
 *                               while the plugin is still loaded.
 *                   quit        throttle_quit_stop: wakes and joins the
 *                               prober.
 *
 * .unload           control     throttle_control_unload, FIRST (nothing left
 *                               to do after .cleanup): its thread reads the
 *                               budgets freed below.
 *                   guards      throttle_guards_unload: stops the
 *                               watcher (throttle_realtime_stop).
 *                   abort       throttle_abort_uninstall: the handler's code
 *                               goes with the filter (nbdkit < 1.33.10).
 *                   metrics-file throttle_metrics_file_unload: the last
 *                               write, with the final numbers, after the
 *                               control thread (which rewrites it) and
 *                               before the budgets are freed.
 *                   throttle.c  if the server started, the summary line
 *                               of the server-wide budget, then of each
 *                               export, on stderr.
 *                   export      throttle_export_free_all: fails every wait,
 *                               frees the budgets and their adapt-glue state.
 *                   throttle.c  the server-wide budget, after the exports'
 *                               (no wait is left on it).
 *                   throttle.c  throttle_metric_unload (lib/).
 */

#ifndef THROTTLE_LIFECYCLE_H
#define THROTTLE_LIFECYCLE_H
#endif /* THROTTLE_LIFECYCLE_H */
