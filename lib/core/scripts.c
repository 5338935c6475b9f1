#include "scripts.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lua_scripts.h"

/* The order here must match script_id. */
static const char *const script_names[SCRIPT__COUNT] = {
    "configure", "reserve", "settle", "retry", "heartbeat", "status", "budget",
};

static script table[SCRIPT__COUNT];
static int table_ready;

/* SHA1 (FIPS 180-4), small and self-contained: Redis identifies scripts by
 * it and hiredis does not provide one. */
static uint32_t rol(uint32_t v, int n) { return (v << n) | (v >> (32 - n)); }

static void sha1_block(uint32_t h[5], const unsigned char *p) {
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
        uint32_t f, k;
        if (i < 20) {
            f = (b & c) | (~b & d);
            k = 0x5A827999;
        } else if (i < 40) {
            f = b ^ c ^ d;
            k = 0x6ED9EBA1;
        } else if (i < 60) {
            f = (b & c) | (b & d) | (c & d);
            k = 0x8F1BBCDC;
        } else {
            f = b ^ c ^ d;
            k = 0xCA62C1D6;
        }
        uint32_t t = rol(a, 5) + f + e + k + w[i];
        e = d;
        d = c;
        c = rol(b, 30);
        b = a;
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
}

void scripts_sha1_hex(const void *buf, size_t len, char out[41]) {
    uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
    const unsigned char *p = buf;
    unsigned char tail[128];
    size_t full = len / 64 * 64, rest = len - full;
    for (size_t i = 0; i < full; i += 64) sha1_block(h, p + i);
    memset(tail, 0, sizeof(tail));
    memcpy(tail, p + full, rest);
    tail[rest] = 0x80;
    size_t tlen = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++) tail[tlen - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (size_t i = 0; i < tlen; i += 64) sha1_block(h, tail + i);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 20; i++) {
        unsigned char byte = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
        out[2 * i] = hex[byte >> 4];
        out[2 * i + 1] = hex[byte & 15];
    }
    out[40] = '\0';
}

static void scripts_init(void) {
    for (int i = 0; i < SCRIPT__COUNT; i++) {
        for (const lua_script *s = sluice_lua_scripts; s->name; s++) {
            if (strcmp(s->name, script_names[i]) == 0) {
                table[i].name = s->name;
                table[i].source = s->source;
                table[i].len = s->len;
                scripts_sha1_hex(s->source, s->len, table[i].sha);
            }
        }
    }
    table_ready = 1;
}

const script *scripts_get(script_id id) {
    /* Computed once; the daemon is single-threaded and the library calls
     * this on its engine thread only, so no lock is needed. */
    if (!table_ready) scripts_init();
    return (id >= 0 && id < SCRIPT__COUNT) ? &table[id] : NULL;
}

const script *scripts_find(const char *name) {
    for (int i = 0; i < SCRIPT__COUNT; i++)
        if (strcmp(script_names[i], name) == 0) return scripts_get((script_id)i);
    return NULL;
}

int scripts_keys(const char *deployment, char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX]) {
    static const char *const suffix[SCRIPTS_NKEYS] = {
        "limits", "state", "grants", "leases",     "refq:requests", "refq:tokens",
        "daily",  "retry", "agents", "refq:input", "refq:output",
    };
    size_t len = strlen(deployment);
    if (len == 0 || len > SCRIPTS_NAME_MAX) return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)deployment[i];
        if (ch == '{' || ch == '}' || ch < 0x21 || ch == 0x7f) return -1;
    }
    for (int i = 0; i < SCRIPTS_NKEYS; i++) snprintf(keys[i], SCRIPTS_KEY_MAX, "sluice:{%s}:%s", deployment, suffix[i]);
    return 0;
}

int scripts_evalsha_argv_n(script_id id, char (*keys)[SCRIPTS_KEY_MAX], int nkeys, int argc, const char **argv,
                           const size_t *argvlen, const char **av, size_t *al, char *nkeys_buf) {
    const script *s = scripts_get(id);
    if (!s || argc < 0 || nkeys < 1) return -1;
    int n = 3 + nkeys + argc;
    av[0] = "EVALSHA";
    av[1] = s->sha;
    if (nkeys == SCRIPTS_NKEYS) {
        av[2] = SCRIPTS_NKEYS_STR;
    } else {
        if (!nkeys_buf) return -1;
        snprintf(nkeys_buf, 12, "%d", nkeys);
        av[2] = nkeys_buf;
    }
    for (int i = 0; i < nkeys; i++) av[3 + i] = keys[i];
    for (int i = 0; i < argc; i++) av[3 + nkeys + i] = argv[i];
    for (int i = 0; i < n; i++) al[i] = (i >= 3 + nkeys && argvlen) ? argvlen[i - 3 - nkeys] : strlen(av[i]);
    return n;
}

int scripts_evalsha_argv(script_id id, char (*keys)[SCRIPTS_KEY_MAX], int argc, const char **argv,
                         const size_t *argvlen, const char **av, size_t *al) {
    return scripts_evalsha_argv_n(id, keys, SCRIPTS_NKEYS, argc, argv, argvlen, av, al, NULL);
}
