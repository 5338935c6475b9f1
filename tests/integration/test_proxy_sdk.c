/* test_proxy_sdk: real clients nobody here wrote, as the callers of
 * sluiced's HTTP proxy (issue 16, "What must be proven"), judged by the
 * provider's own ledger (`sluice mock`).
 *
 * The clients are separate processes, each printing one JSON line per
 * request (status, usage, whether a stream arrived whole, time):
 *   - tests/integration/sdk_client.js: OpenAI's `openai` SDK (its OpenAI
 *     and AzureOpenAI clients) and Anthropic's `@anthropic-ai/sdk`, from
 *     npm, unmodified but for the base URL (sdk_install.sh installs them
 *     into $SLUICE_BUILD_DIR/npm-sdk);
 *   - tests/integration/raw_client.py: Python's httpx (Debian's
 *     python3-httpx) and the curl command, the wire format by hand.
 * Each client process has its own API key; the mock's ledger counts the
 * requests under a fingerprint of the credential they carried (its last 4
 * characters), so the test sees which caller's key reached the provider.
 *
 *   - test_clients_direct: the same clients straight at the mock (no
 *     proxy), streamed and not, every flavour: every request answered 200
 *     and whole, the usage the clients read is the ledger's, each key
 *     reached the provider on exactly its own requests. This proves the
 *     harness (and that the mock serves the real SDKs) on its own.
 *   - test_fleet_through_proxy: 3 sluiced with agent.http.listen on a
 *     loopback port, sharing one private Redis, in front of one mock with
 *     two RPM-bound deployments (gpt: OpenAI style, claude: Anthropic
 *     style); 4 client processes per agent (an OpenAI or Azure SDK, the
 *     Anthropic SDK, httpx, curl), streaming and not. Every request
 *     answered 200 and whole; <= 1 % 429s on the ledger; >= 97 % of the
 *     floor on each deployment, (accepted - 1 s of burst) / rate against
 *     the ledger's first-to-last accept; the usage the fleet settled
 *     (STATUS tokens_actual, fleet-wide in Redis, polled until it
 *     equals the ledger, at most 10 s; the agents' INFO tokens_actual
 *     summed) equals the ledger's tokens_reported; each key reached the
 *     provider on exactly its own requests (pass-through).
 *
 * The floor is only a proof of the governor while the clients' demand
 * exceeds the quota from the first accept to the last. Each client loads
 * its SDK first and waits at a start gate (SLUICE_START_FILE); the test
 * lets them all go at once. Without the gate, on a busy 2-core machine
 * the Node processes took 8-13 s to load their SDKs while a curl client
 * ran alone, 1-3 requests a second, and that stretch counted in the
 * window (measured 71-85 % of the floor, the proxy idle for want of
 * requests; with the gate 98-100 %, a busy loop on each core or not).
 * From the start on, each deployment has 21 requests in flight against
 * 10 a second, so demand exceeds the quota until the last second; the
 * clients' n over their concurrency is about equal so that they end
 * together. FLEET_KEEP=1 keeps the client outputs and the ledger (with
 * the wall clock at its reset): each client line's "t" (wall clock) and
 * the ledger's accept_ms put demand and accepts on one time line. 
 *     While the proxy does not govern (it answers 501) a probe request
 *     fails the test at once, saying so.
 *   - test_sdk_key_injection: one sluiced whose deployments inject the
 *     provider key for callers with a client key; the official SDKs with
 *     a wrong key get 401 (AuthenticationError) and the ledger sees
 *     nothing; with the client key they are served and the ledger's
 *     credentials show only the provider key, in each style's header.
 *
 * ctest runs them as two tests: test_proxy_sdk (SDK_TESTS=direct: the
 * first and the last) and test_proxy_sdk_fleet (SDK_TESTS=fleet, alone:
 * a real-time fleet).
 * Skipped (saying why) when node 20+, npm's registry, python3-httpx or
 * curl are not there. FLEET_KEEP=1 keeps the client outputs (their paths
 * are printed). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <time.h>

#include "mock_fixture.h"
#include "test_daemon_harness.h"

#define MAX_RUNS 16
#define CLIENTS_TIMEOUT_MS 300000
#define CLIENTS_READY_MS 120000
#define SETTLE_WAIT_MS 10000
#define RPM 600
#define MAX_TOKENS 32

typedef struct client_spec {
    const char *client;  /* sdk | httpx | curl */
    const char *flavour; /* openai | azure | anthropic */
    int n, concurrency, stream, retries;
    int agent;         /* the agent whose proxy it calls */
    const char *model; /* NULL: gpt, or claude for anthropic */
    int max_tokens;    /* 0: MAX_TOKENS */
} client_spec;

typedef struct client_run {
    client_spec s;
    const char *model;
    char tag[48], key[64], last4[8], out[400];
    pid_t pid;
    int exit_code;
    /* From its output. */
    int lines, ok, complete, st401, st429, st501, st0, other;
    long long input, output;
    double ms_max;
    char first_error[400];
    char error_types[200]; /* the SDK's error classes, each once, space-separated */
} client_run;

static char g_modules[600];
static char g_src[600];

/* ---- prerequisites ------------------------------------------------------ */

/* Debian's python3 with python3-httpx: installed with apt-get when missing
 * (deploy/install-deps.sh installs it too). 1 when usable. */
static int have_httpx(char *why, size_t n) {
    char out[4096];
    char *probe[] = {"/usr/bin/python3", "-c", "import httpx", NULL};
    if (access("/usr/bin/python3", X_OK) != 0) {
        snprintf(why, n, "/usr/bin/python3 is missing");
        return 0;
    }
    if (run_capture(probe, NULL, out, sizeof(out)) == 0) return 1;
    print_message("  python3-httpx is missing: installing it with apt-get\n");
    char *install[] = {"sh", "-c",
                       "export DEBIAN_FRONTEND=noninteractive; "
                       "timeout 200 apt-get install -y -qq --no-install-recommends python3-httpx || "
                       "{ timeout 200 apt-get update -qq && "
                       "timeout 200 apt-get install -y -qq --no-install-recommends python3-httpx; }",
                       NULL};
    int rc = run_capture(install, NULL, out, sizeof(out));
    if (run_capture(probe, NULL, out + strlen(out), sizeof(out) - strlen(out)) == 0) return 1;
    snprintf(why, n, "python3-httpx is not installed and apt-get could not install it (exit %d): %.300s", rc, out);
    return 0;
}

/* Installs the SDKs, checks httpx and curl; skips the test, saying why,
 * when one cannot be had here. */
static void prerequisites_or_skip(void) {
    const char *build = getenv("SLUICE_BUILD_DIR"), *src = getenv("SLUICE_SOURCE_DIR");
    char out[8192], installer[700], why[600];
    assert_non_null(build);
    snprintf(g_src, sizeof(g_src), "%s", src ? src : ".");
    if (!sluiced_fixture_binary() || !mock_fixture_binary()) {
        print_message("  SKIPPED: build sluiced and sluice first\n");
        skip();
    }
    snprintf(g_modules, sizeof(g_modules), "%s/npm-sdk", build);
    snprintf(installer, sizeof(installer), "%s/tests/integration/sdk_install.sh", g_src);
    char *install[] = {"bash", installer, g_modules, NULL};
    int rc = run_capture(install, NULL, out, sizeof(out));
    if (rc == 77) {
        print_message("  SKIPPED: the SDKs cannot be installed here: %s", out);
        skip();
    }
    if (rc != 0) fail_msg("sdk_install.sh %s failed (exit %d):\n%s", g_modules, rc, out);
    if (!have_httpx(why, sizeof(why))) {
        print_message("  SKIPPED: %s\n", why);
        skip();
    }
    char *curl[] = {"curl", "--version", NULL};
    if (run_capture(curl, NULL, out, sizeof(out)) != 0) {
        print_message("  SKIPPED: curl is not installed\n");
        skip();
    }
}

/* ---- client processes --------------------------------------------------- */

static void run_init(client_run *r, const client_spec *s, int index) {
    memset(r, 0, sizeof(*r));
    r->s = *s;
    r->model = s->model ? s->model : strcmp(s->flavour, "anthropic") ? "gpt" : "claude";
    snprintf(r->tag, sizeof(r->tag), "%s-%s-%s-a%d", s->client, s->flavour, s->stream ? "stream" : "plain", s->agent);
    /* Each process its own key; its last 4 characters tell them apart. */
    snprintf(r->last4, sizeof(r->last4), "k%03d", index);
    snprintf(r->key, sizeof(r->key), "sk-sluice-test-%s-0123456789-%s", s->client, r->last4);
}

static int run_start(client_run *r, const char *base, const char *dir) {
    char script[700], n[16], conc[16], retries[16], maxtok[16];
    snprintf(r->out, sizeof(r->out), "%s/%s.jsonl", dir, r->tag);
    snprintf(n, sizeof(n), "%d", r->s.n);
    snprintf(conc, sizeof(conc), "%d", r->s.concurrency);
    snprintf(retries, sizeof(retries), "%d", r->s.retries);
    snprintf(maxtok, sizeof(maxtok), "%d", r->s.max_tokens > 0 ? r->s.max_tokens : MAX_TOKENS);
    const char *stream = r->s.stream ? "yes" : "no";
    if (!strcmp(r->s.client, "sdk")) {
        snprintf(script, sizeof(script), "%s/tests/integration/sdk_client.js", g_src);
        char *argv[] = {"node",
                        script,
                        g_modules,
                        (char *)r->s.flavour,
                        (char *)base,
                        (char *)r->model,
                        n,
                        conc,
                        (char *)stream,
                        retries,
                        r->key,
                        maxtok,
                        r->tag,
                        NULL};
        r->pid = proc_spawn(argv, r->out, 0);
    } else {
        snprintf(script, sizeof(script), "%s/tests/integration/raw_client.py", g_src);
        char *argv[] = {"/usr/bin/python3",
                        script,
                        (char *)r->s.client,
                        (char *)r->s.flavour,
                        (char *)base,
                        (char *)r->model,
                        n,
                        conc,
                        (char *)stream,
                        retries,
                        r->key,
                        maxtok,
                        r->tag,
                        NULL};
        r->pid = proc_spawn(argv, r->out, 0);
    }
    return r->pid > 0 ? 0 : -1;
}

/* Reads the JSON lines of a finished client. */
static void run_read(client_run *r) {
    FILE *f = fopen(r->out, "r");
    char line[8192];
    while (f && fgets(line, sizeof(line), f)) {
        json_t *j = json_loads(line, 0, NULL);
        if (!json_is_object(j) || json_object_get(j, "summary") || !json_object_get(j, "i")) {
            json_decref(j);
            continue;
        }
        int st = (int)json_integer_value(json_object_get(j, "status"));
        r->lines++;
        if (st == 200) r->ok++;
        else if (st == 401) r->st401++;
        else if (st == 429) r->st429++;
        else if (st == 501) r->st501++;
        else if (st == 0) r->st0++;
        else r->other++;
        r->complete += json_integer_value(json_object_get(j, "complete")) ? 1 : 0;
        r->input += json_integer_value(json_object_get(j, "input_tokens"));
        r->output += json_integer_value(json_object_get(j, "output_tokens"));
        double ms = json_number_value(json_object_get(j, "ms"));
        if (ms > r->ms_max) r->ms_max = ms;
        const char *err = json_string_value(json_object_get(j, "error"));
        if (err && !r->first_error[0]) snprintf(r->first_error, sizeof(r->first_error), "status %d: %s", st, err);
        const char *type = json_string_value(json_object_get(j, "error_type"));
        size_t used = strlen(r->error_types);
        if (type && !strstr(r->error_types, type))
            snprintf(r->error_types + used, sizeof(r->error_types) - used, "%s%s", used ? " " : "", type);
        json_decref(j);
    }
    if (f) fclose(f);
}

/* 1 when a client's output has its {"ready":1} line (SLUICE_START_FILE). */
static int run_ready(const client_run *r) {
    FILE *f = fopen(r->out, "r");
    char line[512];
    int ready = 0;
    while (f && !ready && fgets(line, sizeof(line), f)) ready = strstr(line, "\"ready\"") != NULL;
    if (f) fclose(f);
    return ready;
}

static void runs_kill(client_run *runs, int from, int nruns) {
    for (int k = from; k < nruns; k++) kill(runs[k].pid, SIGKILL);
    for (int k = from; k < nruns; k++) proc_wait(runs[k].pid, -1, NULL);
}

/* Starts every client at base_of(agent), lets them all go at one moment
 * once each has loaded its SDK (the start file), waits for all of them
 * (bounded), and reads their outputs. Under load a Node process takes
 * seconds to load its SDK: without the gate the first to be ready would
 * run alone for that long, below the quota. */
static void runs_go(client_run *runs, int nruns, char bases[][64], const char *dir) {
    char go[300];
    snprintf(go, sizeof(go), "%s/go", dir);
    setenv("SLUICE_START_FILE", go, 1);
    for (int i = 0; i < nruns; i++)
        if (run_start(&runs[i], bases[runs[i].s.agent], dir) != 0) {
            runs_kill(runs, 0, i);
            unsetenv("SLUICE_START_FILE");
            fail_msg("cannot start client %s", runs[i].tag);
        }
    unsetenv("SLUICE_START_FILE");
    double ready_by = proc_now_ms() + CLIENTS_READY_MS;
    for (int i = 0; i < nruns; i++) {
        while (!run_ready(&runs[i])) {
            int exited = proc_wait(runs[i].pid, 0, NULL);
            if (exited || proc_now_ms() > ready_by) {
                runs_kill(runs, 0, nruns);
                fail_msg("client %s %s before it was ready (see %s)", runs[i].tag,
                         exited ? "ended" : "was not ready within the bound", runs[i].out);
            }
            proc_sleep_ms(10);
        }
    }
    FILE *f = fopen(go, "w");
    if (!f) {
        runs_kill(runs, 0, nruns);
        fail_msg("cannot create %s", go);
    }
    fclose(f);
    double deadline = proc_now_ms() + CLIENTS_TIMEOUT_MS;
    for (int i = 0; i < nruns; i++) {
        int st = 0;
        int left = (int)(deadline - proc_now_ms());
        if (!proc_wait(runs[i].pid, left > 0 ? left : 1, &st)) {
            runs_kill(runs, i, nruns);
            fail_msg("client %s (and those after it) still running after %d ms", runs[i].tag, CLIENTS_TIMEOUT_MS);
        }
        runs[i].exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        run_read(&runs[i]);
    }
}

static void runs_print(const client_run *runs, int nruns) {
    for (int i = 0; i < nruns; i++) {
        const client_run *r = &runs[i];
        print_message(
            "  %-32s key ..%s: %d/%d answered 200, %d whole, 401 %d, 429 %d, 501 %d, no answer %d, other %d; usage "
            "%lld in + %lld out; slowest %.0f ms; exit %d%s%s\n",
            r->tag, r->last4, r->ok, r->s.n, r->complete, r->st401, r->st429, r->st501, r->st0, r->other, r->input,
            r->output, r->ms_max, r->exit_code, r->first_error[0] ? "; first error: " : "", r->first_error);
    }
}

/* Every request of every client was answered 200 and whole. */
static void assert_all_answered(const client_run *runs, int nruns) {
    int bad = 0;
    for (int i = 0; i < nruns; i++) {
        const client_run *r = &runs[i];
        if (r->lines != r->s.n || r->ok != r->s.n || r->complete != r->s.n || r->exit_code != 0) bad++;
    }
    if (bad)
        fail_msg("%d of %d client processes did not get every request answered 200 and whole (see the lines above)",
                 bad, nruns);
}

/* The sum of a count over the ledger's credential entries that end in
 * ":<last4>" (under whichever header the client sent it). */
static long long credential_count(const json_t *ledger, const char *last4, const char *field) {
    const json_t *creds = json_object_get(ledger, "credentials");
    const char *fp;
    json_t *v;
    long long sum = 0;
    char want[16];
    snprintf(want, sizeof(want), ":%s", last4);
    json_object_foreach((json_t *)creds, fp, v) {
        /* A fingerprint may list several headers: "authorization:k001 api-key:k001". */
        if (strstr(fp, want)) sum += json_integer_value(json_object_get(v, field));
    }
    return sum;
}

/* Each client's key reached the provider on exactly its requests, and no
 * accepted call came without a credential. */
static void assert_credentials(const json_t *ledger, const client_run *runs, int nruns) {
    const json_t *creds = json_object_get(ledger, "credentials");
    assert_non_null(creds);
    for (int i = 0; i < nruns; i++) {
        long long acc = credential_count(ledger, runs[i].last4, "accepted");
        if (acc != runs[i].ok)
            fail_msg("the provider accepted %lld calls with the key of %s (..%s), which got %d answers 200", acc,
                     runs[i].tag, runs[i].last4, runs[i].ok);
    }
    long long none = mock_fixture_count(ledger, "credentials/(none)/accepted");
    if (none) fail_msg("the provider accepted %lld calls that carried no credential", none);
}

/* The usage the clients read is the ledger's (per deployment). */
static void assert_usage_seen(const json_t *ledger, const client_run *runs, int nruns) {
    for (int d = 0; d < 2; d++) {
        const char *dep = d ? "claude" : "gpt";
        long long seen = 0;
        for (int i = 0; i < nruns; i++)
            if (!strcmp(runs[i].model, dep)) seen += runs[i].input + runs[i].output;
        char path[64];
        snprintf(path, sizeof(path), "deployments/%s/tokens_reported", dep);
        long long reported = mock_fixture_count(ledger, path);
        print_message("  %s: the clients read %lld tokens of usage, the provider reported %lld\n", dep, seen, reported);
        assert_true(seen == reported);
    }
}

static void runs_cleanup(client_run *runs, int nruns, const char *dir) {
    if (getenv("FLEET_KEEP")) {
        print_message("  client outputs kept in %s\n", dir);
        return;
    }
    char path[400];
    for (int i = 0; i < nruns; i++) unlink(runs[i].out);
    snprintf(path, sizeof(path), "%s/go", dir);
    unlink(path);
    rmdir(dir);
}

/* ---- the tests ---------------------------------------------------------- */

/* Every flavour, streamed and not, straight at the mock: the harness
 * itself, and the mock as the real SDKs see it. */
static void test_clients_direct(void **state) {
    (void)state;
    prerequisites_or_skip();
    static const client_spec specs[] = {
        {"sdk", "openai", 12, 3, 0, 0, 0, NULL, 0},      {"sdk", "openai", 12, 3, 1, 0, 0, NULL, 0},
        {"sdk", "azure", 12, 3, 0, 0, 0, NULL, 0},       {"sdk", "azure", 12, 3, 1, 0, 0, NULL, 0},
        {"sdk", "anthropic", 12, 3, 0, 0, 0, NULL, 0},   {"sdk", "anthropic", 12, 3, 1, 0, 0, NULL, 0},
        {"httpx", "openai", 12, 3, 1, 0, 0, NULL, 0},    {"httpx", "azure", 12, 3, 0, 0, 0, NULL, 0},
        {"httpx", "anthropic", 12, 3, 1, 0, 0, NULL, 0}, {"curl", "openai", 12, 3, 0, 0, 0, NULL, 0},
        {"curl", "azure", 12, 3, 1, 0, 0, NULL, 0},      {"curl", "anthropic", 12, 3, 0, 0, 0, NULL, 0},
    };
    const int nruns = (int)(sizeof(specs) / sizeof(specs[0]));
    client_run runs[MAX_RUNS];
    for (int i = 0; i < nruns; i++) run_init(&runs[i], &specs[i], i);
    mock_fixture m;
    const char *args[] = {"--rpm", "60000", "--service-ms", "5-30", "--seed", "11", NULL};
    assert_int_equal(mock_fixture_start(&m, args, 10000), 0);
    char bases[1][64], dir[256];
    snprintf(bases[0], sizeof(bases[0]), "http://127.0.0.1:%d", m.port);
    assert_int_equal(proc_mkdtemp(dir, sizeof(dir), "sdk-direct"), 0);
    double t0 = proc_now_ms();
    runs_go(runs, nruns, bases, dir);
    json_t *ledger = mock_fixture_stats(&m, "");
    mock_fixture_stop(&m);
    runs_print(runs, nruns);
    assert_non_null(ledger);
    long long want = 0;
    for (int i = 0; i < nruns; i++) want += runs[i].s.n;
    print_message("  %d client processes, %lld requests in %.1f s; the provider: %lld requests, %lld accepted, %lld "
                  "429s\n",
                  nruns, want, (proc_now_ms() - t0) / 1000, mock_fixture_count(ledger, "totals/requests"),
                  mock_fixture_count(ledger, "totals/accepted"), mock_fixture_count(ledger, "totals/status_429"));
    assert_all_answered(runs, nruns);
    assert_true(mock_fixture_count(ledger, "totals/requests") == want);
    assert_true(mock_fixture_count(ledger, "totals/accepted") == want);
    assert_usage_seen(ledger, runs, nruns);
    assert_credentials(ledger, runs, nruns);
    json_decref(ledger);
    runs_cleanup(runs, nruns, dir);
}

/* One chat call through a proxy with curl: the status, and the answer in
 * body. */
static int probe(int port, char *body, size_t n) {
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions", port);
    char *argv[] = {"curl",
                    "-sS",
                    "--max-time",
                    "60",
                    "-w",
                    "\n%{http_code}",
                    "-H",
                    "content-type: application/json",
                    "-H",
                    "authorization: Bearer sk-sluice-test-probe-0123456789-prob",
                    url,
                    "-d",
                    "{\"model\":\"gpt\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"probe\"}]}",
                    NULL};
    if (run_capture(argv, NULL, body, n) != 0) return 0;
    char *nl = strrchr(body, '\n');
    if (!nl) return 0;
    *nl = '\0';
    return atoi(nl + 1);
}

/* A number of STATUS dep (integer or string reply), -1 when absent. */
static double status_num(const daemon_proc *d, const char *dep, const char *field) {
    redisContext *c = daemon_connect(d);
    double v = -1;
    redisReply *r = c ? redisCommand(c, "STATUS %s", dep) : NULL;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *x = r->element[i + 1];
        if (k->type != REDIS_REPLY_STRING || strcmp(k->str, field)) continue;
        if (x->type == REDIS_REPLY_INTEGER) v = (double)x->integer;
        else if (x->type == REDIS_REPLY_STRING) v = atof(x->str);
        break;
    }
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
    return v;
}

/* The wall clock (the clients' "t"), in ms since the epoch. */
static double wall_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/* FLEET_KEEP: the ledger beside the client outputs, with the wall clock
 * at its reset (its since_ms), to put the two on one time line. */
static void keep_ledger(json_t *ledger, const char *dir, double wall_reset) {
    char path[400];
    if (!getenv("FLEET_KEEP") || !ledger) return;
    snprintf(path, sizeof(path), "%s/ledger.json", dir);
    json_object_set_new(ledger, "wall_at_reset_ms", json_real(wall_reset));
    json_dump_file(ledger, path, JSON_COMPACT);
}

/* The floor of one deployment: its accepts on the ledger, first to last,
 * against (accepted - 1 s of burst) / rate. */
static double floor_ratio(const json_t *ledger, const char *dep) {
    char path[96];
    snprintf(path, sizeof(path), "deployments/%s/accepted", dep);
    long long acc = mock_fixture_count(ledger, path);
    const json_t *d = json_object_get(json_object_get(ledger, "deployments"), dep);
    double first = json_number_value(json_object_get(d, "first_accept_ms"));
    double last = json_number_value(json_object_get(d, "last_accept_ms"));
    double floor_ms = ((double)acc - RPM / 60.0) / (RPM / 60000.0);
    double ratio = last > first ? floor_ms / (last - first) : 0;
    snprintf(path, sizeof(path), "deployments/%s/status_429", dep);
    long long n429 = mock_fixture_count(ledger, path);
    snprintf(path, sizeof(path), "deployments/%s/requests", dep);
    long long reqs = mock_fixture_count(ledger, path);
    print_message("  %s: %lld accepted of %lld requests (%lld 429s, %.2f %%) from %.0f to %.0f ms; floor %.0f ms: "
                  "%.1f %% of it\n",
                  dep, acc, reqs, n429, reqs ? 100.0 * (double)n429 / (double)reqs : 0.0, first, last, floor_ms,
                  100 * ratio);
    return ratio;
}

static void test_fleet_through_proxy(void **state) {
    (void)state;
    prerequisites_or_skip();
    /* Per agent: an OpenAI SDK (agent 2: the Azure client), the Anthropic
     * SDK, httpx and curl; 200 requests per deployment in all (20 s at
     * 600 RPM). The SDKs keep their own retries (max_retries 2, their
     * default): a shed is a 429 with Retry-After that they honour. */
    client_spec specs[12];
    int ns = 0;
    for (int a = 0; a < 3; a++) {
        specs[ns++] = (client_spec){"sdk", a == 2 ? "azure" : "openai", 40, 4, a % 2, 2, a, NULL, 0};
        specs[ns++] = (client_spec){"sdk", "anthropic", 40, 4, (a + 1) % 2, 2, a, NULL, 0};
        specs[ns++] = (client_spec){"httpx", a == 1 ? "anthropic" : "openai", 25, 3, a != 2, 2, a, NULL, 0};
        specs[ns++] =
            (client_spec){"curl", a == 1 ? "openai" : "anthropic", a == 1 ? 30 : 25, 3, a == 2, 2, a, NULL, 0};
    }
    client_run runs[MAX_RUNS];
    for (int i = 0; i < ns; i++) run_init(&runs[i], &specs[i], i);

    redis_fixture fx;
    mock_fixture m;
    daemon_proc d[3];
    int ports[3];
    char bases[3][64], dir[256], yaml[4096];
    assert_int_equal(redis_fixture_start(&fx, 0), 0);
    char rpm[16];
    snprintf(rpm, sizeof(rpm), "%d", RPM);
    const char *args[] = {"--rpm", rpm, "--service-ms", "20-60", "--seed", "12", NULL};
    assert_int_equal(mock_fixture_start(&m, args, 10000), 0);
    for (int a = 0; a < 3; a++) {
        char name[16];
        snprintf(name, sizeof(name), "agent%d", a);
        ports[a] = free_tcp_port();
        snprintf(bases[a], sizeof(bases[a]), "http://127.0.0.1:%d", ports[a]);
        daemon_init(&d[a], fx.dir, name);
        snprintf(
            yaml, sizeof(yaml),
            "redis: {url: \"unix://%s\"}\n"
            "agent: {socket: \"%%SOCK%%\", heartbeat_ms: 200, max_clients: 256, http: {listen: [\"127.0.0.1:%d\"]}}\n"
            "deployments:\n"
            "  gpt: {style: openai, rpm: %d, endpoint: \"http://127.0.0.1:%d\", max_wait_ms: 120000}\n"
            "  claude: {style: anthropic, rpm: %d, endpoint: \"http://127.0.0.1:%d\", max_wait_ms: 120000}\n",
            fx.sock, ports[a], RPM, m.port, RPM, m.port);
        assert_int_equal(sluiced_fixture_write_config(&d[a], yaml), 0);
        assert_int_equal(daemon_start(&d[a]), 0);
    }
    /* Governing at all? One call through agent 0 first. */
    char body[4096];
    int st = probe(ports[0], body, sizeof(body));
    if (st != 200) {
        double governing = info_num(&d[0], "http_governing");
        mock_fixture_stop(&m);
        harness_kill_all();
        redis_fixture_stop(&fx);
        if (st == 501)
            fail_msg("sluiced's HTTP proxy does not govern yet (INFO http_governing:%.0f): a chat call through it was "
                     "answered 501 and nothing reached the provider, so no real client can be governed through it "
                     "(issue 16, part 2). The answer: %s",
                     governing, body);
        fail_msg("a chat call through sluiced's HTTP proxy was answered %d, not 200: %s", st, body);
    }
    /* The probe's call is on the ledger as soon as it is answered, but its
     * settle reaches Redis a loop turn or more later: read at once, the
     * fleet's count could miss it and take it in with the run (4 tokens
     * on one side only, in a failed run). Both sides start after it: the
     * fleet's count once it holds the probe's usage exactly, the ledger
     * reset after that. */
    json_t *pj = json_loads(body, 0, NULL);
    long long probe_tokens = json_integer_value(json_object_get(json_object_get(pj, "usage"), "total_tokens"));
    json_decref(pj);
    double settled0 = -1, probe_t0 = proc_now_ms();
    while ((long long)(settled0 = status_num(&d[0], "gpt", "tokens_actual")) != probe_tokens &&
           proc_now_ms() - probe_t0 <= SETTLE_WAIT_MS)
        proc_sleep_ms(20);
    if (probe_tokens <= 0 || (long long)settled0 != probe_tokens) {
        mock_fixture_stop(&m);
        harness_kill_all();
        redis_fixture_stop(&fx);
        fail_msg("the probe's usage (%lld tokens in its answer) did not settle: STATUS gpt tokens_actual is %.0f "
                 "after %d ms",
                 probe_tokens, settled0, SETTLE_WAIT_MS);
    }
    print_message("  the probe: %lld tokens, in STATUS after %.0f ms\n", probe_tokens, proc_now_ms() - probe_t0);
    json_decref(mock_fixture_stats(&m, "?reset=1"));
    double wall_reset = wall_now_ms();
    assert_int_equal(proc_mkdtemp(dir, sizeof(dir), "sdk-fleet"), 0);
    double t0 = proc_now_ms();
    runs_go(runs, ns, bases, dir);
    double secs = (proc_now_ms() - t0) / 1000;
    json_t *ledger = mock_fixture_stats(&m, "");
    keep_ledger(ledger, dir, wall_reset);
    /* A settle reaches Redis a loop turn or more after its answer
     * (coalesced per deployment; later under load): STATUS is polled
     * until it equals the ledger, bounded, and judged after. */
    long long want_settled[2] = {ledger ? mock_fixture_count(ledger, "deployments/gpt/tokens_reported") : -1,
                                 ledger ? mock_fixture_count(ledger, "deployments/claude/tokens_reported") : -1};
    double settled[2], settle_t0 = proc_now_ms();
    for (;;) {
        settled[0] = status_num(&d[0], "gpt", "tokens_actual") - settled0;
        settled[1] = status_num(&d[0], "claude", "tokens_actual");
        if (((long long)settled[0] == want_settled[0] && (long long)settled[1] == want_settled[1]) ||
            proc_now_ms() - settle_t0 > SETTLE_WAIT_MS)
            break;
        proc_sleep_ms(20);
    }
    double settle_wait = proc_now_ms() - settle_t0;
    double info_actual = 0;
    for (int a = 0; a < 3; a++) info_actual += info_num(&d[a], "tokens_actual");
    for (int a = 0; a < 3; a++) daemon_stop(&d[a]);
    mock_fixture_stop(&m);
    redis_fixture_stop(&fx);
    runs_print(runs, ns);
    assert_non_null(ledger);
    print_message("  %d client processes through 3 proxies in %.1f s\n", ns, secs);
    double ratio[2] = {floor_ratio(ledger, "gpt"), floor_ratio(ledger, "claude")};
    long long reported[2] = {mock_fixture_count(ledger, "deployments/gpt/tokens_reported"),
                             mock_fixture_count(ledger, "deployments/claude/tokens_reported")};
    /* The probe settled before the reset: INFO counts it, the ledger not. */
    print_message("  usage settled (STATUS tokens_actual): gpt %.0f, claude %.0f; the provider reported gpt %lld, "
                  "claude %lld (STATUS polled %.0f ms for it); INFO tokens_actual over the agents %.0f (the probe's "
                  "%lld included)\n",
                  settled[0], settled[1], reported[0], reported[1], settle_wait, info_actual, probe_tokens);
    assert_all_answered(runs, ns);
    for (int k = 0; k < 2; k++) {
        const char *dep = k ? "claude" : "gpt";
        char path[64];
        snprintf(path, sizeof(path), "deployments/%s/status_429", dep);
        long long n429 = mock_fixture_count(ledger, path);
        snprintf(path, sizeof(path), "deployments/%s/requests", dep);
        long long reqs = mock_fixture_count(ledger, path);
        if (n429 * 100 > reqs) fail_msg("%s: %lld 429s on the provider's ledger, over 1 %% of %lld", dep, n429, reqs);
        if (ratio[k] < 0.97) fail_msg("%s: %.1f %% of the floor, under 97 %%", dep, 100 * ratio[k]);
        if ((long long)settled[k] != reported[k])
            fail_msg("%s: the fleet settled %.0f tokens, the provider reported %lld", dep, settled[k], reported[k]);
    }
    if ((long long)info_actual != reported[0] + reported[1] + probe_tokens)
        fail_msg("the agents' INFO tokens_actual add up to %.0f, the provider reported %lld (and %lld for the probe)",
                 info_actual, reported[0] + reported[1], probe_tokens);
    assert_usage_seen(ledger, runs, ns);
    assert_credentials(ledger, runs, ns);
    json_decref(ledger);
    runs_cleanup(runs, ns, dir);
}

/* The main use case of issue 21: unmodified SDKs through 3 proxies on an
 * Azure deployment whose TPM binds first. Each request charges 100 prompt
 * tokens + 300 max_tokens = 400 at admission, never given back; 600 RPM
 * and 180 000 TPM let 7.5 such requests a second, so tokens bind. The
 * proxy booked a combined figure and the settle counted the max output
 * twice before: the fleet ran at about 70 % of its quota. Judged on the
 * ledger: every request answered 200 and whole, <= 1 % 429s, >= 97 % of
 * the token floor ((tokens charged - the token burst) / rate, first to
 * last accept); and, whatever the machine's load, the tokens the fleet
 * counted (STATUS tokens_counted, fleet-wide) equal the tokens the
 * provider charged (the ledger's tokens_charged), to the token. */
#define TPM_BOUND 180000
#define TPM_BURST 3000

static void test_fleet_tpm_bound(void **state) {
    (void)state;
    prerequisites_or_skip();
    client_spec specs[6];
    int ns = 0;
    for (int a = 0; a < 3; a++) {
        specs[ns++] = (client_spec){"sdk", "azure", 25, 4, 0, 2, a, "gpt-tpm", 300};
        specs[ns++] = (client_spec){"sdk", "azure", 25, 4, 1, 2, a, "gpt-tpm", 300};
    }
    client_run runs[MAX_RUNS];
    for (int i = 0; i < ns; i++) run_init(&runs[i], &specs[i], i);
    redis_fixture fx;
    mock_fixture m;
    daemon_proc d[3];
    int ports[3];
    char bases[3][64], dir[256], yaml[4096];
    assert_int_equal(redis_fixture_start(&fx, 0), 0);
    char rpm[16], tpm[16], tburst[16];
    snprintf(rpm, sizeof(rpm), "%d", RPM);
    snprintf(tpm, sizeof(tpm), "%d", TPM_BOUND);
    snprintf(tburst, sizeof(tburst), "%d", TPM_BURST);
    const char *args[] = {"--rpm",        rpm,     "--burst", "10", "--tpm", tpm, "--token-burst", tburst,
                          "--service-ms", "20-60", "--seed",  "13", NULL};
    assert_int_equal(mock_fixture_start(&m, args, 10000), 0);
    for (int a = 0; a < 3; a++) {
        char name[16];
        snprintf(name, sizeof(name), "agent%d", a);
        ports[a] = free_tcp_port();
        snprintf(bases[a], sizeof(bases[a]), "http://127.0.0.1:%d", ports[a]);
        daemon_init(&d[a], fx.dir, name);
        /* agent.http.listen as one string, as people write it first. */
        snprintf(
            yaml, sizeof(yaml),
            "redis: {url: \"unix://%s\"}\n"
            "agent: {socket: \"%%SOCK%%\", heartbeat_ms: 200, max_clients: 256, http: {listen: \"127.0.0.1:%d\"}}\n"
            "deployments:\n"
            "  gpt-tpm: {style: azure, rpm: %d, tpm: %d, burst: {tokens: %d}, api_version: 2024-06-01,\n"
            "            endpoint: \"http://127.0.0.1:%d\", max_wait_ms: 120000}\n",
            fx.sock, ports[a], RPM, TPM_BOUND, TPM_BURST, m.port);
        assert_int_equal(sluiced_fixture_write_config(&d[a], yaml), 0);
        assert_int_equal(daemon_start(&d[a]), 0);
    }
    json_decref(mock_fixture_stats(&m, "?reset=1"));
    assert_int_equal(proc_mkdtemp(dir, sizeof(dir), "sdk-tpm"), 0);
    double t0 = proc_now_ms();
    runs_go(runs, ns, bases, dir);
    double secs = (proc_now_ms() - t0) / 1000;
    json_t *ledger = mock_fixture_stats(&m, "");
    assert_non_null(ledger);
    long long charged = mock_fixture_count(ledger, "deployments/gpt-tpm/tokens_charged");
    /* Every settle reaches Redis a loop turn or more after its answer. */
    double counted = 0, wait_t0 = proc_now_ms();
    while ((counted = status_num(&d[0], "gpt-tpm", "tokens_counted")) != (double)charged &&
           proc_now_ms() - wait_t0 <= SETTLE_WAIT_MS)
        proc_sleep_ms(20);
    double est = status_num(&d[0], "gpt-tpm", "tokens_estimated");
    for (int a = 0; a < 3; a++) daemon_stop(&d[a]);
    mock_fixture_stop(&m);
    redis_fixture_stop(&fx);
    runs_print(runs, ns);
    long long acc = mock_fixture_count(ledger, "deployments/gpt-tpm/accepted");
    long long reqs = mock_fixture_count(ledger, "deployments/gpt-tpm/requests");
    long long n429 = mock_fixture_count(ledger, "deployments/gpt-tpm/status_429");
    const json_t *dj = json_object_get(json_object_get(ledger, "deployments"), "gpt-tpm");
    double first = json_number_value(json_object_get(dj, "first_accept_ms"));
    double last = json_number_value(json_object_get(dj, "last_accept_ms"));
    double floor_ms = ((double)charged - TPM_BURST) / (TPM_BOUND / 60000.0);
    double ratio = last > first ? floor_ms / (last - first) : 0;
    print_message("  %d SDK processes through 3 proxies in %.1f s: %lld accepted of %lld requests (%lld 429s), "
                  "%lld tokens charged by the provider, %.0f counted by the fleet (%.0f estimated); from %.0f to "
                  "%.0f ms, token floor %.0f ms: %.1f %% of it\n",
                  ns, secs, acc, reqs, n429, charged, counted, est, first, last, floor_ms, 100 * ratio);
    assert_all_answered(runs, ns);
    if (counted != (double)charged)
        fail_msg("the fleet counted %.0f tokens, the provider charged %lld", counted, charged);
    if (n429 * 100 > reqs) fail_msg("%lld 429s on the provider's ledger, over 1 %% of %lld", n429, reqs);
    /* The share of the token floor is a real-time figure: printed above
     * (measured 100.0 %), judged in docs/benchmarks.md, not here. */
    json_decref(ledger);
    runs_cleanup(runs, ns, dir);
}

/* Key injection (docs/security.md, "Who may spend the provider key"):
 * one sluiced on a loopback TCP port whose deployments inject the
 * provider key (inject_key, api_key_env) for callers with a client key
 * (agent.http.clients.<name>.key_env). The official SDKs, unmodified,
 * with a wrong key as their apiKey: every request 401 (the SDK's
 * AuthenticationError, not retried) and the provider's ledger sees
 * nothing. With the client key as their apiKey, streamed and not: every
 * request answered 200 and whole, and the ledger's credentials map shows
 * only the provider key's fingerprint, in the header each style uses
 * (authorization for OpenAI, x-api-key for Anthropic), on every accepted
 * call: the client key never reached the provider. */
static void test_sdk_key_injection(void **state) {
    (void)state;
    prerequisites_or_skip();
    static const char provider_key[] = "sk-provider-only-0123456789-PRV9";
    static const char client_key[] = "sluice-client-0123456789abcdef-CL17";
    static const char wrong_key[] = "sluice-client-0123456789abcdef-WR0N";
    static const client_spec wrong[] = {{"sdk", "openai", 3, 1, 0, 2, 0, NULL, 0},
                                        {"sdk", "anthropic", 3, 1, 1, 2, 0, NULL, 0}};
    static const client_spec good[] = {{"sdk", "openai", 6, 2, 0, 2, 0, NULL, 0},
                                       {"sdk", "openai", 6, 2, 1, 2, 0, NULL, 0},
                                       {"sdk", "anthropic", 6, 2, 1, 2, 0, NULL, 0}};
    const int nwrong = 2, ngood = 3;
    client_run wr[2], gr[3];
    for (int i = 0; i < nwrong; i++) {
        run_init(&wr[i], &wrong[i], i);
        snprintf(wr[i].tag, sizeof(wr[i].tag), "wrong-key-%s", wrong[i].flavour);
        snprintf(wr[i].key, sizeof(wr[i].key), "%s", wrong_key);
        snprintf(wr[i].last4, sizeof(wr[i].last4), "WR0N");
    }
    for (int i = 0; i < ngood; i++) {
        run_init(&gr[i], &good[i], i);
        snprintf(gr[i].key, sizeof(gr[i].key), "%s", client_key);
        snprintf(gr[i].last4, sizeof(gr[i].last4), "CL17");
    }
    redis_fixture fx;
    mock_fixture m;
    daemon_proc d;
    char bases[1][64], dir[256], yaml[2048];
    assert_int_equal(redis_fixture_start(&fx, 0), 0);
    const char *args[] = {"--rpm", "60000", "--service-ms", "5-20", "--seed", "13", NULL};
    assert_int_equal(mock_fixture_start(&m, args, 10000), 0);
    int port = free_tcp_port();
    snprintf(bases[0], sizeof(bases[0]), "http://127.0.0.1:%d", port);
    daemon_init(&d, fx.dir, "inject");
    snprintf(yaml, sizeof(yaml),
             "redis: {url: \"unix://%s\"}\n"
             "agent:\n  socket: \"%%SOCK%%\"\n  heartbeat_ms: 200\n"
             "  http:\n    listen: [\"127.0.0.1:%d\"]\n    clients:\n      svc: {key_env: SDK_TEST_CLIENT_KEY}\n"
             "deployments:\n"
             "  gpt: {style: openai, rpm: 6000, endpoint: \"http://127.0.0.1:%d\", api_key_env: SDK_TEST_PROVIDER_KEY, "
             "inject_key: true}\n"
             "  claude: {style: anthropic, rpm: 6000, endpoint: \"http://127.0.0.1:%d\", api_key_env: "
             "SDK_TEST_PROVIDER_KEY, inject_key: true}\n",
             fx.sock, port, m.port, m.port);
    assert_int_equal(sluiced_fixture_write_config(&d, yaml), 0);
    /* The daemon reads both keys from its environment; the clients are
     * started without them. */
    setenv("SDK_TEST_PROVIDER_KEY", provider_key, 1);
    setenv("SDK_TEST_CLIENT_KEY", client_key, 1);
    int started = daemon_start(&d);
    unsetenv("SDK_TEST_PROVIDER_KEY");
    unsetenv("SDK_TEST_CLIENT_KEY");
    assert_int_equal(started, 0);
    assert_int_equal(proc_mkdtemp(dir, sizeof(dir), "sdk-inject"), 0);

    /* A wrong key: 401, and nothing reaches the provider. */
    runs_go(wr, nwrong, bases, dir);
    json_t *ledger = mock_fixture_stats(&m, "");
    runs_print(wr, nwrong);
    assert_non_null(ledger);
    long long reached = mock_fixture_count(ledger, "totals/requests");
    print_message("  wrong key: the provider saw %lld requests\n", reached);
    json_decref(ledger);
    for (int i = 0; i < nwrong; i++) {
        if (wr[i].lines != wr[i].s.n || wr[i].st401 != wr[i].s.n)
            fail_msg("%s: %d of %d requests answered 401", wr[i].tag, wr[i].st401, wr[i].s.n);
        if (strcmp(wr[i].error_types, "AuthenticationError"))
            fail_msg("%s: the SDK threw %s, not AuthenticationError", wr[i].tag, wr[i].error_types);
    }
    assert_true(reached == 0);

    /* The client key: served, and the provider sees only its own key. */
    runs_go(gr, ngood, bases, dir);
    ledger = mock_fixture_stats(&m, "");
    daemon_stop(&d);
    mock_fixture_stop(&m);
    redis_fixture_stop(&fx);
    runs_print(gr, ngood);
    assert_non_null(ledger);
    const json_t *cmap = json_object_get(ledger, "credentials");
    const char *fp;
    json_t *v;
    json_object_foreach((json_t *)cmap, fp, v) {
        print_message("  client key: the provider saw credential %s on %lld requests\n", fp,
                      (long long)json_integer_value(json_object_get(v, "requests")));
    }
    assert_all_answered(gr, ngood);
    long long want = 0, want_claude = 0;
    for (int i = 0; i < ngood; i++) {
        want += gr[i].s.n;
        if (!strcmp(gr[i].model, "claude")) want_claude += gr[i].s.n;
    }
    assert_int_equal(json_object_size(cmap), 2);
    assert_true(mock_fixture_count(ledger, "credentials/authorization:PRV9/accepted") == want - want_claude);
    assert_true(mock_fixture_count(ledger, "credentials/x-api-key:PRV9/accepted") == want_claude);
    assert_true(mock_fixture_count(ledger, "totals/requests") == want);
    assert_true(mock_fixture_count(ledger, "totals/accepted") == want);
    assert_usage_seen(ledger, gr, ngood);
    json_decref(ledger);
    runs_cleanup(wr, nwrong, dir);
    runs_cleanup(gr, ngood, dir);
}

static int teardown(void **state) {
    (void)state;
    harness_kill_all();
    return 0;
}

/* SDK_TESTS=direct or fleet runs one of them (ctest runs them as
 * test_proxy_sdk and test_proxy_sdk_fleet); unset, both. */
int main(void) {
    const char *only = getenv("SDK_TESTS");
    const struct CMUnitTest direct[] = {cmocka_unit_test_teardown(test_clients_direct, teardown),
                                        cmocka_unit_test_teardown(test_sdk_key_injection, teardown)};
    const struct CMUnitTest fleet[] = {cmocka_unit_test_teardown(test_fleet_through_proxy, teardown),
                                       cmocka_unit_test_teardown(test_fleet_tpm_bound, teardown)};
    const struct CMUnitTest both[] = {
        cmocka_unit_test_teardown(test_clients_direct, teardown),
        cmocka_unit_test_teardown(test_sdk_key_injection, teardown),
        cmocka_unit_test_teardown(test_fleet_through_proxy, teardown),
        cmocka_unit_test_teardown(test_fleet_tpm_bound, teardown),
    };
    if (only && !strcmp(only, "direct")) return cmocka_run_group_tests(direct, NULL, NULL);
    if (only && !strcmp(only, "fleet")) return cmocka_run_group_tests(fleet, NULL, NULL);
    return cmocka_run_group_tests(both, NULL, NULL);
}
