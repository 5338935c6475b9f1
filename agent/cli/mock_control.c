/* mock_control: POST /control, the run-time switches of the mock
 * provider (docs/mock.md, "Faults at run time"). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

/* Parses one control value: fail_503 in [0, 1], quota_exhausted 0 or 1.
 * Returns 0, or -1 when the text is not such a number. */
static int control_number(const char *v, size_t n, int boolean, double *out) {
    char buf[32], *end;
    if (n == 0 || n >= sizeof(buf)) return -1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    double d = strtod(buf, &end);
    if (*end || !(d >= 0 && d <= 1) || (boolean && d != 0 && d != 1)) return -1;
    *out = d;
    return 0;
}

/* Loopback peers only: the control changes what every client gets. */
static int peer_is_loopback(const char *peer) {
    return strncmp(peer, "127.", 4) == 0 || strcmp(peer, "::1") == 0 || strncmp(peer, "::ffff:127.", 11) == 0;
}

/* POST /control[?fail_503=P][&quota_exhausted=0|1]: changes the injected
 * failures of the running mock, keeping its ledger and buckets. Every pair
 * is checked before any is applied, so a bad request changes nothing.
 * Answers the settings now in force. Not counted in the ledger. */
void mock_route_control(mock_call *c, const char *name) {
    mock *m = c->m;
    const char *q = mock_http_query(c->req);
    double fail_503 = m->opt.fail_503, quota = m->opt.quota_exhausted;
    char msg[160];
    (void)name;
    if (!peer_is_loopback(mock_http_peer(c->req))) {
        static const char denied[] =
            "{\"error\":{\"code\":\"403\",\"message\":\"/control is served to loopback clients only\"}}";
        mock_http_respond(c->req, 403, NULL, denied, sizeof(denied) - 1, 0);
        return;
    }
    for (const char *p = q; *p;) {
        size_t len = strcspn(p, "&"), klen = strcspn(p, "=");
        const char *v = p + klen + 1;
        if (len == 0) { /* an empty pair ("a=1&&b=0") */
            p++;
            continue;
        }
        int bad = klen >= len;
        if (!bad && klen == 8 && strncmp(p, "fail_503", 8) == 0)
            bad = control_number(v, len - klen - 1, 0, &fail_503) != 0;
        else if (!bad && klen == 15 && strncmp(p, "quota_exhausted", 15) == 0)
            bad = control_number(v, len - klen - 1, 1, &quota) != 0;
        else
            bad = 1;
        if (bad) {
            snprintf(msg, sizeof(msg), "bad control '%.*s': expected fail_503=P (0..1) or quota_exhausted=0|1",
                     (int)(len < 64 ? len : 64), p);
            json_t *err = mock_azure_error("400", msg);
            char *text = err ? json_dumps(err, MOCK_JSON_FLAGS) : NULL;
            json_decref(err);
            mock_http_respond(c->req, 400, NULL, text ? text : "{}", text ? strlen(text) : 2, 0);
            free(text);
            return;
        }
        p += len;
        if (*p == '&') p++;
    }
    mock_set_faults(m, fail_503, (int)quota);
    if (m->opt.log)
        fprintf(m->opt.log, "%.3f %s - /control 200 fail_503=%g quota_exhausted=%d\n", c->now_ms, c->client,
                m->opt.fail_503, m->opt.quota_exhausted);
    snprintf(msg, sizeof(msg), "{\"fail_503\":%.15g,\"quota_exhausted\":%s}", m->opt.fail_503,
             m->opt.quota_exhausted ? "true" : "false");
    mock_http_respond(c->req, 200, "Cache-Control: no-store\r\n", msg, strlen(msg), 0);
}
