/* dproto: sluiced commands and replies. See dproto.h. */
#include "dproto.h"

#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "vocab.h"

/* The wire names of sl_outcome, in its order (lib/core/vocab.h). */
static const char *const outcome_names[] = {
#define DPROTO_OUTCOME_WORD(name, word) word,
    SLUICE_OUTCOME_MAP(DPROTO_OUTCOME_WORD)
#undef DPROTO_OUTCOME_WORD
};
#define DPROTO_NOUTCOMES (sizeof(outcome_names) / sizeof(outcome_names[0]))
_Static_assert(DPROTO_NOUTCOMES == (size_t)SL_OUTCOME_QUOTA + 1, "an sl_outcome without a wire name");

int dproto_acquire(resp_buf *b, const char *dep, long long tokens, long long max_wait_ms, const char *lane,
                   const char *tenant, const char *tag) {
    return dproto_acquire_split(b, dep, tokens, -1, -1, max_wait_ms, lane, tenant, tag, 0);
}

/* ACQUIRE or ESTIMATE (word): the same arguments. */
static int request(resp_buf *b, const char *word, const char *dep, long long tokens, long long input, long long output,
                   long long max_wait_ms, const char *lane, const char *tenant, const char *tag, int marks) {
    const char *argv[16];
    char tok[24], in[24], out[24], wait[24];
    size_t n = 0;
    argv[n++] = word;
    argv[n++] = dep;
    if (input >= 0 && output >= 0) {
        snprintf(in, sizeof(in), "%lld", input);
        snprintf(out, sizeof(out), "%lld", output);
        argv[n++] = "INPUT";
        argv[n++] = in;
        argv[n++] = "OUTPUT";
        argv[n++] = out;
    } else {
        snprintf(tok, sizeof(tok), "%lld", tokens < 0 ? 0 : tokens);
        argv[n++] = "TOKENS";
        argv[n++] = tok;
    }
    if (max_wait_ms >= 0) {
        snprintf(wait, sizeof(wait), "%lld", max_wait_ms);
        argv[n++] = "MAXWAIT";
        argv[n++] = wait;
    }
    if (lane && *lane) {
        argv[n++] = "LANE";
        argv[n++] = lane;
    }
    if (tenant && *tenant) {
        argv[n++] = "TENANT";
        argv[n++] = tenant;
    }
    if (tag && *tag) {
        argv[n++] = "TAG";
        argv[n++] = tag;
    }
    if (marks & DPROTO_EXACT) argv[n++] = "EXACT";
    if (marks & DPROTO_PARTIAL) argv[n++] = "PARTIAL";
    return resp_add_bulk_array(b, argv, NULL, n);
}

int dproto_acquire_split(resp_buf *b, const char *dep, long long tokens, long long input, long long output,
                         long long max_wait_ms, const char *lane, const char *tenant, const char *tag, int marks) {
    return request(b, "ACQUIRE", dep, tokens, input, output, max_wait_ms, lane, tenant, tag, marks);
}

int dproto_estimate(resp_buf *b, const char *dep, long long tokens, long long input, long long output,
                    long long max_wait_ms, const char *lane, const char *tenant, const char *tag, int marks) {
    return request(b, "ESTIMATE", dep, tokens, input, output, max_wait_ms, lane, tenant, tag, marks);
}

int dproto_settle(resp_buf *b, const char *grant_id, long long actual, sl_outcome outcome, const sl_header *h,
                  size_t nh) {
    usage_rec u = USAGE_REC_UNKNOWN;
    u.tokens = actual;
    return dproto_settle_usage(b, grant_id, &u, outcome, h, nh);
}

int dproto_settle_usage(resp_buf *b, const char *grant_id, const usage_rec *u, sl_outcome outcome, const sl_header *h,
                        size_t nh) {
    if ((int)outcome < 0 || (size_t)outcome >= DPROTO_NOUTCOMES) return RESP_EPROTO;
    size_t cap = 12 + 3 * nh;
    const char **argv = malloc(cap * sizeof(*argv));
    if (!argv) return RESP_ENOMEM;
    char tok[24], in[24], out[24], cr[24], cw[24];
    size_t n = 0;
    argv[n++] = "SETTLE";
    argv[n++] = grant_id;
    if (u && u->input >= 0 && u->output >= 0) {
        snprintf(in, sizeof(in), "%lld", u->input);
        snprintf(out, sizeof(out), "%lld", u->output);
        argv[n++] = "INPUT";
        argv[n++] = in;
        argv[n++] = "OUTPUT";
        argv[n++] = out;
        if (u->cache_read > 0) {
            snprintf(cr, sizeof(cr), "%lld", u->cache_read);
            argv[n++] = "CACHE_READ";
            argv[n++] = cr;
        }
        if (u->cache_write > 0) {
            snprintf(cw, sizeof(cw), "%lld", u->cache_write);
            argv[n++] = "CACHE_WRITE";
            argv[n++] = cw;
        }
    } else if (u && u->tokens >= 0) {
        snprintf(tok, sizeof(tok), "%lld", u->tokens);
        argv[n++] = "TOKENS";
        argv[n++] = tok;
    }
    argv[n++] = "STATUS";
    argv[n++] = outcome_names[outcome];
    for (size_t i = 0; i < nh; i++) {
        argv[n++] = "HEADER";
        argv[n++] = h[i].name;
        argv[n++] = h[i].value;
    }
    int rc = resp_add_bulk_array(b, argv, NULL, n);
    free(argv);
    return rc;
}

int dproto_retry(resp_buf *b, const char *dep) {
    const char *argv[2] = {"RETRY", dep};
    return resp_add_bulk_array(b, argv, NULL, 2);
}

int dproto_ping(resp_buf *b) {
    const char *argv[1] = {"PING"};
    return resp_add_bulk_array(b, argv, NULL, 1);
}

/* retry-after-ms=<n> anywhere in text (n may be -1), or -1. */
static long long find_retry_after(const char *text) {
    const char *p = strstr(text, "retry-after-ms=");
    if (!p) return -1;
    p += strlen("retry-after-ms=");
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p) return -1;
    return v < 0 ? -1 : v;
}

static int starts_word(const char *text, const char *word) {
    size_t n = strlen(word);
    return strncasecmp(text, word, n) == 0 && (text[n] == ' ' || text[n] == '\0');
}

/* The daemon's error words and their codes (lib/core/vocab.h). */
static const struct {
    const char *prefix;
    int code;
} error_words[] = {
#define DPROTO_ERROR_WORD(word, code) {#word, code},
    SLUICE_ERROR_WORD_MAP(DPROTO_ERROR_WORD)
#undef DPROTO_ERROR_WORD
};

int dproto_error(const char *text, char *reason, size_t reason_len, long long *retry_after_ms) {
    if (reason_len) reason[0] = '\0';
    *retry_after_ms = find_retry_after(text);
    for (size_t i = 0; i < sizeof(error_words) / sizeof(error_words[0]); i++) {
        if (!starts_word(text, error_words[i].prefix)) continue;
        if (error_words[i].code == SL_ESHED && reason_len) {
            const char *r = text + strlen(error_words[i].prefix);
            while (*r == ' ') r++;
            size_t n = strcspn(r, " ");
            if (n >= reason_len) n = reason_len - 1;
            memcpy(reason, r, n);
            reason[n] = '\0';
        }
        return error_words[i].code;
    }
    /* A request the engine refuses for this configuration, as embedded
     * mode returns it (vocab.h, SLUICE_REQ_ERROR_MAP). */
    if (strncasecmp(text, "ERR ", 4) == 0)
        for (int k = 0; k < SLUICE_REQ_NERRORS; k++)
            if (strncmp(text + 4, sluice_req_error(k), strlen(sluice_req_error(k))) == 0) return SL_EINVAL;
    /* As embedded mode answers a lane the deployment does not have. */
    if (strncasecmp(text, "ERR unknown lane ", 17) == 0) return SL_EINVAL;
    if (strncasecmp(text, "ERR deployment ", 15) == 0 && strstr(text, " does not carry tag ")) return SL_EINVAL;
    if (strncasecmp(text, "ERR unknown deployment", 22) == 0) return SL_EUNKNOWN;
    if (strncasecmp(text, "ERR", 3) == 0 && strstr(text, "unknown deployment")) return SL_EUNKNOWN;
    return SL_EPROTO;
}

static int error_reply(const rreply *r, char *reason, size_t reason_len, long long *ra, char *msg, size_t msglen) {
    snprintf(msg, msglen, "sluiced: %s", r->str);
    return dproto_error(r->str, reason, reason_len, ra);
}

static int text_of(const rreply *r, char *buf, size_t n) {
    if (!r || (r->type != RREPLY_BULK && r->type != RREPLY_STATUS) || r->len == 0 || r->len >= n) return -1;
    memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
    return 0;
}

static int int_of(const rreply *r, long long *v) {
    if (!r) return -1;
    if (r->type == RREPLY_INTEGER) {
        *v = r->integer;
        return 0;
    }
    if (r->type == RREPLY_BULK || r->type == RREPLY_STATUS) {
        char *end;
        *v = strtoll(r->str, &end, 10);
        return (end != r->str && *end == '\0') ? 0 : -1;
    }
    return -1;
}

int dproto_acquire_reply(const rreply *r, dproto_grant *g, char *reason, size_t reason_len, long long *retry_after_ms,
                         char *msg, size_t msglen) {
    *retry_after_ms = -1;
    if (reason_len) reason[0] = '\0';
    msg[0] = '\0';
    /* Cleared first: an error reply carries no grant, and the caller may
     * read the id to give back a grant a malformed reply named. */
    g->id[0] = g->member[0] = '\0';
    g->endpoint = "";
    if (r->type == RREPLY_ERROR) return error_reply(r, reason, reason_len, retry_after_ms, msg, msglen);
    if (r->type == RREPLY_ARRAY && (r->elements == 3 || r->elements >= 5) &&
        text_of(r->element[0], g->id, sizeof(g->id)) == 0 && int_of(r->element[1], &g->waited_ms) == 0 &&
        int_of(r->element[2], &g->tokens) == 0) {
        const char *colon = strrchr(g->id, ':');
        g->local = colon && colon[1] == 'L';
        if (r->elements == 3) return SL_OK;
        /* A group's grant: the member, and its endpoint ("" when none). */
        const rreply *ep = r->element[4];
        if (text_of(r->element[3], g->member, sizeof(g->member)) == 0 && ep->type == RREPLY_BULK &&
            strlen(ep->str) == ep->len) {
            g->endpoint = ep->str;
            return SL_OK;
        }
    }
    snprintf(msg, msglen, "sluiced: unexpected ACQUIRE reply (type %d)", (int)r->type);
    return SL_EPROTO;
}

int dproto_estimate_reply(const rreply *r, dproto_estimate_result *e, char *msg, size_t msglen) {
    memset(e, 0, sizeof(*e));
    e->retry_after_ms = -1;
    msg[0] = '\0';
    if (r->type == RREPLY_ERROR) {
        int rc = error_reply(r, e->reason, sizeof(e->reason), &e->retry_after_ms, msg, msglen);
        e->local = strstr(r->str, " source=local") != NULL;
        return rc;
    }
    char source[16];
    if (r->type == RREPLY_ARRAY && r->elements == 4 && int_of(r->element[0], &e->wait_ms) == 0 &&
        int_of(r->element[1], &e->tokens) == 0 && text_of(r->element[2], e->deployment, sizeof(e->deployment)) == 0 &&
        text_of(r->element[3], source, sizeof(source)) == 0) {
        e->granted = 1;
        e->local = strcmp(source, "local") == 0;
        return SL_OK;
    }
    snprintf(msg, msglen, "sluiced: unexpected ESTIMATE reply (type %d)", (int)r->type);
    return SL_EPROTO;
}

int dproto_retry_reply(const rreply *r, int *allowed, long long *retry_after_ms, char *msg, size_t msglen) {
    *allowed = 0;
    *retry_after_ms = -1;
    msg[0] = '\0';
    if (r->type == RREPLY_INTEGER) {
        *allowed = r->integer == 1;
        return SL_OK;
    }
    if (r->type == RREPLY_ERROR) {
        char reason[8];
        int rc = error_reply(r, reason, sizeof(reason), retry_after_ms, msg, msglen);
        if (rc == SL_ENORETRY) return SL_OK; /* a refusal, not an error */
        return rc;
    }
    snprintf(msg, msglen, "sluiced: unexpected RETRY reply (type %d)", (int)r->type);
    return SL_EPROTO;
}

int dproto_ok_reply(const rreply *r, char *msg, size_t msglen) {
    msg[0] = '\0';
    if (r->type == RREPLY_STATUS) return SL_OK;
    if (r->type == RREPLY_ERROR) {
        char reason[8];
        long long ra;
        return error_reply(r, reason, sizeof(reason), &ra, msg, msglen);
    }
    snprintf(msg, msglen, "sluiced: unexpected reply (type %d)", (int)r->type);
    return SL_EPROTO;
}
