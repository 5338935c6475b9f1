/* governed_call: one chat completion per argument, all at once on one
 * libuv loop, each a governed call of libsluice (acquire, send, classify,
 * settle, retry under a 30 s deadline); Ctrl-C cancels what is left.
 *
 *   LLM_URL=https://api.openai.com/v1/chat/completions LLM_API_KEY=sk-... \
 *   SLUICE_DEPLOYMENT=gpt-4o SLUICE_SOCKET=/run/sluice/agent.sock \
 *   ./governed_call "first prompt" "second prompt" ...
 *
 * Without SLUICE_SOCKET the governor is embedded: SLUICE_REDIS_URL and
 * SLUICE_DEPLOYMENTS (e.g. '{gpt-4o: {rpm: 60}}') configure it. Prints one
 * line per prompt; exits 0 when every call succeeded. */
#define _POSIX_C_SOURCE 200809L /* uv.h needs POSIX under -std=c11 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <sluice.h>
#include <sluice_uv.h>

#define MAX_PROMPTS 64

typedef struct job {
    int n;         /* its prompt's position */
    sl_call *call; /* NULL once it ended */
    char body[4096];
} job;

static sl_caller *caller;
static uv_signal_t sigint;
static job jobs[MAX_PROMPTS];
static int left, failed;

/* The prompt as a JSON string body (quotes, backslashes, controls escaped). */
static void make_body(const char *prompt, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n,
                                "{\"model\":\"gpt-4o\",\"max_tokens\":64,"
                                "\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (const char *p = prompt; *p && k + 8 < n; p++) {
        if (*p == '"' || *p == '\\') out[k++] = '\\', out[k++] = *p;
        else if ((unsigned char)*p < 0x20) k += (size_t)snprintf(out + k, n - k, "\\u%04x", *p);
        else out[k++] = *p;
    }
    snprintf(out + k, n - k, "\"}]}");
}

/* On the loop's thread, once per call. */
static void on_done(void *arg, sl_call *call, int status, sl_call_report *rep) {
    (void)call;
    job *j = arg;
    j->call = NULL;
    if (status == 0)
        printf("%d ok: %d attempt(s), waited %lld ms, %lld tokens (%lld in, %lld out): %.60s\n", j->n, rep->attempts,
               rep->waited_ms, rep->tokens, rep->input_tokens, rep->output_tokens, rep->body ? rep->body : "");
    else printf("%d failed (%s, %s): %s\n", j->n, sl_strerror(status), rep->outcome, rep->message);
    failed += status != 0;
    if (--left == 0) {
        /* The last one: let the loop end (sl_caller_free is fine from here). */
        sl_caller_free(caller);
        uv_close((uv_handle_t *)&sigint, NULL);
    }
}

/* Ctrl-C: end every call now (slots go back; a request already sent is
 * settled as failed); their callbacks report it. */
static void on_sigint(uv_signal_t *s, int sig) {
    (void)s, (void)sig;
    for (int i = 0; i < MAX_PROMPTS; i++)
        if (jobs[i].call) sl_call_cancel(jobs[i].call, SL_CANCEL_NOW);
}

int main(int argc, char **argv) {
    const char *url = getenv("LLM_URL"), *key = getenv("LLM_API_KEY"), *dep = getenv("SLUICE_DEPLOYMENT");
    if (!url || !dep || argc < 2 || argc - 1 > MAX_PROMPTS) {
        fprintf(stderr, "usage: LLM_URL=... SLUICE_DEPLOYMENT=... governed_call PROMPT... (at most %d)\n", MAX_PROMPTS);
        return 2;
    }
    sl_options opt;
    sl_options_init(&opt);
    opt.socket_path = getenv("SLUICE_SOCKET");
    if (!opt.socket_path) {
        opt.redis_url = getenv("SLUICE_REDIS_URL");
        opt.deployments = getenv("SLUICE_DEPLOYMENTS");
    }
    sl_gov *gov;
    if (sl_open(&opt, &gov) != 0) {
        fprintf(stderr, "sluice: %s\n", sl_errmsg(NULL));
        return 1;
    }
    uv_loop_t *loop = uv_default_loop();
    if (sl_caller_new(gov, &caller) != 0 || sl_uv_attach(caller, loop) != 0) {
        fprintf(stderr, "sluice: cannot attach to the loop\n");
        sl_close(gov);
        return 1;
    }
    uv_signal_init(loop, &sigint);
    uv_signal_start(&sigint, on_sigint, SIGINT);

    char auth[512];
    snprintf(auth, sizeof(auth), "Bearer %s", key ? key : "");
    sl_header hdrs[] = {{"Content-Type", "application/json"}, {"Authorization", auth}};
    int64_t deadline = sl_now_ms() + 30000; /* patience for the whole batch */
    for (int i = 1; i < argc; i++) {
        job *j = &jobs[i - 1];
        j->n = i;
        make_body(argv[i], j->body, sizeof(j->body));
        sl_call_opts o;
        sl_call_opts_init(&o);
        o.deployment = dep;
        o.input_tokens = (long long)strlen(argv[i]) / 3 + 8; /* the prompt's estimate */
        o.output_tokens = 64;                                /* max_tokens */
        o.deadline_ms = deadline;
        o.retry_shed = 1; /* no slot within the max wait: wait the hint, within the deadline */
        sl_call_http h;
        sl_call_http_init(&h);
        h.url = url;
        h.headers = hdrs;
        h.nheaders = key ? 2 : 1;
        h.body = j->body;
        h.body_len = strlen(j->body);
        int rc = sl_call_start(caller, &o, &h, on_done, j, &j->call);
        if (rc != 0) {
            printf("%d failed to start: %s\n", i, sl_strerror(rc));
            failed++;
            continue;
        }
        left++;
    }
    if (left == 0) {
        sl_caller_free(caller);
        uv_close((uv_handle_t *)&sigint, NULL);
    }
    uv_run(loop, UV_RUN_DEFAULT); /* returns once the caller's handles are closed */
    uv_loop_close(loop);
    sl_close(gov);
    return failed ? 1 : 0;
}
