/* sse_filter: an event stream passed through whole events at a time,
 * leaving out OpenAI's usage-only chunk.
 *
 * When the proxy asks an OpenAI-format provider for a stream's usage on a
 * client's behalf (stream_options.include_usage, deployments.<n>.
 * stream_usage: inject), the provider adds a last chunk whose "choices" is
 * an empty array and whose "usage" holds the counts. A client that did not
 * ask for it may not expect it: `chunk.choices[0]` fails on it. The filter
 * hands on every other event byte for byte, as soon as its blank line has
 * arrived, and holds back that one; the caller reads the usage from the
 * whole stream (usage_sse) before filtering.
 *
 * An event is held until it is complete (split by sse_framer.h as the SSE
 * specification says: lines end in CRLF, LF or CR, an event in a blank
 * line); one longer than SSE_FILTER_MAX_EVENT turns the filter into a
 * plain pass-through for the rest of the stream (such an event carries
 * text, not usage).
 *
 * No globals; one filter per stream, used by one thread. */
#ifndef SLUICE_SSE_FILTER_H
#define SLUICE_SSE_FILTER_H

#include <stddef.h>

#define SSE_FILTER_MAX_EVENT (1024 * 1024)

typedef struct sse_filter sse_filter;

/* What passes goes to out (data, len); out returns 0, 1 (passed, but the
 * receiver wants no more for now) or < 0 (the receiver is gone: stop). */
typedef int (*sse_filter_out)(void *ud, const char *data, size_t len);

/* A new filter, or NULL when out of memory. */
sse_filter *sse_filter_new(sse_filter_out out, void *ud);
void sse_filter_free(sse_filter *f);

/* Feeds len bytes. Returns 0, 1 when an out call returned 1, < 0 when one
 * returned < 0 (nothing more is passed) or memory ran out (what was held
 * is passed first, then the filter passes everything through). */
int sse_filter_feed(sse_filter *f, const char *data, size_t len);

/* The stream ended: passes what is held (an event without its blank line,
 * as it came); anything fed after it passes through. Returns as
 * sse_filter_feed. */
int sse_filter_flush(sse_filter *f);

/* strip 0: usage-only chunks pass too (the filter then only passes
 * whole events); 1, the default: they are left out. */
void sse_filter_set_strip(sse_filter *f, int strip);

/* Usage-only chunks left out so far. */
unsigned sse_filter_dropped(const sse_filter *f);

#endif
