/* Unit tests for lib/http/classify: real provider error bodies (OpenAI,
 * Azure OpenAI, Anthropic, others), non-JSON bodies, status-only
 * decisions, and the x-should-retry override. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "classify.h"

typedef struct vec {
    int status;
    classify_transport transport;
    const char *body;
    const char *xsr; /* x-should-retry, NULL when absent */
    classify_class want;
    bool retryable;
    const char *code; /* expected extracted code/type ("" when none) */
    const char *type;
} vec;

#define NONE CLASSIFY_NET_NONE

static const vec vectors[] = {
    /* 2xx */
    {200, NONE, "", NULL, CLASSIFY_OK, false, "", ""},
    {204, NONE, NULL, NULL, CLASSIFY_OK, false, "", ""},
    {299, NONE, "{\"error\":{\"code\":\"insufficient_quota\"}}", NULL, CLASSIFY_OK, false, "", ""},
    /* no response */
    {0, NONE, NULL, NULL, CLASSIFY_TRANSPORT, true, "", ""},
    {0, CLASSIFY_NET_TIMEOUT, NULL, NULL, CLASSIFY_TIMEOUT, true, "", ""},
    {0, CLASSIFY_NET_ERROR, NULL, NULL, CLASSIFY_TRANSPORT, true, "", ""},
    {200, CLASSIFY_NET_ERROR, "", NULL, CLASSIFY_TRANSPORT, true, "", ""}, /* body cut short */
    {429, CLASSIFY_NET_TIMEOUT, "", NULL, CLASSIFY_TIMEOUT, true, "", ""},
    {100, NONE, "", NULL, CLASSIFY_TRANSPORT, true, "", ""},
    {600, NONE, "", NULL, CLASSIFY_TRANSPORT, true, "", ""},
    {-1, NONE, "", NULL, CLASSIFY_TRANSPORT, true, "", ""},

    /* OpenAI */
    {429, NONE,
     "{\"error\":{\"message\":\"Rate limit reached for gpt-4 in organization org-x on requests per "
     "min (RPM): Limit 3, Used 3, Requested 1.\",\"type\":\"requests\",\"param\":null,"
     "\"code\":\"rate_limit_exceeded\"}}",
     NULL, CLASSIFY_RATE_LIMITED, true, "rate_limit_exceeded", "requests"},
    {429, NONE,
     "{\"error\":{\"message\":\"You exceeded your current quota, please check your plan and billing "
     "details.\",\"type\":\"insufficient_quota\",\"param\":null,\"code\":\"insufficient_quota\"}}",
     NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "insufficient_quota", "insufficient_quota"},
    {429, NONE, "{\"error\":{\"message\":\"x\",\"type\":\"insufficient_quota\",\"code\":null}}", NULL,
     CLASSIFY_QUOTA_EXHAUSTED, false, "", "insufficient_quota"},
    {400, NONE,
     "{\"error\":{\"message\":\"This model's maximum context length is 8192 tokens. However, your "
     "messages resulted in 9000 tokens.\",\"type\":\"invalid_request_error\",\"param\":\"messages\","
     "\"code\":\"context_length_exceeded\"}}",
     NULL, CLASSIFY_BAD_REQUEST, false, "context_length_exceeded", "invalid_request_error"},
    {401, NONE,
     "{\"error\":{\"message\":\"Incorrect API key provided.\",\"type\":\"invalid_request_error\","
     "\"code\":\"invalid_api_key\"}}",
     NULL, CLASSIFY_AUTH, false, "invalid_api_key", "invalid_request_error"},
    {404, NONE,
     "{\"error\":{\"message\":\"The model `x` does not "
     "exist\",\"type\":\"invalid_request_error\",\"code\":\"model_not_found\"}}",
     NULL, CLASSIFY_BAD_REQUEST, false, "model_not_found", "invalid_request_error"},
    {500, NONE, "{\"error\":{\"message\":\"The server had an error\",\"type\":\"server_error\"}}", NULL,
     CLASSIFY_SERVER_ERROR, true, "", "server_error"},
    {503, NONE, "{\"error\":{\"message\":\"The engine is currently overloaded\",\"type\":\"server_error\"}}", NULL,
     CLASSIFY_OVERLOADED, true, "", "server_error"},
    {403, NONE,
     "{\"error\":{\"message\":\"Billing hard limit has been "
     "reached\",\"type\":\"invalid_request_error\",\"code\":\"billing_hard_limit_reached\"}}",
     NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "billing_hard_limit_reached", "invalid_request_error"},

    /* Azure OpenAI: a rate-limit body that mentions "quota" is still a rate limit */
    {429, NONE,
     "{\"error\":{\"code\":\"429\",\"message\":\"Requests to the ChatCompletions_Create Operation under "
     "Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 "
     "pricing tier. Please retry after 20 seconds. Please go here: https://aka.ms/oai/quotaincrease "
     "if you would like to further increase the default rate limit.\"}}",
     NULL, CLASSIFY_RATE_LIMITED, true, "429", ""},
    {403, NONE,
     "{\"error\":{\"code\":\"PermissionDenied\",\"message\":\"Principal does not have access to API/Operation.\"}}",
     NULL, CLASSIFY_AUTH, false, "PermissionDenied", ""},
    {403, NONE,
     "{\"error\":{\"code\":\"QuotaExceeded\",\"message\":\"Out of call volume quota for this subscription.\"}}", NULL,
     CLASSIFY_QUOTA_EXHAUSTED, false, "QuotaExceeded", ""},
    {400, NONE,
     "{\"error\":{\"code\":\"content_filter\",\"message\":\"The response was "
     "filtered\",\"param\":\"prompt\",\"status\":400}}",
     NULL, CLASSIFY_BAD_REQUEST, false, "content_filter", ""},

    /* Anthropic */
    {529, NONE, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}", NULL,
     CLASSIFY_OVERLOADED, true, "", "overloaded_error"},
    {500, NONE, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}", NULL,
     CLASSIFY_OVERLOADED, true, "", "overloaded_error"},
    {500, NONE, "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}", NULL,
     CLASSIFY_SERVER_ERROR, true, "", "api_error"},
    {429, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Number of request tokens "
     "has exceeded your per-minute rate limit\"}}",
     NULL, CLASSIFY_RATE_LIMITED, true, "", "rate_limit_error"},
    {400, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"Your credit balance "
     "is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase "
     "credits.\"}}",
     NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", "invalid_request_error"},
    {400, NONE, "{\"type\":\"error\",\"error\":{\"type\":\"billing_error\",\"message\":\"Payment required\"}}", NULL,
     CLASSIFY_QUOTA_EXHAUSTED, false, "", "billing_error"},
    {403, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"permission_error\",\"message\":\"Your credit balance is too low\"}}",
     NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", "permission_error"},
    {403, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"permission_error\",\"message\":\"Your API key does not "
     "have permission to use the specified resource.\"}}",
     NULL, CLASSIFY_AUTH, false, "", "permission_error"},
    {401, NONE, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}",
     NULL, CLASSIFY_AUTH, false, "", "authentication_error"},
    {413, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\",\"message\":\"Request exceeds the maximum allowed "
     "number of bytes.\"}}",
     NULL, CLASSIFY_BAD_REQUEST, false, "", "request_too_large"},
    {400, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 210000 "
     "tokens > 200000 maximum\"}}",
     NULL, CLASSIFY_BAD_REQUEST, false, "", "invalid_request_error"},

    /* Anthropic's spend stops: the tier's monthly cap (429, no retry-after,
     * "API usage pauses until 00:00 UTC on the first day of the next
     * month") and a spend limit set in the console (400). */
    {429, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"You have reached your API usage "
     "limits: your organization has crossed its monthly API usage threshold, set based on your organization's API "
     "tier. You will regain access on 2026-09-01 at 00:00 UTC.\",\"details\":{\"error_code\":\"enforced_spend_limit_"
     "reached\"}},\"request_id\":\"req_018EeWyXxfu5pfWkrYcMdjWG\"}",
     NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "enforced_spend_limit_reached", "rate_limit_error"},
    {400, NONE,
     "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"You have reached your "
     "specified API usage limits. You will regain access on 2025-07-01 at 00:00 UTC.\"}}",
     NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", "invalid_request_error"},
    /* other shapes */
    {429, NONE,
     "[{\"error\":{\"code\":429,\"message\":\"Resource has been exhausted\",\"status\":\"RESOURCE_EXHAUSTED\"}}]", NULL,
     CLASSIFY_RATE_LIMITED, true, "429", ""},
    {429, NONE, "{\"error\":\"Too many requests\"}", NULL, CLASSIFY_RATE_LIMITED, true, "", ""},
    /* Gemini: a per-minute limit's 429 RESOURCE_EXHAUSTED (RetryInfo 26s) is
     * worded like OpenAI's insufficient_quota; it is a rate limit. */
    {429, NONE,
     "{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota, please check your plan and billing "
     "details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\","
     "\"status\":\"RESOURCE_EXHAUSTED\",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\","
     "\"violations\":[{\"quotaMetric\":\"generativelanguage.googleapis.com/generate_content_free_tier_input_token_"
     "count\",\"quotaId\":\"GenerateContentInputTokensPerModelPerMinute-FreeTier\"}]},{\"@type\":\"type."
     "googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"26s\"}]}}",
     NULL, CLASSIFY_RATE_LIMITED, true, "429", ""},
    /* ... and on the OpenAI-compatible endpoint (an array; sluice mock --compat gemini) */
    {429, NONE,
     "[{\"error\":{\"code\":429,\"message\":\"You exceeded your current quota, please check your plan and billing "
     "details.\",\"status\":\"RESOURCE_EXHAUSTED\"}}]",
     NULL, CLASSIFY_RATE_LIMITED, true, "429", ""},
    {429, NONE, "{\"code\":\"insufficient_quota\",\"message\":\"no\"}", NULL, CLASSIFY_QUOTA_EXHAUSTED, false,
     "insufficient_quota", ""},
    {422, NONE, "{\"detail\":[{\"loc\":[\"body\"],\"msg\":\"field required\"}]}", NULL, CLASSIFY_BAD_REQUEST, false, "",
     ""},
    {402, NONE, "", NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", ""},
    /* JSON without a message: the raw body is searched */
    {403, NONE, "{\"detail\":\"Monthly quota used up\"}", NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", ""},
    {403, NONE, "{\"detail\":\"Forbidden\"}", NULL, CLASSIFY_AUTH, false, "", ""},
    /* ... but with one, only the message is: "credit" in another field does not count */
    {403, NONE, "{\"error\":{\"message\":\"Forbidden\",\"param\":\"credit\"}}", NULL, CLASSIFY_AUTH, false, "", ""},

    /* non-JSON bodies: status plus substring checks */
    {429, NONE, "Too Many Requests", NULL, CLASSIFY_RATE_LIMITED, true, "", ""},
    {429, NONE, "error: INSUFFICIENT_QUOTA for project", NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", ""},
    {429, NONE, "{\"error\":{\"code\":\"insufficient_quota\"", NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", ""},
    {529, NONE, "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"", NULL, CLASSIFY_OVERLOADED, true, "",
     ""},
    {400, NONE, "context_length_exceeded", NULL, CLASSIFY_BAD_REQUEST, false, "", ""},
    {403, NONE, "<html>Billing account suspended</html>", NULL, CLASSIFY_QUOTA_EXHAUSTED, false, "", ""},
    {403, NONE, "<html>Forbidden</html>", NULL, CLASSIFY_AUTH, false, "", ""},
    {502, NONE, "<html><body>502 Bad Gateway</body></html>", NULL, CLASSIFY_SERVER_ERROR, true, "", ""},
    {504, NONE, "upstream request timeout", NULL, CLASSIFY_SERVER_ERROR, true, "", ""},
    {503, NONE, "", NULL, CLASSIFY_OVERLOADED, true, "", ""},
    {529, NONE, "", NULL, CLASSIFY_OVERLOADED, true, "", ""},
    {500, NONE, "", NULL, CLASSIFY_SERVER_ERROR, true, "", ""},
    {501, NONE, "", NULL, CLASSIFY_SERVER_ERROR, true, "", ""},
    {599, NONE, "", NULL, CLASSIFY_SERVER_ERROR, true, "", ""},
    {400, NONE, "", NULL, CLASSIFY_BAD_REQUEST, false, "", ""},
    {404, NONE, "", NULL, CLASSIFY_BAD_REQUEST, false, "", ""},
    {409, NONE, "", NULL, CLASSIFY_BAD_REQUEST, false, "", ""},
    {413, NONE, "", NULL, CLASSIFY_BAD_REQUEST, false, "", ""},
    {422, NONE, "", NULL, CLASSIFY_BAD_REQUEST, false, "", ""},
    {408, NONE, "", NULL, CLASSIFY_TIMEOUT, true, "", ""},
    {401, NONE, "", NULL, CLASSIFY_AUTH, false, "", ""},
    {403, NONE, "", NULL, CLASSIFY_AUTH, false, "", ""},
    {301, NONE, "", NULL, CLASSIFY_BAD_REQUEST, false, "", ""},
    {429, NONE, "", NULL, CLASSIFY_RATE_LIMITED, true, "", ""},
    {429, NONE, "we have exceeded your quota increase request", NULL, CLASSIFY_RATE_LIMITED, true, "", ""},

    /* x-should-retry */
    {400, NONE, "", "true", CLASSIFY_BAD_REQUEST, true, "", ""},
    {409, NONE, "", " TRUE\t", CLASSIFY_BAD_REQUEST, true, "", ""},
    {401, NONE, "", "true", CLASSIFY_AUTH, true, "", ""},
    {500, NONE, "", "false", CLASSIFY_SERVER_ERROR, false, "", ""},
    {429, NONE, "", "False", CLASSIFY_RATE_LIMITED, false, "", ""},
    {0, CLASSIFY_NET_TIMEOUT, NULL, "false", CLASSIFY_TIMEOUT, false, "", ""},
    {429, NONE, "{\"error\":{\"code\":\"insufficient_quota\"}}", "true", CLASSIFY_QUOTA_EXHAUSTED, false,
     "insufficient_quota", ""},
    {402, NONE, "", "true", CLASSIFY_QUOTA_EXHAUSTED, false, "", ""},
    {200, NONE, "", "true", CLASSIFY_OK, false, "", ""},
    {400, NONE, "", "yes", CLASSIFY_BAD_REQUEST, false, "", ""},
    {400, NONE, "", "", CLASSIFY_BAD_REQUEST, false, "", ""},
    {400, NONE, "", "truex", CLASSIFY_BAD_REQUEST, false, "", ""},
    {500, NONE, "", "1", CLASSIFY_SERVER_ERROR, true, "", ""},
};

static void test_vectors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
        const vec *v = &vectors[i];
        classify_input in = {
            v->status, v->transport, v->body, v->body ? strlen(v->body) : 0, v->xsr, v->xsr ? strlen(v->xsr) : 0};
        classify_result out;
        memset(&out, 0x5a, sizeof out);
        classify_class got = classify_response(&in, &out);
        if (got != v->want || out.cls != v->want || out.retryable != v->retryable || strcmp(out.code, v->code) != 0 ||
            strcmp(out.type, v->type) != 0)
            fail_msg("vector %zu (status %d, body \"%.40s\"): got %s retryable=%d code=\"%s\" "
                     "type=\"%s\"; want %s retryable=%d code=\"%s\" type=\"%s\"",
                     i, v->status, v->body ? v->body : "(null)", classify_name(got), out.retryable, out.code, out.type,
                     classify_name(v->want), v->retryable, v->code, v->type);
        bool changed = out.retryable != classify_retryable(out.cls);
        assert_int_equal(out.overridden, changed);
    }
}

static void test_names_and_retryability(void **state) {
    (void)state;
    static const struct {
        classify_class c;
        const char *name;
        bool retry;
    } t[] = {
        {CLASSIFY_OK, "ok", false},
        {CLASSIFY_RATE_LIMITED, "rate_limited", true},
        {CLASSIFY_QUOTA_EXHAUSTED, "quota_exhausted", false},
        {CLASSIFY_OVERLOADED, "overloaded", true},
        {CLASSIFY_BAD_REQUEST, "bad_request", false},
        {CLASSIFY_AUTH, "auth", false},
        {CLASSIFY_SERVER_ERROR, "server_error", true},
        {CLASSIFY_TIMEOUT, "timeout", true},
        {CLASSIFY_TRANSPORT, "transport", true},
    };
    assert_int_equal(sizeof t / sizeof t[0], CLASSIFY__COUNT);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        assert_string_equal(classify_name(t[i].c), t[i].name);
        assert_int_equal(classify_retryable(t[i].c), t[i].retry);
    }
    assert_string_equal(classify_name(CLASSIFY__COUNT), "unknown");
    assert_string_equal(classify_name((classify_class)-1), "unknown");
    assert_false(classify_retryable(CLASSIFY__COUNT));
}

static void test_edges(void **state) {
    (void)state;
    classify_result out;
    /* NULL input is "no response". */
    assert_int_equal(classify_response(NULL, &out), CLASSIFY_TRANSPORT);
    assert_true(out.retryable);
    /* NULL output is allowed. */
    classify_input in = {503, CLASSIFY_NET_NONE, NULL, 0, NULL, 0};
    assert_int_equal(classify_response(&in, NULL), CLASSIFY_OVERLOADED);
    /* NULL body with a length is treated as empty. */
    in.status = 429;
    in.body_len = 10;
    assert_int_equal(classify_response(&in, &out), CLASSIFY_RATE_LIMITED);
    /* A body length shorter than the text hides the marker. */
    const char *b = "{\"error\":{\"code\":\"insufficient_quota\"}}";
    assert_int_equal(classify_status_body(429, b, 20, &out), CLASSIFY_RATE_LIMITED);
    assert_int_equal(classify_status_body(429, b, strlen(b), &out), CLASSIFY_QUOTA_EXHAUSTED);
    /* An embedded NUL in a JSON string does not hide the text after it. */
    const char nul[] = "{\"error\":{\"code\":\"c\",\"message\":\"a\\u0000 credit balance is too low\"}}";
    assert_int_equal(classify_status_body(400, nul, sizeof nul - 1, &out), CLASSIFY_QUOTA_EXHAUSTED);
    assert_string_equal(out.code, "c"); /* parsed as JSON, not by the fallback */
    /* Long codes are truncated, NUL-terminated. */
    char big[1024];
    char code[300];
    memset(code, 'x', sizeof code - 1);
    code[sizeof code - 1] = '\0';
    snprintf(big, sizeof big, "{\"error\":{\"code\":\"%s\",\"type\":\"%s\"}}", code, code);
    assert_int_equal(classify_status_body(400, big, strlen(big), &out), CLASSIFY_BAD_REQUEST);
    assert_int_equal(strlen(out.code), CLASSIFY_FIELD_SZ - 1);
    assert_int_equal(strlen(out.type), CLASSIFY_FIELD_SZ - 1);
    /* Bodies above the JSON limit fall back to substrings only. */
    static char huge[CLASSIFY_MAX_JSON_BODY + 64];
    memset(huge, ' ', sizeof huge);
    const char *obj = "{\"error\":{\"type\":\"overloaded_error\",\"code\":\"c\"}}";
    memcpy(huge, obj, strlen(obj));
    assert_int_equal(classify_status_body(500, huge, sizeof huge, &out), CLASSIFY_OVERLOADED);
    assert_string_equal(out.code, "");
    assert_int_equal(classify_status_body(500, huge, CLASSIFY_MAX_JSON_BODY, &out), CLASSIFY_OVERLOADED);
    assert_string_equal(out.code, "c");
    /* Deeply nested JSON is just "not understood". */
    static char deep[40000];
    for (size_t i = 0; i < sizeof deep; i++) deep[i] = i < sizeof deep / 2 ? '[' : ']';
    assert_int_equal(classify_status_body(429, deep, sizeof deep, &out), CLASSIFY_RATE_LIMITED);
    /* Non-string code/type values are ignored (integers stringified). */
    const char *odd = "{\"error\":{\"code\":{\"x\":1},\"type\":[1],\"message\":7}}";
    assert_int_equal(classify_status_body(503, odd, strlen(odd), &out), CLASSIFY_OVERLOADED);
    assert_string_equal(out.code, "");
    assert_string_equal(out.type, "");
    const char *neg = "{\"error\":{\"code\":-42}}";
    classify_status_body(500, neg, strlen(neg), &out);
    assert_string_equal(out.code, "-42");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_names_and_retryability),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
