/* nbdkit-throttle filter: server shutdown, told apart from a client
 * that is done, and a closing connection's error replies kept apart.
 *
 * When each hook is called, and why then: throttle-lifecycle.h.
 */

#ifndef THROTTLE_QUIT_H
#define THROTTLE_QUIT_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

/* Starts the watcher thread; -1 after nbdkit_error if it cannot. */
extern int throttle_quit_start (void);
/* Wakes and joins it. */
extern void throttle_quit_stop (void);

/* True once nbdkit is shutting down (a signal, or the end of --run).
 * Never true because of what a client did.  Cheap: an atomic load.
 */
extern bool throttle_quitting (void);

/* For a request thread deciding whether to abandon a wait: true if
 * nbdkit is shutting down.  Unlike throttle_quitting it does not trust
 * the watcher to have run yet: when this thread's own nbdkit_nanosleep
 * fails (a shutdown, or its client is done), it gives the watcher up to
 * THROTTLE_QUIT_CONFIRM_MS to say which.  Costs a system call, and that
 * sleep only while the connection or the server is closing.
 */
extern bool throttle_quit_confirm (void);
#define THROTTLE_QUIT_CONFIRM_MS 20

/* Per connection: when its last paced error reply went out. */
struct throttle_pace {
  pthread_mutex_t lock;       /* held while spacing: one at a time */
  uint64_t last_ns;
};

extern void throttle_pace_init (struct throttle_pace *p);
extern void throttle_pace_destroy (struct throttle_pace *p);

/* Call in a request thread just before a data callback returns -1.
 * Returns at once unless the connection is closing or the server is
 * shutting down; then it returns no sooner than THROTTLE_PACE_MS after
 * the previous paced error of the same connection.
 */
extern void throttle_pace_error (struct throttle_pace *p);

#define THROTTLE_PACE_MS 10

#endif /* THROTTLE_QUIT_H */
