/* nbdkit-throttle filter: server shutdown, told apart from a client
 * that is done, and (nbdkit < 1.33.10) a closing connection's error
 * replies kept apart.
 *
 * When each hook is called, and why then: throttle-lifecycle.h.
 */

#ifndef THROTTLE_QUIT_H
#define THROTTLE_QUIT_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

#include <nbdkit-filter.h>

/* Starts the prober thread; -1 after nbdkit_error if it cannot. */
extern int throttle_quit_start (void);
/* Wakes and joins it; no request may be waiting. */
extern void throttle_quit_stop (void);

/* For a request thread deciding whether to abandon a wait: true if
 * nbdkit is shutting down.  Costs a system call; when this thread's
 * own nbdkit_nanosleep fails (a shutdown, or its client is done) also a
 * round trip to the thread that tells which, as it does every time
 * once the client is done.  Logs nbdkit's error line ("aborting
 * sleep ...") only when the server is shutting down, or once in a
 * thread whose client is done.
 */
extern bool throttle_quit_confirm (void);

/* Error replies of a closing connection are paced only for nbdkit
 * before 1.33.10, which aborts when they race (raw_send_socket's
 * assertion; fixed upstream by commit 9d82aa4f): see throttle-quit.c.
 * -DTHROTTLE_PACE_ERRORS=1 forces it on, to measure what it costs.
 */
#ifndef THROTTLE_PACE_ERRORS
#if NBDKIT_VERSION_MAJOR == 1 && \
  (NBDKIT_VERSION_MINOR < 33 || \
   (NBDKIT_VERSION_MINOR == 33 && NBDKIT_VERSION_MICRO < 10))
#define THROTTLE_PACE_ERRORS 1
#else
#define THROTTLE_PACE_ERRORS 0
#endif
#endif

#define THROTTLE_PACE_MS 10

#if THROTTLE_PACE_ERRORS
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
#else
struct throttle_pace {
  char unused;
};

static inline void throttle_pace_init (struct throttle_pace *p) { }
static inline void throttle_pace_destroy (struct throttle_pace *p) { }
static inline void throttle_pace_error (struct throttle_pace *p) { }
#endif

#endif /* THROTTLE_QUIT_H */
