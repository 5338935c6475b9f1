/* dproto: the client side of sluiced's commands (docs/protocol.md): the
 * requests libsluice sends and the meaning of the replies it gets.
 *
 * Requests are RESP2 multibulk frames appended to a resp_buf (lib/core/resp.h).
 * Replies arrive as rreply trees (rreply.h) and are turned into SL_E*
 * codes, grants, shed reasons and retry-after hints. Error replies are
 * recognised by their first word (SHED, NORETRY, CLOSING, UNAVAIL,
 * "ERR unknown deployment"); a `retry-after-ms=<n>` anywhere in the text
 * is the hint. Pure functions: no I/O, no globals, thread-safe. */
#ifndef SLUICE_DPROTO_H
#define SLUICE_DPROTO_H

#include <stddef.h>

#include "resp.h"
#include "rreply.h"
#include "sluice.h"
#include "usage_rec.h"

typedef struct dproto_grant {
    char id[96];
    long long waited_ms;
    long long tokens;
    int local;
    char member[65];      /* a group's grant: the member, else "" */
    const char *endpoint; /* a group's grant: the member's endpoint,
                                    borrowed from the reply; else "" */
} dproto_grant;

/* ACQUIRE <dep> TOKENS <n> [MAXWAIT <ms>] [LANE <l>] [TENANT <t>] [TAG <t>].
 * dep may be a group. max_wait_ms < 0 omits MAXWAIT; empty lane, tenant
 * and tag are omitted. */
int dproto_acquire(resp_buf *b, const char *dep, long long tokens, long long max_wait_ms, const char *lane,
                   const char *tenant, const char *tag);

/* The flags of an estimate (dproto_acquire_split's marks). */
enum { DPROTO_EXACT = 1, DPROTO_PARTIAL = 2 };

/* ACQUIRE with the estimate split: INPUT <i> OUTPUT <o> instead of TOKENS
 * when both are >= 0; EXACT when marks has DPROTO_EXACT (the estimate is
 * the provider's own count), PARTIAL when it has DPROTO_PARTIAL (it
 * guesses images, audio or files). */
int dproto_acquire_split(resp_buf *b, const char *dep, long long tokens, long long input, long long output,
                         long long max_wait_ms, const char *lane, const char *tenant, const char *tag, int marks);

/* ESTIMATE with ACQUIRE's arguments (dproto_acquire_split). */
int dproto_estimate(resp_buf *b, const char *dep, long long tokens, long long input, long long output,
                    long long max_wait_ms, const char *lane, const char *tenant, const char *tag, int marks);

/* What an ESTIMATE reply said: granted with the wait, tokens, deployment
 * and source; or a shed (SL_ESHED) with its reason, hint and source. */
typedef struct dproto_estimate_result {
    int granted, local;
    long long wait_ms, tokens, retry_after_ms;
    char deployment[65];
    char reason[24];
} dproto_estimate_result;

/* An ESTIMATE reply: SL_OK (granted), SL_ESHED, or another SL_E* with a
 * message. */
int dproto_estimate_reply(const rreply *r, dproto_estimate_result *e, char *msg, size_t msglen);

/* SETTLE <id> [TOKENS <n>] STATUS <outcome> [HEADER <name> <value>]...
 * actual < 0 omits TOKENS. */
int dproto_settle(resp_buf *b, const char *grant_id, long long actual, sl_outcome outcome, const sl_header *h,
                  size_t nh);

/* SETTLE with the usage u (usage_rec.h; -1 where unknown): INPUT <i>
 * OUTPUT <o> [CACHE_READ <c>] [CACHE_WRITE <w>] when input and output are
 * known (the cache counts when > 0), else TOKENS <n> when tokens is, else
 * neither. */
int dproto_settle_usage(resp_buf *b, const char *grant_id, const usage_rec *u, sl_outcome outcome, const sl_header *h,
                        size_t nh);

int dproto_retry(resp_buf *b, const char *dep);
int dproto_ping(resp_buf *b);

/* The SL_E* code of an error reply's text (without the leading '-'),
 * with its shed reason (when SHED: the word after it, "" otherwise) and
 * retry-after-ms (-1 when absent). */
int dproto_error(const char *text, char *reason, size_t reason_len, long long *retry_after_ms);

/* An ACQUIRE reply: SL_OK and *g (3 elements for a deployment; 5 for a
 * group: also the member and its endpoint, g->endpoint valid while r is);
 * SL_ESHED with reason and hint; or another SL_E* with a message. An
 * array that is not a grant is SL_EPROTO; g->id is then set when it held
 * a grant id, so the caller can give that reservation back. */
int dproto_acquire_reply(const rreply *r, dproto_grant *g, char *reason, size_t reason_len, long long *retry_after_ms,
                         char *msg, size_t msglen);

/* A RETRY reply: SL_OK with *allowed 1/0 (and a hint when 0), or SL_E*. */
int dproto_retry_reply(const rreply *r, int *allowed, long long *retry_after_ms, char *msg, size_t msglen);

/* Any reply that should be +OK / +PONG: SL_OK or the error's SL_E*. */
int dproto_ok_reply(const rreply *r, char *msg, size_t msglen);

#endif
