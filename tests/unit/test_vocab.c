/* Unit tests for lib/core/vocab.h: the engine, the daemon and the Lua
 * scripts speak the same words.
 *   - the shed and deferral reasons the reserve script can return (its
 *     verdict literals, the reasons it assigns, the dimensions' reasons in
 *     common.lua's SL_DIMS) are exactly the table's LUA words, and the
 *     ENGINE words are never the script's (else they would be LUA);
 *   - the verdict kinds (common.lua SL_SHED, SL_GRANT, SL_DEFER) are the
 *     table's numbers, and reserve.lua builds every verdict with
 *     sl_verdict and compares kinds by name, never by a bare number;
 *   - the dimensions (common.lua SL_DIMS: name, letter, limit field and
 *     reason) are SLUICE_DIM_MAP's, in its order, as are engine_dim_names;
 *   - each argument marker of SLUICE_ARG_MARKER_MAP is one the scripts
 *     read;
 *   - the outcomes the settle script accepts (settle.lua: OUTCOMES) are
 *     exactly the outcome table, in the order of sl_outcome;
 *   - the engine's tables and indexes follow the X-macros (an unknown word
 *     is "other"), and each error word stands for a code of its own whose
 *     message is known; the daemon's CLOSING reply starts with its word.
 * The scripts are read from SLUICE_SOURCE_DIR (ctest sets it). */
#define _POSIX_C_SOURCE 200809L
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine.h"
#include "sluice.h"
#include "vocab.h"

#define MAX_WORDS 64

typedef struct words {
    char w[MAX_WORDS][32];
    size_t n;
} words;

static void words_add(words *s, const char *w, size_t len) {
    if (len >= sizeof(s->w[0])) fail_msg("word too long: %.*s", (int)len, w);
    for (size_t i = 0; i < s->n; i++)
        if (strlen(s->w[i]) == len && !strncmp(s->w[i], w, len)) return;
    if (s->n == MAX_WORDS) fail_msg("too many words");
    memcpy(s->w[s->n], w, len);
    s->w[s->n][len] = '\0';
    s->n++;
}

static int words_has(const words *s, const char *w) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->w[i], w)) return 1;
    return 0;
}

static char *slurp_script(const char *name) {
    const char *src = getenv("SLUICE_SOURCE_DIR");
    if (!src) fail_msg("SLUICE_SOURCE_DIR is not set (run under ctest)");
    char path[1024];
    snprintf(path, sizeof(path), "%s/lua/%s", src, name);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Every match of pattern's first group in text, skipping Lua comments. */
static void collect(words *out, const char *text, const char *pattern) {
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED), 0);
    const char *line = text;
    while (*line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        if (len >= sizeof(buf)) len = sizeof(buf) - 1;
        memcpy(buf, line, len);
        buf[len] = '\0';
        char *comment = strstr(buf, "--");
        if (comment) *comment = '\0';
        const char *p = buf;
        regmatch_t m[2];
        while (regexec(&re, p, 2, m, 0) == 0) {
            words_add(out, p + m[1].rm_so, (size_t)(m[1].rm_eo - m[1].rm_so));
            p += m[0].rm_eo;
        }
        if (!end) break;
        line = end + 1;
    }
    regfree(&re);
}

static void test_shed_reasons_match_the_scripts(void **state) {
    (void)state;
    char *reserve = slurp_script("reserve.lua"), *common = slurp_script("common.lua");
    words lua = {0};
    /* Verdicts: sl_verdict(SL_SHED, 'word', ...) sheds,
     * sl_verdict(SL_DEFER, 'word', ...) deferrals. */
    collect(&lua, reserve, "sl_verdict\\(SL_SHED, '([a-z_]+)'");
    collect(&lua, reserve, "sl_verdict\\(SL_DEFER, '([a-z_]+)'");
    /* Reasons assigned: reason = 'w', s, reason = x, 'w', why = 'w'. */
    collect(&lua, reserve, " reason = '([a-z_]+)'");
    collect(&lua, reserve, "[a-z_0-9]+, reason = [^,]+, '([a-z_]+)'");
    collect(&lua, reserve, "why = '([a-z_]+)'");
    /* The dimensions' reasons (SL_DIMS rows). */
    collect(&lua, common, " reason = '([a-z_]+)'");
    free(reserve);
    free(common);
    assert_true(lua.n >= 10); /* the patterns still find the script's words */

    words lua_table = {0}, engine_table = {0};
#define ADD_LUA(name, word, source)                                                                                    \
    if (!strcmp(#source, "LUA")) words_add(&lua_table, word, strlen(word));
#define ADD_ENGINE(name, word, source)                                                                                 \
    if (!strcmp(#source, "ENGINE")) words_add(&engine_table, word, strlen(word));
    SLUICE_SHED_REASON_MAP(ADD_LUA)
    SLUICE_SHED_REASON_MAP(ADD_ENGINE)
#undef ADD_LUA
#undef ADD_ENGINE
    for (size_t i = 0; i < lua.n; i++)
        if (!words_has(&lua_table, lua.w[i]))
            fail_msg("reserve.lua says '%s', which lib/core/vocab.h does not list as a LUA reason", lua.w[i]);
    for (size_t i = 0; i < lua_table.n; i++)
        if (!words_has(&lua, lua_table.w[i]))
            fail_msg("lib/core/vocab.h lists '%s' as a LUA reason, but no script says it", lua_table.w[i]);
    for (size_t i = 0; i < engine_table.n; i++)
        if (words_has(&lua, engine_table.w[i]))
            fail_msg("'%s' is an ENGINE reason in lib/core/vocab.h, but reserve.lua says it", engine_table.w[i]);
}

/* The text of a Lua file with its comments blanked (from "--" to the end
 * of each line), so a pattern sees code only. */
static char *lua_code(const char *name) {
    char *s = slurp_script(name);
    for (char *p = s; (p = strstr(p, "--")) != NULL;)
        while (*p && *p != '\n') *p++ = ' ';
    return s;
}

static int matches(const char *text, const char *pattern) {
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE), 0);
    int hit = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return hit;
}

static void test_verdict_kinds_match_the_scripts(void **state) {
    (void)state;
    char *common = lua_code("common.lua"), *reserve = lua_code("reserve.lua");
    char want[128];
    /* One line declares the kinds, in the table's order. */
    size_t used = 0;
    used += (size_t)snprintf(want + used, sizeof(want) - used, "local ");
#define KIND_NAME(name, number) used += (size_t)snprintf(want + used, sizeof(want) - used, "SL_" #name ", ");
    SLUICE_VERDICT_MAP(KIND_NAME)
#undef KIND_NAME
    used -= 2;
    used += (size_t)snprintf(want + used, sizeof(want) - used, " = ");
#define KIND_NUMBER(name, number) used += (size_t)snprintf(want + used, sizeof(want) - used, "%d, ", number);
    SLUICE_VERDICT_MAP(KIND_NUMBER)
#undef KIND_NUMBER
    want[used - 2] = '\0';
    if (!strstr(common, want)) fail_msg("common.lua does not declare the verdict kinds as vocab.h: '%s'", want);
    /* Every verdict by the constructor; kinds compared by name. */
    if (matches(reserve, "(verdict|res) = \\{ *[012] *,"))
        fail_msg("reserve.lua builds a verdict as a literal table, not with sl_verdict");
    if (matches(reserve, "(v|verdict|kind|res)(\\[1\\])? *[=~]= *[0-9]"))
        fail_msg("reserve.lua compares a verdict's kind with a bare number");
    assert_true(matches(reserve, "sl_verdict\\(SL_GRANT, "));
    assert_true(matches(reserve, "sl_on_member\\("));
    assert_true(matches(common, "local function sl_verdict\\(kind"));
    /* The budget script's verdicts have fields of their own, and the same
     * kinds by name. */
    char *budget = lua_code("budget.lua");
    if (matches(budget, "(return|wait =) \\{ *[012] *,"))
        fail_msg("budget.lua builds a verdict with a bare kind number");
    assert_true(matches(budget, "\\{SL_GRANT, ") && matches(budget, "\\{SL_SHED, ") &&
                matches(budget, "\\{SL_DEFER, "));
    free(budget);
    free(common);
    free(reserve);
}

static void test_dimensions_match_the_scripts(void **state) {
    (void)state;
    char *common = lua_code("common.lua");
    const char *at = strstr(common, "local SL_DIMS = {");
    if (!at) fail_msg("common.lua has no 'local SL_DIMS = {' table");
    int k = 0;
#define CHECK_DIM(name, word, letter, field)                                                                           \
    {                                                                                                                  \
        char row[160];                                                                                                 \
        snprintf(row, sizeof(row), "{name = '%s', per = '%s', ", word, field);                                         \
        const char *r = strstr(at, row);                                                                               \
        if (!r) fail_msg("SL_DIMS has no row '%s'", row);                                                              \
        if (r < at) fail_msg("SL_DIMS row '%s' out of order", row);                                                    \
        at = r + 1;                                                                                                    \
        const char *end = strchr(r, '}');                                                                              \
        char letter_field[32];                                                                                         \
        snprintf(letter_field, sizeof(letter_field), "letter = '%c'", letter);                                         \
        const char *l = strstr(r, letter_field);                                                                       \
        if (!l || l > end) fail_msg("SL_DIMS row '%s' has not %s", word, letter_field);                                \
        assert_string_equal(engine_dim_names[k], word);                                                                \
        k++;                                                                                                           \
    }
    SLUICE_DIM_MAP(CHECK_DIM)
#undef CHECK_DIM
    assert_int_equal(k, ENGINE_DIMS);
    free(common);
}

/* Where the scripts read the marker name, whose text the table gives. */
static void check_marker(const char *name, const char *text, const char *common, const char *reserve,
                         const char *settle) {
    char want[128];
    const char *in = common;
    if (!strcmp(name, "AGENT")) snprintf(want, sizeof(want), "string.sub(ARGV[1], 1, 1) == '%s'", text);
    else if (!strcmp(name, "TIMED") || !strcmp(name, "DRY")) snprintf(want, sizeof(want), "ARGV[#ARGV] == '%s'", text);
    else if (!strcmp(name, "EXACT") || !strcmp(name, "PARTIAL"))
        snprintf(want, sizeof(want), "string.byte(s, 1) == %d", (unsigned char)text[0]);
    else if (!strcmp(name, "GROUP")) snprintf(want, sizeof(want), "ARGV[1] == '%s'", text), in = reserve;
    else if (!strcmp(name, "FEEDBACK")) snprintf(want, sizeof(want), "ARGV[1] == '%s'", text), in = settle;
    else fail_msg("marker %s: this test does not know where the scripts read it", name);
    if (!strstr(in, want)) fail_msg("marker %s ('%s'): the scripts do not read it as '%s'", name, text, want);
}

static void test_markers_match_the_scripts(void **state) {
    (void)state;
    char *common = lua_code("common.lua"), *reserve = lua_code("reserve.lua"), *settle = lua_code("settle.lua");
    int n = 0;
#define CHECK_MARKER(name, text)                                                                                       \
    check_marker(#name, text, common, reserve, settle);                                                                \
    n++;
    SLUICE_ARG_MARKER_MAP(CHECK_MARKER)
#undef CHECK_MARKER
    assert_int_equal(n, 7);
    free(common);
    free(reserve);
    free(settle);
}

static void test_outcomes_match_the_settle_script(void **state) {
    (void)state;
    char *settle = slurp_script("settle.lua");
    const char *at = strstr(settle, "local OUTCOMES = {");
    if (!at) fail_msg("settle.lua has no 'local OUTCOMES = {' table");
    const char *end = strchr(at, '}');
    assert_non_null(end);
    char table[512];
    size_t len = (size_t)(end - at);
    assert_true(len < sizeof(table));
    memcpy(table, at, len);
    table[len] = '\0';
    words lua = {0};
    collect(&lua, table, "([a-z_]+) = true");
    free(settle);
    assert_int_equal(lua.n, ENGINE_OUTCOMES);
    for (int i = 0; i < ENGINE_OUTCOMES; i++)
        if (!words_has(&lua, engine_outcome_names[i]))
            fail_msg("outcome '%s' of lib/core/vocab.h is not one settle.lua accepts", engine_outcome_names[i]);
    /* In the order of sluice.h's sl_outcome (the library sends its index's word). */
    assert_string_equal(engine_outcome_names[SL_OUTCOME_OK], "ok");
    assert_string_equal(engine_outcome_names[SL_OUTCOME_THROTTLED], "throttled");
    assert_string_equal(engine_outcome_names[SL_OUTCOME_FAILED], "failed");
    assert_string_equal(engine_outcome_names[SL_OUTCOME_CANCELLED], "cancelled");
    assert_string_equal(engine_outcome_names[SL_OUTCOME_QUOTA], "quota");
    for (int i = 0; i < ENGINE_OUTCOMES; i++) assert_int_equal(engine_outcome_index(engine_outcome_names[i]), i);
    assert_int_equal(engine_outcome_index("OK"), -1);
    assert_int_equal(engine_outcome_index("success"), -1);
}

static void test_engine_tables_follow_the_maps(void **state) {
    (void)state;
    int n = 0;
#define CHECK_WORD(name, word, source)                                                                                 \
    assert_string_equal(engine_shed_reasons[ENGINE_SHED_##name], word);                                                \
    assert_int_equal(engine_shed_reason_index(word), ENGINE_SHED_##name);                                              \
    n++;
    SLUICE_SHED_REASON_MAP(CHECK_WORD)
#undef CHECK_WORD
    assert_int_equal(n, ENGINE_SHED_REASONS);
    assert_int_equal(ENGINE_SHED_OTHER, ENGINE_SHED_REASONS - 1);
    assert_int_equal(engine_shed_reason_index("no-such-reason"), ENGINE_SHED_OTHER);
    assert_int_equal(engine_shed_reason_index(""), ENGINE_SHED_OTHER);
}

static void test_error_words(void **state) {
    (void)state;
    int codes[16], n = 0;
#define CHECK_ERR(word, code)                                                                                          \
    assert_string_equal(sluice_error_word(code), #word);                                                               \
    assert_string_not_equal(sl_strerror(code), "unknown error");                                                       \
    for (int i = 0; i < n; i++) assert_int_not_equal(codes[i], code);                                                  \
    codes[n++] = code;
    SLUICE_ERROR_WORD_MAP(CHECK_ERR)
#undef CHECK_ERR
    assert_true(n >= 4);
    assert_string_equal(sluice_error_word(SL_EINVAL), "ERR");
    char want[32];
    snprintf(want, sizeof(want), "-%s ", sluice_error_word(SL_ECLOSING));
    assert_memory_equal(SLUICE_REPLY_CLOSING, want, strlen(want));
    assert_string_equal(SLUICE_REPLY_CLOSING + strlen(want), SLUICE_MSG_CLOSING);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shed_reasons_match_the_scripts),
        cmocka_unit_test(test_verdict_kinds_match_the_scripts),
        cmocka_unit_test(test_dimensions_match_the_scripts),
        cmocka_unit_test(test_markers_match_the_scripts),
        cmocka_unit_test(test_outcomes_match_the_settle_script),
        cmocka_unit_test(test_engine_tables_follow_the_maps),
        cmocka_unit_test(test_error_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
