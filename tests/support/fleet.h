/* fleet: a governed fleet against one `sluice mock` provider, for the
 * tests and benchmarks that judge sluice by the provider's own ledger.
 *
 * fleet_run() starts a private redis-server, the mock (with the spec's
 * flags), `agents` sluiced daemons sharing that Redis, and `callers`
 * worker threads per daemon. The workers share one pool of `requests`
 * requests: each takes the next, ACQUIREs a slot (split as INPUT/OUTPUT
 * or as TOKENS), calls the mock in its style (Azure chat completions or
 * Anthropic's Messages API), SETTLEs with the usage and every rate-limit
 * header, and on a 429 or 5xx asks again, until the request succeeds (at
 * most FLEET_MAX_ATTEMPTS). Meanwhile the spec's events change the running
 * mock (POST /control: a stray 429, a neighbour starting or stopping) at
 * given times; that is load shaping, nothing waits on it.
 *
 * With `proxy` set the workers are an SDK pointed at the agents' HTTP
 * proxy instead (agent.http on a UNIX socket per agent): each POSTs the
 * same call to its agent and the proxy governs, forwards and settles it;
 * a refusal (a 429 or 503 from the proxy) is asked again after its
 * Retry-After.
 *
 * The result comes from the mock's final ledger (accepted calls, 429s per
 * client, the neighbour's) and from the workers' own log of when each of
 * their successful calls was sent, for rates over windows.
 *
 * One fleet at a time per process. Functions print what went wrong on
 * stderr; a run that could not start returns -1. */
#ifndef SLUICE_FLEET_H
#define SLUICE_FLEET_H

#include <stddef.h>

#include <jansson.h>

#define FLEET_MAX_ATTEMPTS 50
#define FLEET_MAX_EVENTS 8
#define FLEET_MAX_ARGS 32

/* Which route the workers post to: Azure's deployments route, Anthropic's
 * Messages, or the OpenAI-compatible /v1/chat/completions with "model": "d"
 * (the route `sluice mock --compat bedrock|gemini` counts by). */
typedef enum fleet_style { FLEET_AZURE = 0, FLEET_ANTHROPIC, FLEET_OPENAI_V1 } fleet_style;

typedef struct fleet_event {
    double at_ms;        /* after the first request is sent */
    const char *control; /* the query of POST /control, e.g. "inject_429=1"; NULL: a
                          * look at the ledger instead (fleet_result.fleet_429_seen) */
} fleet_event;

typedef struct fleet_spec {
    const char *name; /* for messages */
    fleet_style style;
    int agents;                            /* 1..4 */
    int callers;                           /* worker threads per agent, 1..64 */
    int requests;                          /* in all */
    const char *mock_args[FLEET_MAX_ARGS]; /* `sluice mock` flags, NULL-terminated */
    /* The deployment "d" in sluiced.yaml, flow style without endpoint,
     * e.g. "rpm: 600, tpm: 600000". */
    const char *deployment;
    const char *content; /* the prompt: plain text, no quotes */
    int max_tokens;
    int split;  /* ACQUIRE INPUT/OUTPUT, else TOKENS */
    int proxy;  /* through the agents' HTTP proxy (no ACQUIRE/SETTLE by the workers) */
    int stream; /* with proxy: the calls streamed (no include_usage asked) */
    fleet_event events[FLEET_MAX_EVENTS];
    int nevents;
} fleet_spec;

typedef struct fleet_result {
    int requests, succeeded, lost;
    long long attempts;       /* provider calls by the workers */
    long long fleet_429;      /* 429s the workers got (from the ledger) */
    long long fleet_429_seen; /* of them, counted by the first look (a NULL event), -1 if none */
    long long neighbour_accepted, neighbour_429;
    long long injected_429;
    double first_send_ms, last_send_ms; /* of the successful calls, from the run's start */
    double events_base_ms;              /* when the first call went out: the events' zero */
    double *send_ms;                    /* each successful call's send time, sorted (malloc'd) */
    size_t nsend;
    json_t *ledger;    /* the mock's final ledger (owned) */
    char status[4096]; /* sluiced's STATUS of d at the end, "field=value " pairs */
    /* The agents' own view, summed from their INFO at the end: Redis calls
     * that timed out or failed, and grants paced locally (Redis deemed
     * lost). Non-zero explains a slow run on an overloaded machine. */
    long long redis_timeouts, redis_errors, grants_local;
} fleet_result;

/* Runs the fleet; fills *out (release with fleet_result_free). Returns 0,
 * or -1 when it could not run (nothing is left running). */
int fleet_run(const fleet_spec *spec, fleet_result *out);

void fleet_result_free(fleet_result *r);

/* Successful calls sent in [from_ms, to_ms). */
size_t fleet_sent_between(const fleet_result *r, double from_ms, double to_ms);

/* The makespan of the successful calls: last send - first send (ms). */
double fleet_makespan(const fleet_result *r);

/* The longest pause between two successful sends (ms). */
double fleet_longest_gap(const fleet_result *r);

/* A number of the final STATUS of d ("effective_rpm"), or -1. */
double fleet_status_num(const fleet_result *r, const char *field);

/* The ceil(code points / 4) input estimate of content: what the mock
 * counts for English text (docs/mock.md, "The tokenizer"). */
long long fleet_input_tokens(const char *content);

#endif
