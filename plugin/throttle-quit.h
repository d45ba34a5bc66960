/* nbdkit-throttle filter: server shutdown, told apart from a client
 * that is done, and a closing connection's error replies kept apart.
 *
 * Call order, from throttle.c:
 *   .after_fork   throttle_quit_start (starts the watcher thread)
 *   .cleanup      throttle_quit_stop (wakes and joins it)
 *   .open/.close  throttle_pace_init / throttle_pace_destroy
 *   data callbacks: throttle_pace_error before returning -1
 */

#ifndef THROTTLE_QUIT_H
#define THROTTLE_QUIT_H

#include <stdbool.h>
#include <stdint.h>
#include <pthread.h>

/* Returns -1 after nbdkit_error if the thread cannot start. */
extern int throttle_quit_start (void);
extern void throttle_quit_stop (void);

/* True once nbdkit is shutting down (a signal, or the end of --run).
 * Never true because of what a client did.  Cheap: an atomic load.
 */
extern bool throttle_quitting (void);

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
