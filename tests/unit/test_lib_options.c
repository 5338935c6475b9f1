/* Unit tests for lib/options: the configuration of an embedded governor
 * from sl_options. The redis_url + deployments form composes YAML that the
 * sluiced schema validates (flow and block deployments, quoting), and
 * every form reports its errors with the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "options.h"

static config *load(const char *url, const char *deps, char *err, size_t n) {
    sl_options o;
    sl_options_init(&o);
    o.redis_url = url;
    o.deployments = deps;
    config *cfg = NULL;
    if (options_load_config(&o, &cfg, err, n) != 0) return NULL;
    return cfg;
}

static void test_compose(void **state) {
    char *t = options_compose_config("redis://10.0.0.5:6379/2", "{gpt-4o: {rpm: 60}}");
    assert_string_equal(t, "redis:\n  url: \"redis://10.0.0.5:6379/2\"\ndeployments: {gpt-4o: {rpm: 60}}\n");
    free(t);
    t = options_compose_config("unix:///run/r.sock", "a:\n  rpm: 1\nb:\n  rpm: 2");
    assert_string_equal(t, "redis:\n  url: \"unix:///run/r.sock\"\ndeployments:\n  a:\n    rpm: 1\n  b:\n    rpm: 2\n");
    free(t);
    t = options_compose_config("redis://h\"x\\", "{}");
    assert_non_null(strstr(t, "url: \"redis://h\\\"x\\\\\""));
    free(t);
    assert_null(options_compose_config("redis://h\nx", "{}"));
}

static void test_load(void **state) {
    char err[512];
    config *cfg =
        load("redis://127.0.0.1:6390/1", "{gpt-4o: {rpm: 60, tpm: 150000}, small: {rpm: 6}}", err, sizeof(err));
    if (!cfg) fail_msg("%s", err);
    assert_int_equal(cfg->ndeployments, 2);
    assert_int_equal(cfg->redis.port, 6390);
    assert_int_equal(cfg->redis.db, 1);
    const struct config_deployment *d = config_deployment(cfg, "gpt-4o");
    assert_non_null(d);
    assert_int_equal(d->tpm, 150000);
    config_free(cfg);
    cfg = load("redis://127.0.0.1", "gpt-4o:\n  rpm: 60\n  burst: { requests: 3 }\n", err, sizeof(err));
    if (!cfg) fail_msg("%s", err);
    assert_int_equal(config_deployment(cfg, "gpt-4o")->burst.requests, 3);
    config_free(cfg);
    /* Errors name the key. */
    assert_null(load("redis://127.0.0.1", "{d: {rpm: 0}}", err, sizeof(err)));
    assert_non_null(strstr(err, "deployments.d.rpm"));
    assert_null(load("redis://127.0.0.1", "{d: {rpn: 5}}", err, sizeof(err)));
    assert_non_null(strstr(err, "rpn"));
    assert_null(load("redis://user:secret@127.0.0.1", "{d: {rpm: 5}}", err, sizeof(err)));
    assert_null(strstr(err, "secret"));
    assert_null(load("redis://127.0.0.1", NULL, err, sizeof(err)));
    assert_non_null(strstr(err, "needs deployments"));
    sl_options o;
    sl_options_init(&o);
    o.config_text = "deployments: {d: {rpm: 5}}";
    o.config_path = "/x.yaml";
    config *c2 = NULL;
    assert_int_equal(options_load_config(&o, &c2, err, sizeof(err)), SL_EINVAL);
    assert_non_null(strstr(err, "exactly one"));
    sl_options_init(&o);
    o.config_text = "deployments: {d: {rpm: 5}}";
    assert_int_equal(options_load_config(&o, &c2, err, sizeof(err)), 0);
    config_free(c2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compose),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
