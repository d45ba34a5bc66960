/* SPDX-License-Identifier: BSD-3-Clause */
/* nbdkit-throttle filter: the features, in the order the core calls
 * them (core/throttle-feature.h).  The one file that names them all;
 * the core names none.
 *
 * The order, and why it matters:
 * - guards FIRST: .get_ready tries each guard while errors still
 *   reach the user's terminal and decides whether reads are charged
 *   (real-time request threads draw on the allocator's reserve for
 *   their replies; bounding reads keeps that draw bounded), which the
 *   latency target's warning needs; .after_fork sets the guards before
 *   any thread of ours exists, so every thread started later inherits
 *   them.  .before_exports gives throttle-swap's mode to each guard not
 *   given its own, before anything reads them.
 * - realtime, after the guards, which say whether it is permitted and
 *   have locked memory and grown the reserve before its timer
 *   starts (.after_fork); its .thread_enter follows theirs.  .preopen
 *   tells the swap verdict who the peer is and may make nbdkit
 *   real-time before the plugin's open forks anything and before
 *   nbdkit starts the connection's workers (they inherit the policy).
 *   .unload, last of all, stops the real-time timer.
 * - writeback: .preopen refuses a name other than "" in writeback mode
 *   before anything is made or counted for it; .get_ready refuses a
 *   thread model that forbids background writes and (nbdkit <
 *   1.33.10) installs the abort drain; .cleanup drains, stops the
 *   writers and closes their plugin contexts while the plugin is still
 *   loaded, after the control thread, which reads its state.
 * - verdict (with the remote storage's settings), at .get_ready after
 *   every guard was tried: it says at once whether the server is safe
 *   for swap, while stderr is still the user's terminal.
 * - adapt: .before_exports knows the floor before any budget exists;
 *   .after_fork starts the clock; .cleanup stops it, after the control
 *   thread, which can start it.
 * - metrics-file, control LAST: their .config_complete write the
 *   metrics file a first time and bind the socket (misuse refused
 *   before nbdkit forks), and the control thread (.after_fork) starts
 *   once everything it reports on exists; it is the first stopped
 *   (.cleanup) and unloaded (.unload: its thread reads the budgets the
 *   core frees after), then the summary at exit and the metrics file's
 *   last write, with the final numbers.  The summary's .after_fork,
 *   before the control socket's, notes that the server started.
 */

#include <config.h>

#include <nbdkit-filter.h>

#include "throttle-adapt-glue.h"
#include "throttle-control.h"
#include "throttle-control-proto.h"
#include "throttle-feature.h"
#include "throttle-guards.h"
#include "throttle-metrics.h"
#include "throttle-realtime.h"
#include "throttle-verdict.h"
#include "throttle-writeback.h"
#include "throttle-writeback-config.h"
#include "throttle-writeback-writers.h"

static const struct throttle_feature guards = {
  .params = throttle_guards_param_table,
  .before_exports = throttle_guards_config_complete,
  .get_ready = throttle_guards_get_ready,
  .after_fork = throttle_guards_after_fork,
  .thread_enter = throttle_guards_thread_enter,
};

static const struct throttle_feature realtime = {
  .after_fork = throttle_realtime_start,
  .unload = throttle_realtime_stop,
  .preopen = throttle_realtime_open,
  .close = throttle_realtime_close,
  .thread_enter = throttle_realtime_thread_enter,
};

static const struct throttle_feature writeback = {
  .params = throttle_writeback_param_table,
  .config_complete = throttle_writeback_config_complete,
  .get_ready = throttle_writeback_get_ready,
  .cleanup = throttle_writeback_cleanup,
  .list_exports = throttle_writeback_list_exports,
  .preopen = throttle_writeback_preopen,
  .open = throttle_writeback_conn_open,
  .finalize = throttle_writeback_conn_finalize,
  .close = throttle_writeback_conn_close,
};

static const struct throttle_feature verdict = {
  .params = throttle_verdict_param_table,
  .plugin_key = throttle_verdict_plugin_key,
  .get_ready = throttle_verdict_get_ready,
  .after_fork = throttle_verdict_after_fork,
};

static const struct throttle_feature adapt = {
  .params = throttle_adapt_param_table,
  .before_exports = throttle_adapt_config_complete,
  .get_ready = throttle_adapt_get_ready,
  .after_fork = throttle_adapt_after_fork,
  .cleanup = throttle_adapt_cleanup,
  .export_attach = throttle_adapt_export_attach,
  .export_detach = throttle_adapt_export_detach,
};

static const struct throttle_feature metrics_file = {
  .params = throttle_metrics_file_param_table,
  .config_complete = throttle_metrics_file_config_complete,
  .unload = throttle_metrics_file_unload,
};

static const struct throttle_feature summary = {
  .after_fork = throttle_metrics_after_fork,
  .unload = throttle_metrics_summary,
};

static const struct throttle_feature control = {
  .params = throttle_control_param_table,
  .config_complete = throttle_control_config_complete,
  .after_fork = throttle_control_after_fork,
  .cleanup = throttle_control_cleanup,
  .unload = throttle_control_cleanup,
};

const struct throttle_feature *const throttle_features[] = {
  &guards, &realtime, &writeback, &verdict, &adapt,
  &metrics_file, &summary, &control,
  NULL
};
const size_t throttle_nr_features =
  sizeof throttle_features / sizeof throttle_features[0] - 1;

/* What the features report, for the control socket's stats, the
 * metrics and the metrics file (throttle-metrics.h), in the order the
 * outputs give them.
 */
const struct throttle_report throttle_reports[] = {
  { throttle_adapt_stats_json, NULL },
  { throttle_writeback_stats_json, throttle_writeback_metrics },
  { throttle_verdict_stats_json, throttle_verdict_metrics },
  { throttle_realtime_stats_json, NULL },
  { NULL }
};

/* The control socket's set commands (throttle-control-proto.h), in the
 * order help lists them.
 */
const struct throttle_setter throttle_setters[] = {
  { "capacity", "set capacity EXPORT N", true,
    throttle_control_set_capacity },
  { "latency-target", "set latency-target EXPORT DURATION|off", true,
    throttle_adapt_export_set_target },
  { "server-capacity", "set server-capacity N", false,
    throttle_control_set_server_capacity },
  { "rt", "set rt on|off|auto", false, throttle_realtime_set },
  { NULL }
};

/* In the order of the man page's PARAMETERS, not of the table. */
const char throttle_config_help[] =
  throttle_core_config_help "\n"
  throttle_guards_config_help "\n"
  throttle_control_config_help "\n"
  throttle_metrics_file_config_help "\n"
  throttle_writeback_config_help "\n"
  throttle_adapt_config_help "\n"
  throttle_verdict_config_help;
