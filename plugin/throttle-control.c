/* nbdkit-throttle filter: the control socket and the periodic stats.
 *
 * One thread runs a libev loop that serves line-oriented commands on a
 * Unix socket (see CONTROL SOCKET in nbdkit-throttle-filter(1)).  The
 * loop never blocks: sockets are non-blocking, each client has a
 * bounded input line and a bounded output, a client that stops reading
 * is no longer read from and is dropped when idle, and the only locks
 * taken are the export registry's and a budget's, each held for a copy.
 * So no operator's client can stall the data path or the other
 * operators.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <ev.h>

#include <nbdkit-filter.h>

#include "throttle.h"
#include "throttle-adapt-glue.h"
#include "throttle-control.h"
#include "throttle-export.h"
#include "throttle-parse.h"

/* A command line, without its newline, is at most this long. */
#define MAX_LINE 1024
/* What a client may have queued for it, all replies together. */
#define MAX_OUTPUT (4 * 1024 * 1024)
#define MAX_CLIENTS 32
#define DEFAULT_IDLE_TIMEOUT 30

/* -D throttle.control_timeout=SECS: the idle timeout of a control
 * client (default 30 s).  Tests shorten it.
 */
NBDKIT_DLL_PUBLIC int throttle_debug_control_timeout = 0;

static char *socket_path;
static double stats_interval;      /* 0 = off */

static int listen_fd = -1;
static pid_t owner_pid;            /* the process that may remove the socket */
static dev_t socket_dev;
static ino_t socket_ino;

static throttle_control_extra_stats_fn extra_stats[THROTTLE_CONTROL_MAX_EXTRA];

static struct ev_loop *control_loop;
static ev_async stop_watcher;
static ev_io accept_watcher;
static ev_timer accept_retry;
static ev_timer stats_timer;
static pthread_t thread;
static bool thread_running;

/* --- growing output buffers ------------------------------------------ */

struct sbuf {
  char *p;
  size_t len, cap;
  bool failed;                /* out of memory or over MAX_OUTPUT */
};

static void
sb_append (struct sbuf *b, const char *s, size_t n)
{
  if (b->failed)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    char *p;

    while (cap < b->len + n + 1)
      cap *= 2;
    if (cap > MAX_OUTPUT + 1) {
      if (b->len + n + 1 > MAX_OUTPUT + 1) {
        b->failed = true;
        return;
      }
      cap = MAX_OUTPUT + 1;
    }
    p = realloc (b->p, cap);
    if (p == NULL) {
      b->failed = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy (b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void
sb_puts (struct sbuf *b, const char *s)
{
  sb_append (b, s, strlen (s));
}

static void sb_printf (struct sbuf *b, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

static void
sb_printf (struct sbuf *b, const char *fmt, ...)
{
  char tmp[512];
  va_list ap;
  int n;

  va_start (ap, fmt);
  n = vsnprintf (tmp, sizeof tmp, fmt, ap);
  va_end (ap);
  if (n < 0 || (size_t) n >= sizeof tmp)
    b->failed = true;         /* only used for short, bounded output */
  else
    sb_append (b, tmp, n);
}

static void
sb_free (struct sbuf *b)
{
  free (b->p);
  memset (b, 0, sizeof *b);
}

/* --- JSON strings ------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one.
 * Export names are meant to be UTF-8 but nothing guarantees it, and
 * the reply must stay valid JSON whatever the client named.
 */
static size_t
utf8_len (const unsigned char *s)
{
  unsigned char c = s[0];
  size_t n, i;

  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef)
    n = 3;
  else if (c >= 0xf0 && c <= 0xf4)
    n = 4;
  else
    return 0;
  for (i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80)
      return 0;
  /* Overlong forms, surrogates, and above U+10FFFF. */
  if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) ||
      (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))
    return 0;
  return n;
}

typedef void (*emit_fn) (void *opaque, const char *s, size_t n);

static void
json_escape (const char *str, emit_fn emit, void *opaque)
{
  const unsigned char *s = (const unsigned char *) str;
  char esc[8];
  size_t n;

  emit (opaque, "\"", 1);
  while (*s) {
    if (*s == '"' || *s == '\\') {
      esc[0] = '\\';
      esc[1] = *s++;
      emit (opaque, esc, 2);
    }
    else if (*s < 0x20 || *s == 0x7f) {
      snprintf (esc, sizeof esc, "\\u%04x", *s++);
      emit (opaque, esc, 6);
    }
    else if (*s < 0x80) {
      emit (opaque, (const char *) s, 1);
      s++;
    }
    else if ((n = utf8_len (s)) > 0) {
      emit (opaque, (const char *) s, n);
      s += n;
    }
    else {
      emit (opaque, "\\ufffd", 6);
      s++;
    }
  }
  emit (opaque, "\"", 1);
}

static void
emit_sbuf (void *opaque, const char *s, size_t n)
{
  sb_append (opaque, s, n);
}

static void
sb_json_string (struct sbuf *b, const char *s)
{
  json_escape (s, emit_sbuf, b);
}

struct fixed_out {
  char *out;
  size_t len, pos;
};

static void
emit_fixed (void *opaque, const char *s, size_t n)
{
  struct fixed_out *f = opaque;
  size_t i;

  for (i = 0; i < n; i++, f->pos++)
    if (f->pos + 1 < f->len)
      f->out[f->pos] = s[i];
}

size_t
throttle_control_json_string (char *out, size_t len, const char *s)
{
  struct fixed_out f = { .out = out, .len = len, .pos = 0 };

  json_escape (s, emit_fixed, &f);
  if (len > 0)
    out[f.pos < len ? f.pos : len - 1] = '\0';
  return f.pos;
}

void
throttle_control_add_extra_stats (throttle_control_extra_stats_fn fn)
{
  size_t i;

  for (i = 0; i < THROTTLE_CONTROL_MAX_EXTRA; i++)
    if (extra_stats[i] == NULL || extra_stats[i] == fn) {
      extra_stats[i] = fn;
      return;
    }
  abort ();                   /* a new caller: raise the maximum */
}

/* --- stats ------------------------------------------------------------- */

static void
append_extra (struct sbuf *b, struct throttle_export *exp)
{
  char tmp[4096];
  size_t i;

  for (i = 0; i < THROTTLE_CONTROL_MAX_EXTRA && extra_stats[i]; i++) {
    tmp[0] = '\0';
    extra_stats[i] (exp, tmp, sizeof tmp);
    /* Half a member would make the whole reply unparseable. */
    if (tmp[0] != '\0' && memchr (tmp, '\0', sizeof tmp - 1) != NULL) {
      sb_puts (b, ",");
      sb_puts (b, tmp);
    }
  }
}

struct stats_ctx {
  struct sbuf *b;
  unsigned n;
};

static void
append_export (struct throttle_export *exp, void *opaque)
{
  struct stats_ctx *ctx = opaque;
  struct sbuf *b = ctx->b;
  struct throttle_stats s;

  throttle_budget_get_stats (&exp->budget, &s);
  if (ctx->n++ > 0)
    sb_puts (b, ",");
  sb_puts (b, "{\"name\":");
  sb_json_string (b, exp->name);
  sb_printf (b, ",\"capacity\":%" PRIu64 ",\"in_flight\":%" PRIu64
             ",\"peak\":%" PRIu64 ",\"charged\":%" PRIu64
             ",\"admitted\":%" PRIu64 ",\"waited\":%" PRIu64
             ",\"cancelled\":%" PRIu64 ",\"clamped\":%" PRIu64,
             s.capacity, s.in_flight, s.peak, s.charged,
             s.admitted, s.waited, s.cancelled, s.clamped);
  sb_printf (b, ",\"wait_ns_total\":%" PRIu64 ",\"wait_ns_max\":%" PRIu64
             ",\"waiters\":%" PRIu64,
             s.wait_ns_total, s.wait_ns_max, s.waiters);
  append_extra (b, exp);
  sb_puts (b, "}");
}

/* The stats of one export (exp != NULL), or of a page of at most
 * STATS_PAGE exports from the from'th, as one line of JSON without the
 * newline.  A page of the longest names (4096 bytes, each byte escaped
 * to 6) with their writeback members stays well under MAX_OUTPUT.
 */
#define STATS_PAGE 100

static void
build_stats (struct sbuf *b, struct throttle_export *exp, size_t from)
{
  struct sbuf page = { 0 };
  struct stats_ctx ctx = { .b = &page, .n = 0 };
  size_t total;

  /* The exports first, to know how many there are in all. */
  if (exp) {
    append_export (exp, &ctx);
    total = throttle_export_count ();
  }
  else
    total = throttle_export_foreach_range (from, STATS_PAGE,
                                           append_export, &ctx);

  sb_puts (b, "{\"metric\":");
  sb_json_string (b, throttle_config.metric.name ? throttle_config.metric.name
                  : "");
  sb_printf (b, ",\"default_capacity\":%" PRIu64 ",\"exports_total\":%zu",
             throttle_config.capacity, total);
  if (exp == NULL) {
    sb_printf (b, ",\"from\":%zu", from);
    if (from + ctx.n < total)
      sb_printf (b, ",\"next\":%zu", from + ctx.n);
    else
      sb_puts (b, ",\"next\":null");
  }
  append_extra (b, NULL);
  sb_puts (b, ",\"exports\":[");
  if (page.failed)
    b->failed = true;
  else if (page.len > 0)
    sb_append (b, page.p, page.len);
  sb_puts (b, "]}");
  sb_free (&page);
}

/* --- commands ---------------------------------------------------------- */

static void reply_error (struct sbuf *out, const char *fmt, ...)
  __attribute__ ((format (printf, 2, 3)));

static void
reply_error (struct sbuf *out, const char *fmt, ...)
{
  char msg[2048];
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  sb_puts (out, "{\"error\":");
  sb_json_string (out, msg);
  sb_puts (out, "}\n");
}

static void
reply_unknown_export (struct sbuf *out, const char *name)
{
  reply_error (out, "unknown export \"%s\": it has no budget of its own "
               "(only \"\" and the names the plugin has listed have one; "
               "other names are charged to \"\")", name);
}

/* Reply with the stats, or with an error saying why they cannot be
 * given: a reply never just goes missing.
 */
static void
reply_stats (struct sbuf *out, struct throttle_export *exp, size_t from)
{
  struct sbuf b = { 0 };

  build_stats (&b, exp, from);
  if (b.failed)
    reply_error (out, "stats: the reply does not fit in %d bytes or memory "
                 "ran out: ask for one export, or a page with stats from N",
                 MAX_OUTPUT);
  else {
    sb_append (out, b.p, b.len);
    sb_puts (out, "\n");
  }
  sb_free (&b);
}

/* Split off the next word of *p, in place.  A word is a run of
 * non-blanks, or a double-quoted string in which \" and \\ stand for
 * " and \ (so "" is the default export's empty name).  Returns 1 and
 * sets *tok, 0 at the end, -1 with *err on a malformed quote.
 */
static int
next_token (char **p, char **tok, const char **err)
{
  char *s = *p, *d;

  while (*s == ' ' || *s == '\t')
    s++;
  if (*s == '\0') {
    *p = s;
    return 0;
  }
  if (*s != '"') {
    *tok = s;
    while (*s && *s != ' ' && *s != '\t')
      s++;
    if (*s)
      *s++ = '\0';
    *p = s;
    return 1;
  }

  *tok = d = ++s;
  for (;;) {
    if (*s == '\0') {
      *err = "unterminated quoted string";
      return -1;
    }
    if (*s == '"') {
      s++;
      break;
    }
    if (*s == '\\') {
      s++;
      if (*s != '"' && *s != '\\') {
        *err = "bad escape in a quoted string: only \\\" and \\\\";
        return -1;
      }
    }
    *d++ = *s++;
  }
  if (*s != '\0' && *s != ' ' && *s != '\t') {
    *err = "no blank after a quoted string";
    return -1;
  }
  *d = '\0';                  /* d < s: the quotes were consumed */
  *p = s;
  return 1;
}

#define MAX_ARGS 4

static void
cmd_set_capacity (struct sbuf *out, const char *name, const char *value)
{
  struct throttle_export *exp = throttle_export_find (name);
  uint64_t previous;
  char err[256];
  int64_t r;

  if (exp == NULL) {
    reply_unknown_export (out, name);
    return;
  }
  /* nbdkit_parse_size also refuses these, but logs its own message. */
  if (value[0] == '-' || value[0] == '\0') {
    reply_error (out, "bad number \"%s\": expected a positive size "
                 "(e.g. 4096, 64M)", value);
    return;
  }
  r = nbdkit_parse_size (value);
  if (r == -1) {
    reply_error (out, "bad number \"%s\": expected a positive size "
                 "(e.g. 4096, 64M)", value);
    return;
  }
  if (r == 0) {
    reply_error (out, "bad number \"%s\": the capacity must be greater "
                 "than 0", value);
    return;
  }
  /* Through the latency target's glue: with a target, this is its
   * ceiling, and the two must not race.
   */
  if (throttle_adapt_export_set_ceiling (exp, r, &previous,
                                         err, sizeof err) == -1) {
    reply_error (out, "%s", err);
    return;
  }
  nbdkit_debug ("throttle: control: export \"%s\" capacity %" PRIu64
                " -> %" PRId64, name, previous, r);
  sb_puts (out, "{\"ok\":true,\"export\":");
  sb_json_string (out, name);
  sb_printf (out, ",\"capacity\":%" PRId64 ",\"previous\":%" PRIu64 "}\n",
             r, previous);
}

static void
cmd_set_latency_target (struct sbuf *out, const char *name, const char *value)
{
  struct throttle_export *exp = throttle_export_find (name);
  uint64_t previous;
  char err[256];

  if (exp == NULL) {
    reply_unknown_export (out, name);
    return;
  }
  if (throttle_adapt_export_set_target (exp, value, &previous,
                                        err, sizeof err) == -1) {
    reply_error (out, "%s", err);
    return;
  }
  nbdkit_debug ("throttle: control: export \"%s\" latency target %s",
                name, value);
  sb_puts (out, "{\"ok\":true,\"export\":");
  sb_json_string (out, name);
  sb_puts (out, ",\"latency_target\":");
  sb_json_string (out, value);
  if (previous)
    sb_printf (out, ",\"previous_ns\":%" PRIu64 "}\n", previous);
  else
    sb_puts (out, ",\"previous_ns\":null}\n");
}

static void
execute (struct sbuf *out, char *line)
{
  char *argv[MAX_ARGS + 1];
  const char *err = NULL;
  int argc = 0, r;
  char *p = line;

  while (argc <= MAX_ARGS && (r = next_token (&p, &argv[argc], &err)) == 1)
    argc++;
  if (err) {
    reply_error (out, "%s", err);
    return;
  }
  if (argc == 0)              /* a blank line: nothing to answer */
    return;
  if (argc > MAX_ARGS) {
    reply_error (out, "too many arguments: try help");
    return;
  }

  if (strcmp (argv[0], "help") == 0) {
    if (argc != 1)
      reply_error (out, "usage: help");
    else
      sb_puts (out, "{\"commands\":[\"stats [EXPORT]\",\"stats from N\","
               "\"set capacity EXPORT N\","
               "\"set latency-target EXPORT DURATION|off\",\"help\"]}\n");
  }
  else if (strcmp (argv[0], "stats") == 0) {
    struct throttle_export *exp = NULL;
    unsigned long long from = 0;
    char *end;

    if (argc == 3 && strcmp (argv[1], "from") == 0) {
      errno = 0;
      from = strtoull (argv[2], &end, 10);
      if (argv[2][0] < '0' || argv[2][0] > '9' || *end != '\0' ||
          errno || from > SIZE_MAX) {
        reply_error (out, "bad number \"%s\": expected the index of the "
                     "first export of the page (0, or the \"next\" of the "
                     "page before)", argv[2]);
        return;
      }
    }
    else if (argc > 2) {
      reply_error (out, "usage: stats [EXPORT] or stats from N");
      return;
    }
    else if (argc == 2 && (exp = throttle_export_find (argv[1])) == NULL) {
      reply_unknown_export (out, argv[1]);
      return;
    }
    reply_stats (out, exp, from);
  }
  else if (strcmp (argv[0], "set") == 0) {
    if (argc == 4 && strcmp (argv[1], "capacity") == 0)
      cmd_set_capacity (out, argv[2], argv[3]);
    else if (argc == 4 && strcmp (argv[1], "latency-target") == 0)
      cmd_set_latency_target (out, argv[2], argv[3]);
    else
      reply_error (out, "usage: set capacity EXPORT N, or "
                   "set latency-target EXPORT DURATION|off "
                   "(the default export is \"\")");
  }
  else
    reply_error (out, "unknown command \"%s\": try help", argv[0]);
}

/* --- clients ----------------------------------------------------------- */

struct client {
  struct client *prev, *next;
  int fd;
  ev_io rio, wio;
  ev_timer idle;
  bool closing;               /* close once the output is flushed */
  struct sbuf out;
  size_t outoff;              /* how much of out was sent */
  size_t inlen;
  char in[MAX_LINE + 2];      /* a line, its '\n', and a NUL */
};

static struct client *clients;
static unsigned nclients;

static double
idle_timeout (void)
{
  return throttle_debug_control_timeout > 0 ?
    throttle_debug_control_timeout : DEFAULT_IDLE_TIMEOUT;
}

static void
drop_client (struct client *c, const char *why)
{
  if (why)
    nbdkit_debug ("throttle: control: client dropped: %s", why);
  ev_io_stop (control_loop, &c->rio);
  ev_io_stop (control_loop, &c->wio);
  ev_timer_stop (control_loop, &c->idle);
  close (c->fd);
  if (c->prev)
    c->prev->next = c->next;
  else
    clients = c->next;
  if (c->next)
    c->next->prev = c->prev;
  nclients--;
  sb_free (&c->out);
  free (c);
}

/* Send what can be sent now.  Returns false if the client was dropped. */
static bool
flush_client (struct client *c)
{
  while (c->outoff < c->out.len) {
    ssize_t n = send (c->fd, c->out.p + c->outoff, c->out.len - c->outoff,
                      MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == -1) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        break;
      drop_client (c, strerror (errno));
      return false;
    }
    c->outoff += n;
    ev_timer_again (control_loop, &c->idle);
  }

  if (c->outoff == c->out.len) {
    c->out.len = c->outoff = 0;
    ev_io_stop (control_loop, &c->wio);
    if (c->closing) {
      drop_client (c, NULL);
      return false;
    }
    ev_io_start (control_loop, &c->rio);
  }
  else {
    /* Read no more commands from a client that does not read its
     * replies: its output stays bounded, and the idle timer drops it.
     */
    ev_io_stop (control_loop, &c->rio);
    ev_io_start (control_loop, &c->wio);
  }
  return true;
}

static void
process_lines (struct client *c)
{
  char *nl;

  while (!c->closing && (nl = memchr (c->in, '\n', c->inlen)) != NULL) {
    size_t len = nl - c->in;

    if (memchr (c->in, '\0', len) != NULL)
      reply_error (&c->out, "NUL byte in a command");
    else {
      *nl = '\0';
      if (len > 0 && c->in[len - 1] == '\r')
        c->in[len - 1] = '\0';
      execute (&c->out, c->in);
    }
    memmove (c->in, nl + 1, c->inlen - len - 1);
    c->inlen -= len + 1;
  }
  if (!c->closing && c->inlen > MAX_LINE) {
    reply_error (&c->out, "line too long (more than %d bytes): closing",
                 MAX_LINE);
    c->inlen = 0;
    c->closing = true;
  }
}

static void
client_read_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  struct client *c = w->data;
  ssize_t n;

  n = recv (c->fd, c->in + c->inlen, MAX_LINE + 1 - c->inlen, MSG_DONTWAIT);
  if (n == -1) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      drop_client (c, strerror (errno));
    return;
  }
  if (n == 0) {
    /* A half-written last line is dropped: it may be cut anywhere. */
    c->closing = true;
    if (c->out.len == c->outoff)
      drop_client (c, c->inlen ? "closed in the middle of a line" : NULL);
    else
      ev_io_stop (loop, &c->rio);
    return;
  }
  c->inlen += n;
  ev_timer_again (loop, &c->idle);
  process_lines (c);
  if (c->out.failed) {
    drop_client (c, "its replies back up");
    return;
  }
  flush_client (c);
}

static void
client_write_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  flush_client (w->data);
}

static void
client_idle_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  struct client *c = w->data;
  static const char msg[] = "{\"error\":\"idle for too long: closing\"}\n";

  /* Best effort: if even this does not fit, the client is not reading. */
  if (c->out.len == c->outoff)
    (void) !send (c->fd, msg, sizeof msg - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  drop_client (c, "idle");
}

static void
accept_cb (struct ev_loop *loop, ev_io *w, int revents)
{
  static const char busy[] = "{\"error\":\"too many control clients\"}\n";
  struct client *c;
  int fd;

  fd = accept4 (listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd == -1) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
        errno == ENOMEM) {
      /* The connection stays queued and the socket readable: stop
       * watching for a while instead of spinning.
       */
      nbdkit_debug ("throttle: control: accept: %m: pausing for 1 s");
      ev_io_stop (loop, &accept_watcher);
      ev_timer_start (loop, &accept_retry);
    }
    return;
  }
  if (nclients >= MAX_CLIENTS ||
      (c = calloc (1, sizeof *c)) == NULL) {
    (void) !send (fd, busy, sizeof busy - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    close (fd);
    return;
  }
  c->fd = fd;
  ev_io_init (&c->rio, client_read_cb, fd, EV_READ);
  ev_io_init (&c->wio, client_write_cb, fd, EV_WRITE);
  ev_init (&c->idle, client_idle_cb);
  c->idle.repeat = idle_timeout ();
  c->rio.data = c->wio.data = c->idle.data = c;
  ev_io_start (loop, &c->rio);
  ev_timer_again (loop, &c->idle);
  c->next = clients;
  if (clients)
    clients->prev = c;
  clients = c;
  nclients++;
}

static void
accept_retry_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  ev_io_start (loop, &accept_watcher);
}

/* One line per page of exports, so that no line grows without bound. */
static void
stats_cb (struct ev_loop *loop, ev_timer *w, int revents)
{
  size_t from = 0, total;

  do {
    struct sbuf b = { 0 };

    build_stats (&b, NULL, from);
    if (b.failed)
      nbdkit_debug ("throttle: stats: exports from %zu: out of memory", from);
    else
      nbdkit_debug ("throttle: stats %s", b.p);
    sb_free (&b);
    from += STATS_PAGE;
    total = throttle_export_count ();
  } while (from < total);
}

static void
stop_cb (struct ev_loop *loop, ev_async *w, int revents)
{
  ev_break (loop, EVBREAK_ALL);
}

static void *
control_thread (void *arg)
{
  ev_run (control_loop, 0);
  return NULL;
}

/* --- configuration and life cycle -------------------------------------- */

int
throttle_control_config (const char *key, const char *value)
{
  if (strcmp (key, "throttle-control") == 0) {
    struct sockaddr_un sun;

    if (value[0] == '\0') {
      nbdkit_error ("throttle-control: empty value: expected the path "
                    "of a Unix socket");
      return -1;
    }
    free (socket_path);
    /* nbdkit changes to / when it forks into the background. */
    socket_path = nbdkit_absolute_path (value);
    if (socket_path == NULL)
      return -1;
    if (strlen (socket_path) >= sizeof sun.sun_path) {
      nbdkit_error ("throttle-control=%s: path too long for a Unix socket "
                    "(at most %zu bytes)", value, sizeof sun.sun_path - 1);
      return -1;
    }
    return 1;
  }
  if (strcmp (key, "throttle-stats-interval") == 0)
    return throttle_parse_seconds (key, value, 0.001, 86400,
                                   "expected a number of seconds from "
                                   "0.001 to 86400", &stats_interval);
  return 0;
}

/* Bind now, before nbdkit forks, so that a bad path stops the server
 * with an error instead of leaving a daemon without its socket.
 */
static int
bind_socket (void)
{
  struct sockaddr_un sun = { .sun_family = AF_UNIX };
  struct stat st;
  mode_t old_umask;
  int fd, r;

  strcpy (sun.sun_path, socket_path);

  if (lstat (socket_path, &st) == 0) {
    if (!S_ISSOCK (st.st_mode)) {
      nbdkit_error ("throttle-control=%s: exists and is not a socket: "
                    "refusing to replace it", socket_path);
      return -1;
    }
    /* A socket somebody serves is not stale. */
    fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd == -1) {
      nbdkit_error ("socket: %m");
      return -1;
    }
    r = connect (fd, (struct sockaddr *) &sun, sizeof sun);
    close (fd);
    if (r == 0) {
      nbdkit_error ("throttle-control=%s: another process is serving "
                    "this socket", socket_path);
      return -1;
    }
    if (unlink (socket_path) == -1 && errno != ENOENT) {
      nbdkit_error ("throttle-control=%s: cannot remove the stale socket: %m",
                    socket_path);
      return -1;
    }
  }
  else if (errno != ENOENT) {
    nbdkit_error ("throttle-control=%s: %m", socket_path);
    return -1;
  }

  fd = socket (AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd == -1) {
    nbdkit_error ("socket: %m");
    return -1;
  }
  /* Whoever can connect can change the capacity: owner only, from the
   * first instant the name exists.
   */
  if (fchmod (fd, 0600) == -1)
    nbdkit_debug ("throttle: control: fchmod of the socket: %m");
  old_umask = umask (0077);
  r = bind (fd, (struct sockaddr *) &sun, sizeof sun);
  umask (old_umask);
  if (r == -1) {
    nbdkit_error ("throttle-control=%s: bind: %m", socket_path);
    close (fd);
    return -1;
  }
  if (chmod (socket_path, 0600) == -1 || lstat (socket_path, &st) == -1 ||
      listen (fd, MAX_CLIENTS) == -1) {
    nbdkit_error ("throttle-control=%s: %m", socket_path);
    unlink (socket_path);
    close (fd);
    return -1;
  }
  socket_dev = st.st_dev;
  socket_ino = st.st_ino;
  owner_pid = getpid ();
  listen_fd = fd;
  nbdkit_debug ("throttle: control socket %s", socket_path);
  return 0;
}

int
throttle_control_config_complete (void)
{
  if (socket_path)
    return bind_socket ();
  return 0;
}

int
throttle_control_after_fork (void)
{
  sigset_t all, old;
  int err;

  if (listen_fd == -1 && stats_interval == 0)
    return 0;

  owner_pid = getpid ();
  control_loop = ev_loop_new (EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  if (control_loop == NULL) {
    nbdkit_error ("throttle: cannot create the control thread's event loop");
    return -1;
  }
  ev_async_init (&stop_watcher, stop_cb);
  ev_async_start (control_loop, &stop_watcher);
  if (listen_fd >= 0) {
    ev_io_init (&accept_watcher, accept_cb, listen_fd, EV_READ);
    ev_io_start (control_loop, &accept_watcher);
    ev_timer_init (&accept_retry, accept_retry_cb, 1., 0.);
  }
  if (stats_interval > 0) {
    ev_timer_init (&stats_timer, stats_cb, stats_interval, stats_interval);
    ev_timer_start (control_loop, &stats_timer);
  }

  /* Signals are nbdkit's business: the thread inherits a full mask. */
  sigfillset (&all);
  pthread_sigmask (SIG_SETMASK, &all, &old);
  err = pthread_create (&thread, NULL, control_thread, NULL);
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  if (err) {
    errno = err;
    nbdkit_error ("throttle: cannot start the control thread: %m");
    ev_loop_destroy (control_loop);
    control_loop = NULL;
    return -1;
  }
  thread_running = true;
  return 0;
}

void
throttle_control_cleanup (void)
{
  struct stat st;

  if (thread_running) {
    ev_async_send (control_loop, &stop_watcher);
    pthread_join (thread, NULL);
    thread_running = false;
  }
  while (clients)
    drop_client (clients, NULL);
  if (control_loop) {
    ev_loop_destroy (control_loop);
    control_loop = NULL;
  }
  if (listen_fd >= 0) {
    close (listen_fd);
    listen_fd = -1;
    /* Only ours: not a socket another server has since put there. */
    if (getpid () == owner_pid && lstat (socket_path, &st) == 0 &&
        st.st_dev == socket_dev && st.st_ino == socket_ino)
      unlink (socket_path);
  }
}

void
throttle_control_unload (void)
{
  throttle_control_cleanup ();
  free (socket_path);
  socket_path = NULL;
}
