/* run_input: the requests of `sluice run`, one JSON object per line.
 *
 * A line is an OpenAI chat-completions request, optionally with an "id"
 * (a string or an integer); without one, the line number (1-based) is its
 * id. It may name its own "lane", "tenant" and "tag" (strings of
 * [A-Za-z0-9._:-]{1,64}), which override the run's. run_request_parse()
 * checks the line, takes the id, lane, tenant and tag out of the body,
 * fills in "model" for OpenAI-style endpoints when it is missing, and
 * estimates the tokens the provider charges at admission with the mock's
 * (and Azure's) formula: ceil(code points of the prompt / 4) + max_tokens
 * (else max_completion_tokens, else 16).
 *
 * An id's key is its compact JSON text ("\"a-1\"", "17"), so a string id
 * and a numeric one never collide. run_set is a set of such keys.
 *
 * Depends on jansson. No globals; not thread-safe (one owner). */
#ifndef SLUICE_RUN_INPUT_H
#define SLUICE_RUN_INPUT_H

#include <stddef.h>

#include <jansson.h>

/* ---- a set of id keys ---------------------------------------------------- */

typedef struct run_set {
    char **slots; /* open addressing; NULL = empty */
    size_t cap;   /* a power of two, or 0 */
    size_t n;
} run_set;

/* An empty set needs no allocation: run_set s = {0}. */
int run_set_has(const run_set *s, const char *key);
/* Adds a copy of key. Returns 1 added, 0 already there, -1 out of memory. */
int run_set_add(run_set *s, const char *key);
void run_set_free(run_set *s);

/* ---- one request --------------------------------------------------------- */

/* Longest lane, tenant or tag name (config.h's CONFIG_NAME_MAX). */
#define RUN_CLASS_NAME_MAX 64

typedef struct run_request {
    json_t *id; /* the id as it goes into the result (a new reference) */
    char *key;  /* its key (malloc'd) */
    char *body; /* the request without "id", compact JSON (malloc'd) */
    size_t body_len;
    long long tokens;                    /* the admission estimate: input_tokens + output_tokens */
    long long input_tokens;              /* the prompt's: its text weighed by script (estimate.h) */
    long long output_tokens;             /* max_tokens (else max_completion_tokens, else 16) */
    int has_max_tokens;                  /* the body gives max_tokens */
    int partial;                         /* the estimate guesses images, audio or files (estimate.h) */
    char lane[RUN_CLASS_NAME_MAX + 1];   /* the line's "lane", "" when none */
    char tenant[RUN_CLASS_NAME_MAX + 1]; /* the line's "tenant", "" when none */
    char tag[RUN_CLASS_NAME_MAX + 1];    /* the line's "tag", "" when none */
    int has_model;                       /* the body names its "model" (its own, or the one filled in) */
} run_request;

/* The key of an id value (malloc'd), or NULL when id is not a string or an
 * integer (or on OOM). */
char *run_id_key(const json_t *id);

/* The key of line number lineno (len bytes, no newline), the one
 * run_request_parse() gives it: its "id" when the line is a JSON object
 * (duplicate keys refused, as there) with a string or integer "id", else
 * the line number. Malloc'd; NULL on OOM. */
char *run_line_key(const char *line, size_t len, long long lineno);

/* The estimate of body split: the prompt's tokens (ceil(code points of the
 * text of "messages" and "system" / 4)) and the max output, as the HTTP
 * proxy estimates (lib/core/estimate.h, estimate_request(), chat). */
void run_estimate_split(const json_t *body, long long *input, long long *output);

/* Parses line (len bytes, no newline) number lineno. model: set as "model"
 * when the body has none (NULL: leave it). Returns 0 and fills *out (free
 * with run_request_free), or -1 with a message in err; then out->id and
 * out->key are still set when an id could be read (line number otherwise),
 * so the failure can be recorded against it. */
int run_request_parse(const char *line, size_t len, long long lineno, const char *model, run_request *out, char *err,
                      size_t errlen);
void run_request_free(run_request *r);

/* The admission estimate of a chat-completions body (see above). */
long long run_estimate_tokens(const json_t *body);

/* 1 when s is a valid lane, tenant or tag name: [A-Za-z0-9._:-]{1,64}. */
int run_class_name_ok(const char *s);

/* 1 when the line holds only blanks. */
int run_line_blank(const char *line, size_t len);

#endif
