/* usage_sse: the usage a streamed response reports, read from its
 * server-sent events as they pass through.
 *
 * A reader is fed the bytes of an event stream in whatever pieces they
 * arrive (a line, an event or a field may be cut anywhere, even between
 * CR and LF) and never changes them: the caller forwards the very bytes it
 * fed, so a proxy can settle a stream without buffering it. It splits the
 * stream into events with sse_framer.h (the SSE specification's rules:
 * line ends, `data:` lines joined with LF, `event:`, comments, a blank
 * line dispatches, a leading BOM skipped) and reads the usage of each
 * event whose data mentions "usage" with usage.h's parser (usage_split),
 * so whole bodies and streams are read by one set of rules:
 *   - OpenAI and Azure chat completions: the last chunk, sent when the
 *     request asked for stream_options.include_usage (choices empty,
 *     usage prompt_tokens / completion_tokens / total_tokens);
 *   - the Responses API: response.completed (and .incomplete, .failed),
 *     whose response.usage has input_tokens / output_tokens;
 *   - Anthropic: message_start (message.usage: the input, cache reads and
 *     writes, the first output token) and message_delta (usage: the
 *     output so far, cumulative).
 * Counts are cumulative in every provider, so per field the largest seen
 * wins. The reader also notes the stream's end marker (`data: [DONE]`,
 * message_stop, response.completed / incomplete / failed) and an error
 * event, so a caller can tell a finished stream from one cut short.
 *
 * An event's data beyond USAGE_SSE_MAX_EVENT bytes (usage.h's
 * USAGE_MAX_BODY, the most usage_split reads) is not kept; the stream is
 * still followed. It is that large because a usage event may carry far
 * more than usage: the Responses API's response.completed holds the whole
 * response (its output, base64 images of image_generation_call included,
 * and the instructions echoed) before its usage.
 *
 * Depends on sse_framer.h and usage.h (jansson). No globals; a reader is used by one
 * thread at a time. Ownership: usage_sse_new() returns a reader freed
 * with usage_sse_free() (NULL is a no-op). */
#ifndef SLUICE_USAGE_SSE_H
#define SLUICE_USAGE_SSE_H

#include <stddef.h>

#include "usage.h"

#define USAGE_SSE_MAX_EVENT USAGE_MAX_BODY

typedef struct usage_sse usage_sse;

/* A new reader, or NULL when out of memory. */
usage_sse *usage_sse_new(void);

void usage_sse_free(usage_sse *r);

/* Reads len bytes of the stream (data is not modified). Returns 0, or -1
 * when out of memory (that event's data is dropped; the counts so far
 * stand and reading goes on). */
int usage_sse_feed(usage_sse *r, const char *data, size_t len);

/* The usage reported so far: 0 with *out filled (as usage_split does:
 * input all of the prompt, cache reads and writes included; tokens the
 * combined count), or -1 with every field -1 when no event reported any. */
int usage_sse_result(const usage_sse *r, usage_rec *out);

/* What the stream has shown so far. */
typedef struct usage_sse_state {
    unsigned long long events; /* events dispatched */
    int usage_events;          /* events that reported usage */
    int final_usage;           /* OpenAI's usage chunk, response.completed, or Anthropic's message_delta */
    int done;                  /* the end marker: [DONE], message_stop, response.completed / incomplete / failed */
    int error;                 /* an `event: error`, or data whose top level has "error" */
    int oversized;             /* events whose data exceeded USAGE_SSE_MAX_EVENT */
} usage_sse_state;

void usage_sse_get_state(const usage_sse *r, usage_sse_state *out);

#endif
