/* sse_framer: a server-sent event stream split into its events, the one
 * framer of the project (usage_sse reads usage out of a stream with it,
 * the proxy's sse_filter passes a stream on event by event with it).
 *
 * A framer is fed the bytes of a stream in whatever pieces they arrive (a
 * line, a field or a line end may be cut anywhere, even between CR and
 * LF) and calls back once for each block of lines that a blank line ends,
 * as the SSE specification (HTML, "Interpreting an event stream") reads
 * one:
 *   - lines end in CRLF, LF or CR; a leading UTF-8 BOM is skipped;
 *   - a line is `field: value` (one space after the ':' is dropped), a
 *     line without ':' is a field with an empty value, a line starting
 *     with ':' is a comment;
 *   - `data:` lines are joined with LF; `event:` names the event (the
 *     last one wins); `id:` sets the last event ID, which stays for later
 *     events (a value with a NUL, or longer than SSE_FRAMER_ID_MAX, is
 *     ignored); other fields (`retry:`, unknown names) are ignored;
 *   - a blank line ends the block. A block without a data line is what
 *     the specification dispatches no event for (comments, keep-alives,
 *     an id alone): it is still called back, with data_lines 0, so that a
 *     caller passing the stream on sees every byte; a reader of events
 *     skips it;
 *   - what follows the last blank line is not an event (the specification
 *     discards it at the end of the stream); with SSE_FRAMER_RAW its bytes
 *     stay held (sse_framer_held) for a caller that passes them on.
 *
 * With SSE_FRAMER_RAW the framer also keeps the bytes of the block as
 * they came, through its blank line's whole line end, and hands them to
 * the callback: a CR that is the last byte fed and ends a blank line may
 * be the first half of a CRLF, so that block is called back when the
 * next byte arrives. Without it nothing but the current event's data is
 * kept (one pass, values copied in runs) and a block is called back at
 * its blank line's first line-end byte.
 *
 * Depends on nothing but libc. No globals; a framer is used by one thread
 * at a time. Ownership: sse_framer_new() returns a framer freed with
 * sse_framer_free() (NULL is a no-op); what an event points at is the
 * framer's, valid during the callback only. */
#ifndef SLUICE_SSE_FRAMER_H
#define SLUICE_SSE_FRAMER_H

#include <stddef.h>

#define SSE_FRAMER_TYPE_MAX 64 /* longest event name kept */
#define SSE_FRAMER_ID_MAX 256  /* longest event ID kept */

/* Flags of sse_framer_new. */
#define SSE_FRAMER_RAW 1 /* keep each block's bytes (sse_framer_event.raw) */

/* One block of the stream, ended by a blank line. */
typedef struct sse_framer_event {
    const char *type;    /* the event: field's value, "" when none (the spec's "message") or too long */
    const char *data;    /* the data: lines joined with LF, NUL-terminated; "" when none or dropped */
    size_t data_len;     /* bytes of data */
    unsigned data_lines; /* data: lines in the block; 0: the spec dispatches no event for it */
    int data_dropped;    /* its data exceeded max_data or memory ran out: data is "" */
    int type_long;       /* the event name was longer than SSE_FRAMER_TYPE_MAX */
    const char *id;      /* the last event ID so far, "" when none */
    const char *raw;     /* SSE_FRAMER_RAW: the block's bytes as they came; else NULL */
    size_t raw_len;
} sse_framer_event;

/* Called once per block. Returns 0 to go on, < 0 to stop: the feed
 * returns that value and reads nothing more (the framer is then only
 * good for sse_framer_held and sse_framer_free). */
typedef int (*sse_framer_fn)(void *ud, const sse_framer_event *ev);

typedef struct sse_framer sse_framer;

/* A new framer calling fn(ud, ...) per block, or NULL when out of memory.
 * An event's data beyond max_data bytes is dropped (SIZE_MAX: no bound);
 * flags: 0 or SSE_FRAMER_RAW. */
sse_framer *sse_framer_new(size_t max_data, int flags, sse_framer_fn fn, void *ud);

void sse_framer_free(sse_framer *f);

/* Reads len bytes (data is not modified), calling back for each block
 * they complete. Returns 0; a callback's value < 0 (see sse_framer_fn);
 * or -1 when memory ran out: with SSE_FRAMER_RAW nothing of data was read
 * (the framer is as it was; the caller may pass data on itself), without
 * it an event's data was dropped (data_dropped) and the rest was read. */
int sse_framer_feed(sse_framer *f, const char *data, size_t len);

/* SSE_FRAMER_RAW: the bytes fed and not yet handed to a callback (the
 * block being read, and one whose CR may still be followed by LF);
 * *len their count. Borrowed until the next feed. Without the flag, NULL
 * and 0. */
const char *sse_framer_held(const sse_framer *f, size_t *len);

#endif
