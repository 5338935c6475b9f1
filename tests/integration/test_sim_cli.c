/* test_sim_cli: `sluice sim`, the fleet simulator as a command (issue 22,
 * item 5), run as a user runs it: the built `sluice`, which executes
 * sluice-sim beside it, on a generated configuration whose redis section
 * names a password file that does not exist here (the simulator replaces
 * that section, so it must never be read).
 *
 * Asserted: the same seed prints the same bytes (twice, text and JSON), a
 * different seed a different table; a bad configuration fails with exit 2
 * and one message naming the file, the line and the key; an Azure
 * deployment offered 1.5 x its quota completes every request with at least
 * 95 % utilisation of its binding dimension and at most 1 % 429s; lanes,
 * tenants and a JSONL trace shape the traffic; `sluice --help` lists sim.
 * Skipped when sluice or sluice-sim is not built. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "proc.h"

static char sluice_bin[4096], dir[256], cfg_path[512], bad_path[512], trace_path[512];
static int up;

/* What one run of the CLI printed. */
typedef struct output {
    int code;
    char out[65536];
    char err[8192];
} output;

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int world_up(void **state) {
    (void)state;
    const char *bdir = getenv("SLUICE_BUILD_DIR");
    char sim_bin[4200];
    snprintf(sluice_bin, sizeof(sluice_bin), "%s/sluice", bdir ? bdir : ".");
    snprintf(sim_bin, sizeof(sim_bin), "%s/sluice-sim", bdir ? bdir : ".");
    if (access(sluice_bin, X_OK) != 0 || access(sim_bin, X_OK) != 0) {
        fprintf(stderr, "test_sim_cli: SKIPPED: sluice or sluice-sim is not built\n");
        return 0;
    }
    if (proc_mkdtemp(dir, sizeof(dir), "sluice-sim-cli") != 0) return -1;
    snprintf(cfg_path, sizeof(cfg_path), "%s/sluiced.yaml", dir);
    snprintf(bad_path, sizeof(bad_path), "%s/bad.yaml", dir);
    snprintf(trace_path, sizeof(trace_path), "%s/trace.jsonl", dir);
    static const char cfg[] = "redis:\n"
                              "  url: redis://10.0.0.5:6379\n"
                              "  password_file: /nonexistent/sluice/redis.pass\n"
                              "agent:\n"
                              "  socket: /run/sluice/agent.sock\n"
                              "deployments:\n"
                              "  az:\n"
                              "    style: azure\n"
                              "    rpm: 900\n"
                              "    tpm: 150000\n"
                              "    max_wait_ms: 60000\n"
                              "  oa:\n"
                              "    style: openai\n"
                              "    rpm: 300\n"
                              "    max_wait_ms: 60000\n"
                              "    lanes:\n"
                              "      interactive: {priority: 0, max_wait_ms: 60000, headroom: 0.2}\n"
                              "      batch: {priority: 1, max_wait_ms: 600000}\n"
                              "    tenants: {chat: {weight: 3}, import: {weight: 1}}\n";
    static const char bad[] = "agent:\n"
                              "  socket: /run/sluice/agent.sock\n"
                              "deployments:\n"
                              "  az:\n"
                              "    rpm: abc\n";
    static const char trace[] = "# three past requests\n"
                                "{\"t_ms\": 0, \"deployment\": \"az\", \"input_tokens\": 800, \"output_tokens\": 200}\n"
                                "{\"t_ms\": 250.5, \"deployment\": \"az\", \"tenant\": \"t1\"}\n"
                                "\n"
                                "{\"t_ms\": 100, \"deployment\": \"oa\", \"lane\": \"batch\"}\n";
    if (write_file(cfg_path, cfg) != 0 || write_file(bad_path, bad) != 0 || write_file(trace_path, trace) != 0) {
        proc_rmtree(dir);
        return -1;
    }
    up = 1;
    return 0;
}

static int world_down(void **state) {
    (void)state;
    if (up) proc_rmtree(dir);
    up = 0;
    return 0;
}

/* Runs `sluice ARGS...` (NULL-terminated) into *o. */
static void cli(output *o, const char *first, ...) {
    const char *argv[32];
    int n = 0, po[2], pe[2];
    argv[n++] = sluice_bin;
    argv[n++] = first;
    va_list ap;
    va_start(ap, first);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && n < 31;) argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    assert_int_equal(pipe2(po, O_CLOEXEC), 0);
    assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    memset(o, 0, sizeof(*o));
    size_t lo = 0, le = 0;
    struct pollfd p[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        assert_true(poll(p, 2, 120000) > 0);
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP))) continue;
            char *buf = i == 0 ? o->out + lo : o->err + le;
            size_t room = i == 0 ? sizeof(o->out) - 1 - lo : sizeof(o->err) - 1 - le;
            char sink[4096];
            ssize_t r = read(p[i].fd, room ? buf : sink, room ? room : sizeof(sink));
            if (r <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
            } else if (room) {
                if (i == 0) lo += (size_t)r;
                else le += (size_t)r;
            }
        }
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    o->code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (o->code != 0) fprintf(stderr, "sluice %s: exit %d: %s", first, o->code, o->err);
}

static output a, b;

static void test_same_seed_same_table(void **state) {
    (void)state;
    if (!up) skip();
    cli(&a, "sim", "--config", cfg_path, "--seed", "3", NULL);
    cli(&b, "sim", "--config", cfg_path, "--seed", "3", NULL);
    assert_int_equal(a.code, 0);
    assert_int_equal(b.code, 0);
    printf("%s", a.out);
    assert_non_null(strstr(a.out, "az: azure world"));
    assert_non_null(strstr(a.out, "oa: openai world"));
    assert_non_null(strstr(a.out, "utilisation"));
    assert_string_equal(a.out, b.out);
    /* Another seed, another run. */
    cli(&b, "sim", "--config", cfg_path, "--seed", "4", NULL);
    assert_int_equal(b.code, 0);
    assert_true(strcmp(a.out, b.out) != 0);
}

static const json_t *deployment(const json_t *doc, const char *name) {
    const json_t *arr = json_object_get(doc, "deployments");
    assert_true(json_is_array(arr));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *d = json_array_get(arr, i);
        if (strcmp(json_string_value(json_object_get(d, "deployment")), name) == 0) return d;
    }
    fail_msg("no deployment %s in the JSON", name);
    return NULL;
}

static long long jint(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    if (!json_is_integer(v)) fail_msg("field %s is not an integer", k);
    return (long long)json_integer_value(v);
}

static double jnum(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) fail_msg("field %s is not a number", k);
    return json_number_value(v);
}

/* Azure at 1.5 x its quota (token-bound: 1000 tokens a request at 150k
 * TPM, 900 RPM): the fleet uses the quota and stays out of 429s. */
static void test_azure_uses_the_quota(void **state) {
    (void)state;
    if (!up) skip();
    cli(&a, "sim", "--config", cfg_path, "--seed", "3", "--json", NULL);
    cli(&b, "sim", "--config", cfg_path, "--seed", "3", "--json", NULL);
    assert_int_equal(a.code, 0);
    assert_string_equal(a.out, b.out);
    json_error_t je;
    json_t *doc = json_loads(a.out, 0, &je);
    assert_non_null(doc);
    const json_t *az = deployment(doc, "az");
    assert_string_equal(json_string_value(json_object_get(az, "binding")), "tokens");
    long long offered = jint(az, "offered"), sends = jint(az, "sends"), throttled = jint(az, "throttled");
    double util = jnum(az, "utilisation");
    printf("az: %lld offered, %lld completed, %lld 429 of %lld sends, utilisation %.4f, makespan %.1f s, floor "
           "%.1f s\n",
           offered, jint(az, "completed"), throttled, sends, util, jnum(az, "makespan_s"), jnum(az, "floor_s"));
    assert_int_equal(offered, 225); /* 1.5 x 150 requests a minute for 60 s */
    assert_int_equal(jint(az, "completed"), offered);
    assert_true(util >= 0.95);
    assert_true(util <= 1.01);
    assert_true(throttled * 100 <= sends);
    assert_true(jnum(az, "makespan_s") >= jnum(az, "floor_s"));
    json_decref(doc);
}

static void test_bad_config(void **state) {
    (void)state;
    if (!up) skip();
    cli(&a, "sim", "--config", bad_path, NULL);
    assert_int_equal(a.code, 2);
    char want[600];
    snprintf(want, sizeof(want), "%s:5: key 'deployments.az.rpm'", bad_path);
    assert_non_null(strstr(a.err, want));
    assert_string_equal(a.out, "");
    cli(&a, "sim", "--config", cfg_path, "--deployment", "nope", NULL);
    assert_int_equal(a.code, 2);
    assert_non_null(strstr(a.err, "no deployment 'nope'"));
    cli(&a, "sim", "--config", cfg_path, "--deployment", "oa", "--lane", "bulk=1", NULL);
    assert_int_equal(a.code, 2);
    assert_non_null(strstr(a.err, "has no such lane"));
    cli(&a, "sim", "--config", cfg_path, "--deployment", "az", "--provider", "anthropic", NULL);
    assert_int_equal(a.code, 2);
    assert_non_null(strstr(a.err, "deployment 'az' has tpm, a limit the anthropic world does not have"));
    cli(&a, "sim", "--config", cfg_path, "--provider", "acme", NULL);
    assert_int_equal(a.code, 2);
    assert_non_null(strstr(a.err, "--provider: expected azure, openai, anthropic, bedrock or gemini"));
    unsetenv("SLUICE_CONFIG");
    cli(&a, "sim", NULL);
    assert_int_equal(a.code, 2);
    assert_non_null(strstr(a.err, "--config FILE (or SLUICE_CONFIG) is required"));
    /* Without --config, SLUICE_CONFIG names it (as for run and status). */
    setenv("SLUICE_CONFIG", bad_path, 1);
    cli(&a, "sim", NULL);
    unsetenv("SLUICE_CONFIG");
    assert_int_equal(a.code, 2);
    assert_non_null(strstr(a.err, want));
}

/* --lane and --tenant split the demand: each lane and tenant has its row
 * of waits, and the interactive lane (served first) waits less. */
static void test_lanes_and_tenants(void **state) {
    (void)state;
    if (!up) skip();
    cli(&a, "sim", "--config", cfg_path, "--deployment", "oa", "--lane", "interactive=1", "--lane=batch=3", "--tenant",
        "chat=1", "--tenant", "import=1", "--json", NULL);
    assert_int_equal(a.code, 0);
    json_error_t je;
    json_t *doc = json_loads(a.out, 0, &je);
    assert_non_null(doc);
    assert_int_equal(json_array_size(json_object_get(doc, "deployments")), 1);
    const json_t *d = deployment(doc, "oa");
    const json_t *lanes = json_object_get(d, "lanes"), *tenants = json_object_get(d, "tenants");
    const json_t *inter = json_object_get(lanes, "interactive"), *batch = json_object_get(lanes, "batch");
    assert_non_null(inter);
    assert_non_null(batch);
    assert_non_null(json_object_get(tenants, "chat"));
    assert_non_null(json_object_get(tenants, "import"));
    assert_int_equal(jint(inter, "n") + jint(batch, "n"), jint(d, "completed"));
    printf("lanes: interactive p50 %.2f s p99 %.2f s (%lld), batch p50 %.2f s p99 %.2f s (%lld)\n",
           jnum(inter, "p50_s"), jnum(inter, "p99_s"), jint(inter, "n"), jnum(batch, "p50_s"), jnum(batch, "p99_s"),
           jint(batch, "n"));
    assert_true(jnum(inter, "p50_s") < jnum(batch, "p50_s"));
    json_decref(doc);
}

/* A trace replaces the demand: its requests, by deployment. */
static void test_trace(void **state) {
    (void)state;
    if (!up) skip();
    cli(&a, "sim", "--config", cfg_path, "--trace", trace_path, "--json", NULL);
    assert_int_equal(a.code, 0);
    json_error_t je;
    json_t *doc = json_loads(a.out, 0, &je);
    assert_non_null(doc);
    assert_int_equal(jint(deployment(doc, "az"), "offered"), 2);
    assert_int_equal(jint(deployment(doc, "az"), "completed"), 2);
    assert_non_null(json_object_get(json_object_get(deployment(doc, "az"), "tenants"), "t1"));
    assert_int_equal(jint(deployment(doc, "oa"), "offered"), 1);
    assert_non_null(json_object_get(json_object_get(deployment(doc, "oa"), "lanes"), "batch"));
    json_decref(doc);
}

static void test_help_lists_sim(void **state) {
    (void)state;
    if (!up) skip();
    cli(&a, "--help", NULL);
    assert_int_equal(a.code, 0);
    assert_non_null(strstr(a.out, "  sim "));
    cli(&a, "sim", "--help", NULL);
    assert_int_equal(a.code, 0);
    assert_non_null(strstr(a.out, "--trace FILE"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_seed_same_table),
        cmocka_unit_test(test_azure_uses_the_quota),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_lanes_and_tenants),
        cmocka_unit_test(test_trace),
        cmocka_unit_test(test_help_lists_sim),
    };
    return cmocka_run_group_tests(tests, world_up, world_down);
}
