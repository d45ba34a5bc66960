/* SPDX-License-Identifier: BSD-3-Clause */
/* throttle-load --verify: the data every write carries, and the map of
 * what was written, which says which reads can be checked and what to
 * read back at the end.  No libnbd, no libev: tested on its own
 * (tests/test-load-verify.c).
 */

#ifndef LOAD_VERIFY_H
#define LOAD_VERIFY_H

#include <stdbool.h>
#include <stdint.h>

/* What is checked and mapped: a request's offset and size must be
 * multiples of it (throttle-load's sizes are multiples of 512).
 */
#define LOAD_VERIFY_UNIT 512
/* The longest read-back request. */
#define LOAD_VERIFY_CHUNK (1024 * 1024)

/* Every 8-byte word depends only on its absolute offset and the seed,
 * so all writes to a place carry the same data whatever their order,
 * and a read of a place written before is checkable even while other
 * writes to it are in flight.  The seed makes data left by an earlier
 * run fail the check.  No word is zero, so a lost write shows.
 */
extern void load_pattern_fill (void *buf, uint64_t offset, uint32_t size,
                               uint64_t seed);
/* How many LOAD_VERIFY_UNITs of buf, read from offset, differ from the
 * pattern; *first is set to the offset of the first one if any.
 */
extern uint64_t load_pattern_check (const void *buf, uint64_t offset,
                                    uint32_t size, uint64_t seed,
                                    uint64_t *first);

/* The units of the area [start, start + len) that a write completed
 * on.  len is a multiple of LOAD_VERIFY_UNIT.  Single-threaded (the
 * event loop's thread).
 */
struct load_written {
  uint8_t *bits;
  uint64_t start;
  uint64_t units;
  uint64_t next;                /* the next unit load_written_next looks at */
};

/* -1 (errno ENOMEM) if the map cannot be allocated. */
extern int load_written_init (struct load_written *w, uint64_t start,
                              uint64_t len);
extern void load_written_free (struct load_written *w);
/* offset and size within the area, multiples of LOAD_VERIFY_UNIT. */
extern void load_written_mark (struct load_written *w, uint64_t offset,
                               uint32_t size);
extern bool load_written_all (const struct load_written *w, uint64_t offset,
                              uint32_t size);
/* The next stretch of written units, in order, at most
 * LOAD_VERIFY_CHUNK long: false when none is left.
 */
extern bool load_written_next (struct load_written *w, uint64_t *offset,
                               uint32_t *size);
/* How many units are marked written. */
extern uint64_t load_written_count (const struct load_written *w);
/* Whether load_written_next has stretches left to give. */
extern bool load_written_pending (const struct load_written *w);

#endif /* LOAD_VERIFY_H */
