/* cmd_mock: `sluice mock`, the mock provider as a process. Flags are rows
 * of a table; the server itself is mock.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "cmd.h"
#include "mock.h"

typedef struct mock_cli {
    mock_options o;
    const char *port_file;
    const char **deployments; /* borrowed from argv */
    size_t n_deployments;
    int verbose;
    int help;
} mock_cli;

typedef enum flag_kind {
    FLAG_BOOL,   /* int, set to 1 */
    FLAG_STR,    /* const char * */
    FLAG_INT,    /* int in [min, max] */
    FLAG_UINT,   /* unsigned in [min, max] */
    FLAG_DOUBLE, /* double in [min, max] */
    FLAG_U64,    /* uint64_t in [min, max] */
    FLAG_SIZE,   /* size_t in [min, max] */
    FLAG_RANGE,  /* "LO-HI" or "N" into two adjacent unsigned */
    FLAG_LIST,   /* appends to deployments */
    FLAG_CHOICE  /* int: the index of the value among the metavar's "a|b|..." words */
} flag_kind;

typedef struct mock_flag {
    const char *name;
    const char *metavar;
    flag_kind kind;
    size_t off;
    double min, max;
    const char *help;
} mock_flag;

#define OPT(field) offsetof(mock_cli, field)

static const mock_flag mock_flags[] = {
    {"--host", "ADDR", FLAG_STR, OPT(o.host), 0, 0, "address to bind (default 127.0.0.1)"},
    {"--port", "N", FLAG_INT, OPT(o.port), 0, 65535, "port to listen on; 0 picks a free one (default 8089)"},
    {"--port-file", "FILE", FLAG_STR, OPT(port_file), 0, 0, "write the port to FILE once listening (removed on exit)"},
    {"--rpm", "N", FLAG_DOUBLE, OPT(o.rpm), 1e-6, 1e9, "requests per minute per deployment (default 60)"},
    {"--burst", "N", FLAG_DOUBLE, OPT(o.burst), 1, 1e9,
     "request bucket size (default rpm/6, at least 1: 10 s of quota)"},
    {"--tpm", "N", FLAG_DOUBLE, OPT(o.tpm), 0, 1e12,
     "tokens per minute per deployment; 0 = no token limit (default 0)"},
    {"--token-burst", "N", FLAG_DOUBLE, OPT(o.token_burst), 1, 1e12, "token bucket size (default tpm/6, at least 1)"},
    {"--itpm", "N", FLAG_DOUBLE, OPT(o.itpm), 0, 1e12,
     "Anthropic input tokens per minute per deployment; 0 = no limit (default 0)"},
    {"--input-burst", "N", FLAG_DOUBLE, OPT(o.input_burst), 1, 1e12,
     "input-token bucket size (default itpm/6, at least 1)"},
    {"--otpm", "N", FLAG_DOUBLE, OPT(o.otpm), 0, 1e12,
     "Anthropic output tokens per minute per deployment; 0 = no limit (default 0)"},
    {"--output-burst", "N", FLAG_DOUBLE, OPT(o.output_burst), 1, 1e12,
     "output-token bucket size (default otpm/6, at least 1)"},
    {"--cache-read-tokens", "N", FLAG_UINT, OPT(o.cache_read_tokens), 0, 1000000000,
     "Anthropic: input tokens of every call read from the prompt cache, not charged to "
     "ITPM (default 0)"},
    {"--service-ms", "LO-HI", FLAG_RANGE, OPT(o.service_ms_min), 0, 3600000,
     "service time of an accepted call, uniform in [LO, HI] ms, or N (default 300-900)"},
    {"--slow-ms", "N", FLAG_UINT, OPT(o.slow_ms), 0, 3600000,
     "extra delay added to every chat response, errors included (default 0)"},
    {"--completion-tokens", "N|LO-HI", FLAG_RANGE, OPT(o.completion_tokens), 0, 1000000,
     "completion tokens per answer, or uniform in [LO, HI], capped by max_tokens; 0 = uniform in [1, max_tokens]"},
    {"--neighbour-rpm", "N", FLAG_DOUBLE, OPT(o.neighbour_rpm), 0, 600000,
     "a noisy neighbour takes N requests/min from every deployment's bucket (default 0)"},
    {"--neighbour-tokens", "N", FLAG_UINT, OPT(o.neighbour_tokens), 0, 1000000000,
     "tokens each neighbour request charges (default 0)"},
    {"--neighbour-greedy", NULL, FLAG_BOOL, OPT(o.neighbour_greedy), 0, 0,
     "the neighbour takes every token it can as it refills, up to --neighbour-rpm"},
    {"--fail-503", "P", FLAG_DOUBLE, OPT(o.fail_503), 0, 1,
     "probability in [0,1] that a chat call gets an injected 503 (default 0)"},
    {"--retry-after-503", "S", FLAG_UINT, OPT(o.retry_after_503), 0, 86400,
     "Retry-After seconds sent with injected 503s; 0 = none (default 0)"},
    {"--quota-exhausted", NULL, FLAG_BOOL, OPT(o.quota_exhausted), 0, 0,
     "every chat call gets 429 insufficient_quota (Anthropic: 400 credit balance too low)"},
    {"--openai-tpm", "max|sum", FLAG_CHOICE, OPT(o.openai_tpm), 0, 0,
     "what an OpenAI-style call (/v1/..., /openai/v1/...) costs the token bucket: max = "
     "max(ceil(chars/4), max_tokens), OpenAI's documented rule; sum = ceil(chars/4) + max_tokens, "
     "as Azure (default max)"},
    {"--anthropic-otpm", "generated|max", FLAG_CHOICE, OPT(o.anthropic_otpm), 0, 0,
     "how the Messages route counts OTPM: generated = the output generated, charged at the end (the bucket "
     "must hold 1 at admission), Anthropic's current rule; max = max_tokens at admission, the unused part "
     "given back at the end, its 2025 rule (default generated)"},
    {"--anthropic-round", "N", FLAG_UINT, OPT(o.anthropic_round), 0, 1000000,
     "the Messages route's token remaining counts rounded to the nearest N, as Anthropic's page says of its "
     "own (\"rounded to the nearest thousand\": 1000); 0 or 1 = exact (default 0)"},
    {"--compat", "openai|bedrock|gemini", FLAG_CHOICE, OPT(o.compat), 0, 0,
     "whose OpenAI-compatible endpoint the OpenAI-style chat routes are: openai; bedrock = input + "
     "max_tokens at admission, corrected to input + output x burndown at the end; gemini = TPM on the "
     "input only, --rpd; both send no rate-limit headers (default openai)"},
    {"--burndown", "N", FLAG_DOUBLE, OPT(o.burndown), 1, 1000,
     "bedrock: quota tokens per output token (default by model: 5 for claude-opus-4, "
     "claude-sonnet-4, claude-3-7-sonnet; else 1)"},
    {"--rpd", "N", FLAG_DOUBLE, OPT(o.rpd), 0, 1e12,
     "gemini: requests per day per deployment, the day from midnight Pacific time; 0 = no limit"},
    {"--wall-start", "UNIX_MS", FLAG_DOUBLE, OPT(o.wall_start_ms), 1, 1e15,
     "the mock's wall clock at start, in Unix ms (default: the real clock; for tests of a day's end)"},
    {"--tokens-per-char", "R", FLAG_DOUBLE, OPT(o.tokens_per_char), 0.01, 10,
     "the tokenizer: tokens a character of text counts (default 0.25: 4 characters a token)"},
    {"--cjk-tokens-per-char", "R", FLAG_DOUBLE, OPT(o.cjk_tokens_per_char), 0.01, 10,
     "tokens a Japanese, Chinese or Korean character counts (kana, Han, Hangul; default 1)"},
    {"--no-headers", NULL, FLAG_BOOL, OPT(o.no_headers), 0, 0,
     "send no rate-limit headers (x-ratelimit-*, anthropic-ratelimit-*), like a provider "
     "that has none"},
    {"--deployment", "NAME", FLAG_LIST, 0, 0, 0,
     "serve only these deployments (repeatable; default: any name, created on first use)"},
    {"--seed", "S", FLAG_U64, OPT(o.seed), 0, 9007199254740992.0,
     "seed of the random draws, for reproducible runs (default 1)"},
    {"--max-body", "BYTES", FLAG_SIZE, OPT(o.max_body), 1, 1073741824.0,
     "largest request body accepted, 413 beyond (default 1048576)"},
    {"--verbose", NULL, FLAG_BOOL, OPT(verbose), 0, 0, "log one line per request on stderr"},
    {"--help", NULL, FLAG_BOOL, OPT(help), 0, 0, "show this help"},
};

#define MOCK_NFLAGS (sizeof(mock_flags) / sizeof(mock_flags[0]))

static void mock_usage(FILE *f) {
    fprintf(f, "usage: sluice mock [OPTIONS]\n\n"
               "Serves a stand-in for Azure OpenAI / OpenAI chat-completions, embeddings and\n"
               "Responses, and Anthropic Messages deployments that enforces their limits like the\n"
               "real front doors (token buckets with burst; Azure: RPM and TPM, the estimate\n"
               "ceil(chars/4) + max_tokens charged at admission; OpenAI: max(ceil(chars/4),\n"
               "max_tokens); Anthropic: RPM, ITPM on the uncached input, OTPM charged\n"
               "max_tokens and settled to the output), 429 with Retry-After, and keeps a ledger\n"
               "of everything it saw, per deployment and per client (x-client-id header, else the\n"
               "peer address).\n\n"
               "options:\n");
    for (size_t i = 0; i < MOCK_NFLAGS; i++) {
        const mock_flag *fl = &mock_flags[i];
        char left[40];
        snprintf(left, sizeof(left), "%s%s%s", fl->name, fl->metavar ? " " : "", fl->metavar ? fl->metavar : "");
        fprintf(f, "  %-24s %s\n", left, fl->help);
    }
    fprintf(f, "\nendpoints:\n"
               "  POST /openai/deployments/NAME/chat/completions[?api-version=V]   Azure style\n"
               "  POST /v1/chat/completions, /openai/v1/chat/completions           OpenAI style "
               "(deployment = \"model\")\n"
               "  POST /openai/deployments/NAME/embeddings, /v1/embeddings          embeddings\n"
               "  POST /openai/deployments/NAME/responses, /openai/responses,\n"
               "       /v1/responses, /openai/v1/responses                          Responses API\n"
               "  POST /v1/messages                                                 Anthropic style "
               "(deployment = \"model\")\n"
               "  GET  /stats[?reset=1|reset=all]   the ledger as JSON (reset=all also refills "
               "buckets)\n"
               "  POST /control?KEY=VALUE&...       change faults, the neighbour, injected 429s,\n"
               "                                    headers and limits while running\n\n"
               "The first line on stdout is \"listening on HOST:PORT\". SIGUSR1 prints the ledger\n"
               "as one JSON line; SIGINT and SIGTERM print it and exit. See docs/mock.md.\n\n"
               "example (the seed article's deployment):\n"
               "  sluice mock --port 8089 --rpm 60 --burst 10 --service-ms 300-900\n"
               "  curl -s localhost:8089/openai/deployments/gpt-4o/chat/completions \\\n"
               "       -H 'content-type: application/json' -d '{\"messages\":[{\"role\":\"user\","
               "\"content\":\"hi\"}]}'\n");
}

static int bad_flag(const char *flag, const char *fmt, const char *value) {
    fprintf(stderr, "sluice mock: %s: ", flag);
    fprintf(stderr, fmt, value);
    fprintf(stderr, " (see sluice mock --help)\n");
    return -1;
}

static int parse_number(const mock_flag *fl, const char *v, double *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(d)) return bad_flag(fl->name, "expected a number, got '%s'", v);
    if (d < fl->min || d > fl->max) {
        char msg[128];
        snprintf(msg, sizeof(msg), "%%s is out of range [%g, %g]", fl->min, fl->max);
        return bad_flag(fl->name, msg, v);
    }
    if (fl->kind != FLAG_DOUBLE && d != floor(d)) return bad_flag(fl->name, "expected a whole number, got '%s'", v);
    *out = d;
    return 0;
}

static int parse_range(const mock_flag *fl, const char *v, unsigned *lo, unsigned *hi) {
    char *end;
    errno = 0;
    unsigned long a = strtoul(v, &end, 10), b = a;
    if (end == v || *v == '-') return bad_flag(fl->name, "expected LO-HI or N in ms, got '%s'", v);
    if (*end == '-') {
        const char *s = end + 1;
        if (*s == '-' || *s == '\0') return bad_flag(fl->name, "expected LO-HI or N in ms, got '%s'", v);
        b = strtoul(s, &end, 10);
    }
    if (*end || errno || a > (unsigned long)fl->max || b > (unsigned long)fl->max)
        return bad_flag(fl->name, "expected LO-HI or N in ms (at most 3600000), got '%s'", v);
    if (a > b) return bad_flag(fl->name, "LO must not exceed HI in '%s'", v);
    *lo = (unsigned)a;
    *hi = (unsigned)b;
    return 0;
}

static int apply_flag(mock_cli *cli, const mock_flag *fl, const char *v) {
    char *field = (char *)cli + fl->off;
    double d = 0;
    switch (fl->kind) {
    case FLAG_BOOL: *(int *)field = 1; return 0;
    case FLAG_STR:
        if (!*v) return bad_flag(fl->name, "must not be empty%s", "");
        *(const char **)field = v;
        return 0;
    case FLAG_LIST: cli->deployments[cli->n_deployments++] = v; return 0;
    case FLAG_CHOICE: {
        int k = 0;
        for (const char *w = fl->metavar; *w; k++) {
            size_t len = strcspn(w, "|");
            if (strlen(v) == len && strncmp(w, v, len) == 0) {
                *(int *)field = k;
                return 0;
            }
            w += len + (w[len] == '|');
        }
        return bad_flag(fl->name, "expected one of the listed values, got '%s'", v);
    }
    case FLAG_RANGE: {
        unsigned *p = (unsigned *)field;
        return parse_range(fl, v, &p[0], &p[1]);
    }
    case FLAG_INT:
    case FLAG_UINT:
    case FLAG_DOUBLE:
    case FLAG_U64:
    case FLAG_SIZE: break;
    }
    if (parse_number(fl, v, &d) != 0) return -1;
    switch (fl->kind) {
    case FLAG_INT: *(int *)field = (int)d; break;
    case FLAG_UINT: *(unsigned *)field = (unsigned)d; break;
    case FLAG_DOUBLE: *(double *)field = d; break;
    case FLAG_U64: *(uint64_t *)field = (uint64_t)d; break;
    case FLAG_SIZE: *(size_t *)field = (size_t)d; break;
    default: break;
    }
    return 0;
}

/* Parses argv into cli. Accepts "--flag VALUE" and "--flag=VALUE". */
static int mock_parse(mock_cli *cli, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        const mock_flag *fl = NULL;
        if (strcmp(arg, "-h") == 0) arg = "--help", nlen = 6;
        for (size_t k = 0; k < MOCK_NFLAGS; k++)
            if (strlen(mock_flags[k].name) == nlen && strncmp(mock_flags[k].name, arg, nlen) == 0) fl = &mock_flags[k];
        if (!fl) {
            fprintf(stderr, "sluice mock: unknown option '%s' (see sluice mock --help)\n", argv[i]);
            return -1;
        }
        const char *value = NULL;
        if (fl->metavar) {
            if (eq) value = eq + 1;
            else if (i + 1 < argc) value = argv[++i];
            else return bad_flag(fl->name, "needs a value%s", ""), -1;
        } else if (eq) {
            return bad_flag(fl->name, "takes no value%s", "");
        }
        if (apply_flag(cli, fl, value) != 0) return -1;
    }
    return 0;
}

/* ---- running ---------------------------------------------------------- */

typedef struct mock_proc {
    uv_loop_t loop;
    mock *m;
    uv_signal_t sig[3];
    int stopping;
} mock_proc;

static void print_stats(mock *m) {
    json_t *stats = mock_stats(m);
    if (!stats) {
        fprintf(stderr, "sluice mock: out of memory building the ledger\n");
        return;
    }
    json_dumpf(stats, stdout, MOCK_JSON_FLAGS);
    fputc('\n', stdout);
    fflush(stdout);
    json_decref(stats);
}

static void on_stopped(mock *m, void *arg) {
    (void)arg;
    print_stats(m);
}

static void on_signal(uv_signal_t *h, int signum) {
    mock_proc *p = h->data;
    if (signum == SIGUSR1) {
        print_stats(p->m);
        return;
    }
    if (p->stopping) return;
    p->stopping = 1;
    /* The ledger is printed once every connection is closed, so it counts
     * the responses that exit cut off (abandoned). */
    mock_stop(p->m, on_stopped, NULL);
    p->m = NULL;
    for (int i = 0; i < 3; i++) uv_close((uv_handle_t *)&p->sig[i], NULL);
}

static int write_port_file(const char *path, int port) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)uv_os_getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    int ok = fprintf(f, "%d\n", port) > 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return -1;
    }
    return 0;
}

int cmd_mock(int argc, char **argv) {
    mock_cli cli;
    mock_proc p;
    char err[256];
    int rc;
    memset(&cli, 0, sizeof(cli));
    mock_options_init(&cli.o);
    cli.deployments = calloc((size_t)argc + 1, sizeof(*cli.deployments));
    if (!cli.deployments) return 1;
    if (mock_parse(&cli, argc, argv) != 0) {
        free(cli.deployments);
        return 2;
    }
    if (cli.help) {
        mock_usage(stdout);
        free(cli.deployments);
        return 0;
    }
    cli.o.deployments = cli.deployments;
    cli.o.n_deployments = cli.n_deployments;
    cli.o.log = cli.verbose ? stderr : NULL;

    signal(SIGPIPE, SIG_IGN);
    memset(&p, 0, sizeof(p));
    uv_loop_init(&p.loop);
    /* Signals are handled before anyone can learn the port, so a script that
     * reads the first line and sends SIGTERM always gets the ledger. */
    static const int signums[3] = {SIGINT, SIGTERM, SIGUSR1};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&p.loop, &p.sig[i]);
        p.sig[i].data = &p;
        uv_signal_start(&p.sig[i], on_signal, signums[i]);
    }
    rc = mock_start(&p.loop, &cli.o, &p.m, err, sizeof(err));
    free(cli.deployments); /* the mock copied what it needs */
    if (rc != 0) {
        fprintf(stderr, "sluice mock: %s\n", err);
        for (int i = 0; i < 3; i++) uv_close((uv_handle_t *)&p.sig[i], NULL);
        uv_run(&p.loop, UV_RUN_DEFAULT);
        uv_loop_close(&p.loop);
        return rc == UV_EINVAL ? 2 : 1;
    }
    /* The port file first: whoever reads the stdout line may look for it. */
    if (cli.port_file && write_port_file(cli.port_file, mock_port(p.m)) != 0)
        fprintf(stderr, "sluice mock: cannot write %s: %s\n", cli.port_file, strerror(errno));
    if (strchr(cli.o.host, ':')) printf("listening on [%s]:%d\n", cli.o.host, mock_port(p.m));
    else printf("listening on %s:%d\n", cli.o.host, mock_port(p.m));
    fflush(stdout);

    uv_run(&p.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&p.loop);
    if (cli.port_file) remove(cli.port_file);
    if (rc != 0) {
        fprintf(stderr, "sluice mock: loop closed with handles open: %s\n", uv_strerror(rc));
        return 1;
    }
    return 0;
}
