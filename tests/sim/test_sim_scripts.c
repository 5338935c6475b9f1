/* test_sim_scripts: the simulated clock cannot reach production. The
 * scripts production embeds (lua/embed.cmake: lua/common.lua + lua/NAME.lua)
 * are checked here, linked from the production library sluice_lua: each
 * begins with lua/common.lua byte for byte and none holds the simulation's
 * preamble (tests/sim/sim_preamble.lua, which only the simulated core
 * embeds) or its clock's keys. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "lua_scripts.h"

static char *read_file(const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static void test_production_scripts_have_no_sim_clock(void **state) {
    const char *src = getenv("SLUICE_SOURCE_DIR");
    assert_non_null(src);
    char path[512];
    snprintf(path, sizeof(path), "%s/lua/common.lua", src);
    size_t clen;
    char *common = read_file(path, &clen);
    assert_non_null(common);
    int n = 0;
    for (const lua_script *s = sluice_lua_scripts; s->name; s++, n++) {
        assert_true(s->len > clen);
        assert_memory_equal(s->source, common, clen);
        assert_null(strstr(s->source, "SL_SIM"));
        assert_null(strstr(s->source, "sluice:sim:"));
    }
    assert_int_equal(n, SLUICE_LUA_NSCRIPTS);
    free(common);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_production_scripts_have_no_sim_clock)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
