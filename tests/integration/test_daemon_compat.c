/* test_daemon_compat: stock Redis clients connect to sluiced with their
 * defaults (issue 16).
 *
 * What clients send on connect, over a raw socket so that every byte is
 * checked in both protocols (hiredis 0.14 cannot read RESP3, so replies
 * are parsed here and rendered as text): HELLO 2 / 3 and what RESP3
 * changes (maps, `_`, sets, verbatim text) and does not (ACQUIRE, SETTLE,
 * errors); CLIENT ID / SETNAME / GETNAME / SETINFO / LIST / INFO; SELECT 0;
 * and their malformed variants (HELLO 4, HELLO abc, AUTH, bad names,
 * wrong arity), after which the connection still answers, its protocol
 * and name unchanged, and so does every other client. Then the clients
 * themselves: redis-cli -3, redis-py (Debian's python3-redis) over RESP2
 * and RESP3, and ioredis 6 (RESP3 by default) and 5 from npm, installed
 * under the build tree. */
#define _GNU_SOURCE
#include "test_daemon_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static redis_fixture fx;

static int group_setup(void **state) {
    if (!sluiced_path()) return -1;
    return redis_fixture_start(&fx, 0);
}

static int group_teardown(void **state) {
    harness_kill_all();
    redis_fixture_stop(&fx);
    return 0;
}

static int test_teardown(void **state) {
    harness_kill_all();
    return 0;
}

static void start_daemon(daemon_proc *d, const char *name, const char *deployments) {
    daemon_init(d, fx.dir, name);
    assert_int_equal(daemon_configure(d, &fx, NULL, deployments), 0);
    assert_int_equal(daemon_start(d), 0);
    assert_true(daemon_wait_redis(d, 10000));
}

static void assert_contains(const char *hay, const char *needle) {
    if (!strstr(hay, needle)) fail_msg("expected to find \"%s\" in:\n%s", needle, hay);
}

static void assert_prefix(const char *s, const char *prefix) {
    if (strncmp(s, prefix, strlen(prefix)) != 0) fail_msg("expected \"%s\" to start with \"%s\"", s, prefix);
}

/* ---- a RESP2/RESP3 reader ------------------------------------------------------------ */

/* Replies rendered as text: +simple, -error, :int, "bulk", (nil) for $-1,
 * (nil-array) for *-1, [array], ~[set], {key: value}, _ (RESP3's null),
 * =txt:"verbatim", #t, ,double. Bytes outside printable ASCII in strings
 * as \r, \n or \xNN. */
typedef struct out_text {
    char *s;
    size_t cap, len;
} out_text;

static void put(out_text *o, const char *s, size_t n) {
    for (size_t i = 0; i < n && o->len + 1 < o->cap; i++) o->s[o->len++] = s[i];
    o->s[o->len] = '\0';
}

static void put_str(out_text *o, const char *s) { put(o, s, strlen(s)); }

static void put_quoted(out_text *o, const char *s, size_t n) {
    put_str(o, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char u = (unsigned char)s[i];
        char tmp[8];
        if (u == '\r') put_str(o, "\\r");
        else if (u == '\n') put_str(o, "\\n");
        else if (u < 0x20 || u >= 0x7f || u == '"' || u == '\\') {
            snprintf(tmp, sizeof(tmp), "\\x%02x", u);
            put_str(o, tmp);
        } else {
            put(o, (const char *)&s[i], 1);
        }
    }
    put_str(o, "\"");
}

/* Parses one reply at b[*pos..n). 1: complete (rendered, *pos past it);
 * 0: more bytes needed; -1: not RESP. */
static int parse_reply(const char *b, size_t n, size_t *pos, out_text *o) {
    const char *line = b + *pos;
    const char *cr = memmem(line, n - *pos, "\r\n", 2);
    if (!cr) return 0;
    size_t ll = (size_t)(cr - line);
    size_t next = *pos + ll + 2;
    char type = line[0];
    long long v = ll > 1 ? strtoll(line + 1, NULL, 10) : 0;
    switch (type) {
    case '+':
    case '-':
    case ':':
    case '#':
    case ',':
        put(o, line, ll);
        *pos = next;
        return 1;
    case '_':
        put_str(o, "_");
        *pos = next;
        return 1;
    case '$':
    case '=':
        if (v < 0) {
            put_str(o, "(nil)");
            *pos = next;
            return 1;
        }
        if (n - next < (size_t)v + 2) return 0;
        if (b[next + v] != '\r' || b[next + v + 1] != '\n') return -1;
        if (type == '=') {
            if (v < 4) return -1;
            put_str(o, "=");
            put(o, b + next, 4);
            put_quoted(o, b + next + 4, (size_t)v - 4);
        } else {
            put_quoted(o, b + next, (size_t)v);
        }
        *pos = next + (size_t)v + 2;
        return 1;
    case '*':
    case '~':
    case '%': {
        if (v < 0) {
            if (type != '*') return -1;
            put_str(o, "(nil-array)");
            *pos = next;
            return 1;
        }
        size_t save = o->len, p = next;
        put_str(o, type == '%' ? "{" : type == '~' ? "~[" : "[");
        long long items = type == '%' ? 2 * v : v;
        for (long long i = 0; i < items; i++) {
            if (i) put_str(o, type == '%' && i % 2 ? ": " : ", ");
            int rc = parse_reply(b, n, &p, o);
            if (rc <= 0) {
                o->len = save;
                o->s[save] = '\0';
                return rc;
            }
        }
        put_str(o, type == '%' ? "}" : "]");
        *pos = p;
        return 1;
    }
    default: return -1;
    }
}

typedef struct conn {
    int fd;
    char buf[1 << 17];
    size_t len;
} conn;

static conn *conn_open(const daemon_proc *d) {
    conn *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->fd = raw_connect(d->sock);
    assert_true(c->fd >= 0);
    return c;
}

static void conn_close(conn *c) {
    close(c->fd);
    free(c);
}

/* The next reply, rendered into out (cap bytes), within 5 s; fails the
 * test when none comes or the connection closes. */
static const char *conn_reply(conn *c, char *out, size_t cap) {
    double deadline = now_ms() + 5000;
    for (;;) {
        out_text o = {out, cap, 0};
        out[0] = '\0';
        size_t pos = 0;
        int rc = c->len ? parse_reply(c->buf, c->len, &pos, &o) : 0;
        if (rc < 0) fail_msg("not RESP: %.*s", (int)c->len, c->buf);
        if (rc == 1) {
            memmove(c->buf, c->buf + pos, c->len - pos);
            c->len -= pos;
            return out;
        }
        int left = (int)(deadline - now_ms());
        if (left <= 0) fail_msg("no complete reply within 5 s (have %zu bytes: %.*s)", c->len, (int)c->len, c->buf);
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0) continue;
        ssize_t r = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
        if (r <= 0) fail_msg("sluiced closed the connection (have: %.*s)", (int)c->len, c->buf);
        c->len += (size_t)r;
    }
}

/* Sends one command as a multibulk of argc arguments (binary safe). */
static void conn_sendv(conn *c, int argc, const char *const *argv) {
    char msg[8192];
    size_t n = (size_t)snprintf(msg, sizeof(msg), "*%d\r\n", argc);
    for (int i = 0; i < argc; i++) {
        size_t l = strlen(argv[i]);
        assert_true(n + l + 32 < sizeof(msg));
        n += (size_t)snprintf(msg + n, sizeof(msg) - n, "$%zu\r\n", l);
        memcpy(msg + n, argv[i], l);
        n += l;
        memcpy(msg + n, "\r\n", 2);
        n += 2;
    }
    assert_int_equal(raw_send(c->fd, msg, n), 0);
}

/* Runs a command (arguments as separate strings, NULL-terminated) and
 * returns its rendered reply, in a buffer that the next call reuses. */
static const char *call(conn *c, ...) {
    static char out[1 << 16];
    const char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, c);
    for (const char *a; argc < 32 && (a = va_arg(ap, const char *)) != NULL;) argv[argc++] = a;
    va_end(ap);
    conn_sendv(c, argc, argv);
    return conn_reply(c, out, sizeof(out));
}

static void expect(conn *c, const char *want, ...) {
    static char out[1 << 16];
    const char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, want);
    for (const char *a; argc < 32 && (a = va_arg(ap, const char *)) != NULL;) argv[argc++] = a;
    va_end(ap);
    conn_sendv(c, argc, argv);
    conn_reply(c, out, sizeof(out));
    if (strcmp(out, want) != 0) fail_msg("%s ...: expected\n  %s\ngot\n  %s", argv[0], want, out);
}

static long long client_id_of(conn *c) {
    const char *r = call(c, "CLIENT", "ID", NULL);
    assert_true(r[0] == ':');
    return atoll(r + 1);
}

/* ---- HELLO ------------------------------------------------------------------------------ */

static void test_hello_resp2_and_resp3(void **state) {
    daemon_proc d;
    start_daemon(&d, "hello", "  d:\n    rpm: 6000\n");
    conn *c = conn_open(&d);
    long long id = client_id_of(c);
    char want[1024];

    /* HELLO alone: the current protocol, RESP2, as a flat array. */
    snprintf(want, sizeof(want),
             "[\"server\", \"sluiced\", \"version\", \"%s\", \"proto\", :2, \"id\", :%lld, \"mode\", \"standalone\", "
             "\"role\", \"master\", \"modules\", []]",
             SLUICE_VERSION, id);
    expect(c, want, "HELLO", NULL);
    expect(c, want, "HELLO", "2", NULL);
    expect(c, "(nil)", "CLIENT", "GETNAME", NULL);

    /* HELLO 3: its own reply is already a map, and so is what follows. */
    snprintf(want, sizeof(want),
             "{\"server\": \"sluiced\", \"version\": \"%s\", \"proto\": :3, \"id\": :%lld, \"mode\": \"standalone\", "
             "\"role\": \"master\", \"modules\": []}",
             SLUICE_VERSION, id);
    expect(c, want, "HELLO", "3", NULL);
    print_message("  HELLO 3 -> %s\n", want);
    const char *r = call(c, "STATUS", "d", NULL);
    assert_prefix(r, "{\"deployment\": \"d\", \"mode\": \"redis\", ");
    assert_contains(r, ", \"rpm\": \"6000\", ");
    print_message("  STATUS d in RESP3 -> %.90s...\n", r);
    assert_prefix(call(c, "STATUS", NULL), "[{\"deployment\": \"d\", \"mode\": ");
    expect(c, "_", "CLIENT", "GETNAME", NULL);
    expect(c, "[[\"ping\", :-1, ~[+fast, +connection], :0, :0, :0], _]", "COMMAND", "INFO", "ping", "nope", NULL);
    expect(c, "{}", "COMMAND", "DOCS", NULL);
    assert_prefix(call(c, "INFO", "server", NULL), "=txt:\"# Server\\r\\nsluice_version:");
    /* What RESP3 does not change: grants, +OK, integers, errors. */
    r = call(c, "ACQUIRE", "d", "TOKENS", "5", NULL);
    char grant[64];
    assert_int_equal(sscanf(r, "[\"%63[^\"]\"", grant), 1);
    assert_prefix(grant, "d:");
    assert_contains(r, ", :5]");
    expect(c, "+OK", "SETTLE", grant, "TOKENS", "4", NULL);
    expect(c, ":1", "RETRY", "d", NULL);
    expect(c, "+PONG", "PING", NULL);
    expect(c, "\"hi\"", "PING", "hi", NULL);
    expect(c, "-ERR unknown deployment 'nope'", "ACQUIRE", "nope", NULL);

    /* Another client is still RESP2: the protocol is per connection. */
    conn *other = conn_open(&d);
    assert_prefix(call(other, "STATUS", "d", NULL), "[\"deployment\", \"d\", \"mode\", \"redis\", ");
    expect(other, "(nil)", "CLIENT", "GETNAME", NULL);
    assert_prefix(call(other, "INFO", "server", NULL), "\"# Server\\r\\n");
    conn_close(other);

    /* Back to RESP2. */
    assert_prefix(call(c, "HELLO", "2", NULL), "[\"server\", \"sluiced\", ");
    assert_prefix(call(c, "STATUS", "d", NULL), "[\"deployment\", \"d\", ");
    expect(c, "(nil)", "CLIENT", "GETNAME", NULL);
    expect(c, "[(nil-array)]", "COMMAND", "INFO", "nope", NULL);
    expect(c, "[]", "COMMAND", "DOCS", NULL);

    /* Pipelined: each reply is in the protocol in force when its command
     * was read, even STATUS, which is answered after the HELLO 2 behind
     * it (it waits for Redis). */
    const char pipe[] = "HELLO 3\r\nSTATUS d\r\nCLIENT GETNAME\r\nHELLO 2\r\nSTATUS d\r\nCLIENT GETNAME\r\n"
                        "HELLO 3 SETNAME worker-1\r\nCLIENT GETNAME\r\n";
    assert_int_equal(raw_send(c->fd, pipe, sizeof(pipe) - 1), 0);
    char out[1 << 16];
    assert_prefix(conn_reply(c, out, sizeof(out)), "{\"server\": \"sluiced\", ");
    assert_prefix(conn_reply(c, out, sizeof(out)), "{\"deployment\": \"d\", ");
    assert_string_equal(conn_reply(c, out, sizeof(out)), "_");
    assert_prefix(conn_reply(c, out, sizeof(out)), "[\"server\", \"sluiced\", ");
    assert_prefix(conn_reply(c, out, sizeof(out)), "[\"deployment\", \"d\", ");
    assert_string_equal(conn_reply(c, out, sizeof(out)), "(nil)");
    assert_prefix(conn_reply(c, out, sizeof(out)), "{\"server\": \"sluiced\", ");
    assert_string_equal(conn_reply(c, out, sizeof(out)), "\"worker-1\"");
    conn_close(c);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_hello_malformed(void **state) {
    daemon_proc d;
    start_daemon(&d, "hellobad", "  d:\n    rpm: 6000\n");
    conn *c = conn_open(&d);
    conn *other = conn_open(&d);
    static const char noproto[] = "-NOPROTO unsupported protocol version";
    static const char noauth[] = "-ERR AUTH is not supported: sluiced has no passwords, the socket's file mode "
                                 "decides who may connect (docs/security.md); remove the password from the "
                                 "client's settings";
    static const struct {
        const char *argv[8];
        const char *want;
    } cases[] = {
        {{"HELLO", "4"}, noproto},
        {{"HELLO", "1"}, noproto},
        {{"HELLO", "abc"}, noproto},
        {{"HELLO", "3.0"}, noproto},
        {{"HELLO", "-3"}, noproto},
        {{"HELLO", ""}, noproto},
        {{"HELLO", "3", "AUTH", "default", "secret"}, noauth},
        {{"HELLO", "2", "SETNAME", "x", "AUTH", "alice", "pw"}, noauth},
        {{"HELLO", "3", "AUTH", "default"}, "-ERR syntax error in HELLO option 'AUTH'"},
        {{"HELLO", "3", "SETNAME"}, "-ERR syntax error in HELLO option 'SETNAME'"},
        {{"HELLO", "3", "FROB"}, "-ERR syntax error in HELLO option 'FROB'"},
        {{"HELLO", "3", "SETNAME", "ok", "FROB"}, "-ERR syntax error in HELLO option 'FROB'"},
        {{"HELLO", "3", "SETNAME", "bad name"},
         "-ERR client names cannot contain spaces, newlines or special characters"},
        {{"HELLO", "3", "SETNAME", "bad\nname"},
         "-ERR client names cannot contain spaces, newlines or special characters"},
        {{"AUTH", "secret"}, noauth},
        {{"AUTH", "default", "secret"}, noauth},
        {{"AUTH"}, "-ERR wrong number of arguments for 'auth' command"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int argc = 0;
        while (argc < 8 && cases[i].argv[argc]) argc++;
        conn_sendv(c, argc, cases[i].argv);
        char out[4096];
        conn_reply(c, out, sizeof(out));
        if (strcmp(out, cases[i].want) != 0)
            fail_msg("case %zu (%s %s ...): expected\n  %s\ngot\n  %s", i, cases[i].argv[0],
                     cases[i].argv[1] ? cases[i].argv[1] : "", cases[i].want, out);
        if (i < 3 || i == 6 || i == 12)
            print_message("  %s %s ... -> %.70s\n", cases[i].argv[0], cases[i].argv[1] ? cases[i].argv[1] : "", out);
        /* Nothing changed: still RESP2, still no name; others served. */
        expect(c, "(nil)", "CLIENT", "GETNAME", NULL);
        expect(other, "+PONG", "PING", NULL);
    }
    assert_contains(call(c, "HELLO", NULL), "\"proto\", :2, ");
    /* Inline, as nc or telnet would send it. */
    const char inl[] = "HELLO 9\r\n";
    assert_int_equal(raw_send(c->fd, inl, sizeof(inl) - 1), 0);
    char out[256];
    assert_string_equal(conn_reply(c, out, sizeof(out)), noproto);
    expect(c, "+PONG", "PING", NULL);
    conn_close(other);
    conn_close(c);
    char *info = daemon_info(&d);
    assert_non_null(info);
    assert_true(info_field(info, "arity_errors") == 1); /* AUTH alone */
    assert_true(info_field(info, "closed_protocol_error") == 0);
    free(info);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- CLIENT, SELECT --------------------------------------------------------------------- */

/* The line of client id in a CLIENT LIST text (rendered: lines end in
 * \n), copied into line; 0 when absent. */
static int list_line(const char *list, long long id, char *line, size_t cap) {
    char key[48];
    snprintf(key, sizeof(key), "id=%lld ", id);
    for (const char *p = list; (p = strstr(p, key)) != NULL; p++) {
        /* A line starts after the opening quote or after a \n. */
        if (p - list < 2 || (p[-1] != '"' && strncmp(p - 2, "\\n", 2) != 0)) continue;
        const char *end = strstr(p, "\\n");
        if (!end) return 0;
        snprintf(line, cap, "%.*s", (int)(end - p), p);
        return 1;
    }
    return 0;
}

static int count_lines(const char *list) {
    int n = 0;
    for (const char *p = list; (p = strstr(p, "\\n")) != NULL; p += 2) n++;
    return n;
}

/* CLIENT LIST on c until it has n lines (a connection that just hung up
 * is listed until the daemon has read its EOF), bounded; its reply. */
static const char *wait_clients(conn *c, int n) {
    double deadline = now_ms() + 5000;
    const char *r = call(c, "CLIENT", "LIST", NULL);
    while (count_lines(r) != n && now_ms() < deadline) {
        sleep_ms(10);
        r = call(c, "CLIENT", "LIST", NULL);
    }
    if (count_lines(r) != n) fail_msg("expected %d clients in CLIENT LIST, got:\n%s", n, r);
    return r;
}

static void test_client_commands(void **state) {
    daemon_proc d;
    start_daemon(&d, "client", "  d:\n    rpm: 6000\n");
    conn *a = conn_open(&d);
    conn *b = conn_open(&d);
    long long ida = client_id_of(a), idb = client_id_of(b);
    assert_true(idb > ida);
    expect(a, "(nil)", "CLIENT", "GETNAME", NULL);
    expect(a, "+OK", "CLIENT", "SETNAME", "worker-a", NULL);
    expect(a, "\"worker-a\"", "CLIENT", "GETNAME", NULL);
    expect(a, "+OK", "CLIENT", "SETINFO", "lib-name", "mylib(django_v5)", NULL);
    expect(a, "+OK", "CLIENT", "SETINFO", "LIB-VER", "1.2.3", NULL);
    /* a waits in ACQUIRE meanwhile: its tenant, deployment and grant are
     * nobody else's business. */
    const char *r = call(a, "ACQUIRE", "d", "TENANT", "secret-tenant", "TOKENS", "3", NULL);
    assert_prefix(r, "[\"d:");
    char grant[64];
    assert_int_equal(sscanf(r, "[\"%63[^\"]\"", grant), 1);
    assert_prefix(call(b, "HELLO", "3", "SETNAME", "worker-b", NULL), "{\"server\": \"sluiced\", ");

    /* CLIENT LIST: one line per client, oldest first, Redis' fields. */
    char list[8192], la[1024], lb[1024], want[1024];
    snprintf(list, sizeof(list), "%s", wait_clients(b, 2));
    print_message("  CLIENT LIST (RESP3, verbatim) -> %.200s...\n", list);
    assert_prefix(list, "=txt:\"id=");
    assert_true(list_line(list, ida, la, sizeof(la)));
    assert_true(list_line(list, idb, lb, sizeof(lb)));
    assert_true(strstr(list, la) < strstr(list, lb));
    snprintf(want, sizeof(want), "id=%lld addr=%s:0 laddr=%s:0 fd=", ida, d.sock, d.sock);
    assert_prefix(la, want);
    assert_contains(la, " name=worker-a age=");
    assert_contains(la, " flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 ");
    assert_contains(la, " cmd=acquire user=default redir=-1 resp=2 lib-name=mylib(django_v5) lib-ver=1.2.3");
    assert_contains(lb, " name=worker-b ");
    assert_contains(lb, " cmd=client ");
    assert_contains(lb, " resp=3 lib-name= lib-ver=");
    assert_true(strstr(list, "secret") == NULL && strstr(list, grant) == NULL && strstr(list, "TOKENS") == NULL);
    /* RESP2: a bulk string of the same lines; CLIENT INFO: one's own. */
    r = wait_clients(a, 2);
    assert_prefix(r, "\"id=");
    r = call(a, "CLIENT", "INFO", NULL);
    assert_int_equal(count_lines(r), 1);
    char self[64];
    snprintf(self, sizeof(self), "\"id=%lld ", ida);
    assert_prefix(r, self);
    assert_contains(r, " name=worker-a ");
    assert_contains(r, " cmd=client ");
    snprintf(self, sizeof(self), "=txt:\"id=%lld ", idb);
    assert_prefix(call(b, "CLIENT", "INFO", NULL), self);
    expect(b, "\"worker-b\"", "CLIENT", "GETNAME", NULL);

    /* Bad names and subcommands: an error, the name unchanged. */
    static const struct {
        const char *argv[6];
        const char *want;
    } bad[] = {
        {{"CLIENT"}, "-ERR wrong number of arguments for 'client' command"},
        {{"CLIENT", "SETNAME"}, "-ERR wrong number of arguments for 'client|setname' command"},
        {{"CLIENT", "SETNAME", "a", "b"}, "-ERR wrong number of arguments for 'client|setname' command"},
        {{"CLIENT", "GETNAME", "x"}, "-ERR wrong number of arguments for 'client|getname' command"},
        {{"CLIENT", "ID", "x"}, "-ERR wrong number of arguments for 'client|id' command"},
        {{"CLIENT", "SETINFO", "lib-name"}, "-ERR wrong number of arguments for 'client|setinfo' command"},
        {{"CLIENT", "SETNAME", "a b"}, "-ERR client names cannot contain spaces, newlines or special characters"},
        {{"CLIENT", "SETNAME", "a\r\nid=1"}, "-ERR client names cannot contain spaces, newlines or special characters"},
        {{"CLIENT", "SETNAME", "caf\xc3\xa9"},
         "-ERR client names cannot contain spaces, newlines or special characters"},
        {{"CLIENT", "SETINFO", "lib-name", "x y"},
         "-ERR lib-name cannot contain spaces, newlines or special characters"},
        {{"CLIENT", "SETINFO", "lib-ver", "1\n2"},
         "-ERR lib-ver cannot contain spaces, newlines or special characters"},
        {{"CLIENT", "SETINFO", "lib-foo", "x"},
         "-ERR unknown attribute 'lib-foo' for CLIENT SETINFO (expected LIB-NAME or LIB-VER)"},
        {{"CLIENT", "LIST", "TYPE", "normal"},
         "-ERR syntax error: sluiced's CLIENT LIST takes no options (no TYPE or ID filter)"},
        {{"CLIENT", "KILL", "ID", "1"},
         "-ERR unknown subcommand 'KILL' of CLIENT (sluiced has ID, GETNAME, SETNAME, SETINFO, LIST and INFO)"},
        {{"CLIENT", "PAUSE", "1000"},
         "-ERR unknown subcommand 'PAUSE' of CLIENT (sluiced has ID, GETNAME, SETNAME, SETINFO, LIST and INFO)"},
        {{"CLIENT", "REPLY", "OFF"},
         "-ERR unknown subcommand 'REPLY' of CLIENT (sluiced has ID, GETNAME, SETNAME, SETINFO, LIST and INFO)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int argc = 0;
        while (argc < 6 && bad[i].argv[argc]) argc++;
        conn_sendv(a, argc, bad[i].argv);
        char out[4096];
        conn_reply(a, out, sizeof(out));
        if (strcmp(out, bad[i].want) != 0) fail_msg("case %zu: expected\n  %s\ngot\n  %s", i, bad[i].want, out);
        expect(a, "\"worker-a\"", "CLIENT", "GETNAME", NULL);
    }
    /* The longest name is 128 bytes. */
    char name[200];
    memset(name, 'n', 129);
    name[129] = '\0';
    expect(a, "-ERR client names cannot be longer than 128 bytes", "CLIENT", "SETNAME", name, NULL);
    name[128] = '\0';
    expect(a, "+OK", "CLIENT", "SETNAME", name, NULL);
    /* An empty name clears it, as in Redis. */
    expect(a, "+OK", "CLIENT", "SETNAME", "", NULL);
    expect(a, "(nil)", "CLIENT", "GETNAME", NULL);
    expect(a, "+OK", "SETTLE", grant, NULL);

    /* A client that leaves leaves the list. */
    conn_close(b);
    r = wait_clients(a, 1);
    snprintf(self, sizeof(self), "\"id=%lld ", ida);
    assert_prefix(r, self);
    conn_close(a);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_select(void **state) {
    daemon_proc d;
    start_daemon(&d, "select", "  d:\n    rpm: 6000\n");
    conn *c = conn_open(&d);
    expect(c, "+OK", "SELECT", "0", NULL);
    expect(c, "-ERR DB index is out of range: sluiced has one database, 0 (got '1')", "SELECT", "1", NULL);
    expect(c, "-ERR DB index is out of range: sluiced has one database, 0 (got '15')", "SELECT", "15", NULL);
    expect(c, "-ERR DB index is out of range: sluiced has one database, 0 (got '-1')", "SELECT", "-1", NULL);
    expect(c, "-ERR DB index is out of range: sluiced has one database, 0 (got 'abc')", "SELECT", "abc", NULL);
    expect(c, "-ERR DB index is out of range: sluiced has one database, 0 (got '00')", "SELECT", "00", NULL);
    expect(c, "-ERR wrong number of arguments for 'select' command", "SELECT", NULL);
    expect(c, "-ERR wrong number of arguments for 'select' command", "SELECT", "0", "1", NULL);
    assert_prefix(call(c, "HELLO", "3", NULL), "{");
    expect(c, "+OK", "SELECT", "0", NULL);
    assert_prefix(call(c, "ACQUIRE", "d", NULL), "[\"d:");
    conn_close(c);
    assert_int_equal(daemon_stop(&d), 0);
}

/* ---- stock clients ---------------------------------------------------------------------- */

static int cli(const daemon_proc *d, char *out, size_t outlen, ...) {
    char *argv[32];
    int n = 0;
    argv[n++] = "redis-cli";
    va_list ap;
    va_start(ap, outlen);
    for (char *a; n < 29 && (a = va_arg(ap, char *)) != NULL;) argv[n++] = a;
    va_end(ap);
    argv[n++] = NULL;
    return run_capture(argv, NULL, out, outlen);
}

/* redis-cli -3 sends HELLO 3 when it connects, and prints maps as
 * "key value" lines (RESP2's flat array: key and value on lines of their
 * own). */
static void test_redis_cli_resp3(void **state) {
    daemon_proc d;
    start_daemon(&d, "cli3", "  d:\n    rpm: 6000\n");
    char out[65536];
    assert_int_equal(cli(&d, out, sizeof(out), "-3", "-s", d.sock, "CLIENT", "INFO", NULL), 0);
    assert_contains(out, " resp=3 ");
    assert_int_equal(cli(&d, out, sizeof(out), "-3", "-s", d.sock, "STATUS", "d", NULL), 0);
    assert_prefix(out, "deployment d\nmode redis\n");
    assert_int_equal(cli(&d, out, sizeof(out), "-s", d.sock, "STATUS", "d", NULL), 0);
    assert_prefix(out, "deployment\nd\nmode\nredis\n");
    assert_int_equal(cli(&d, out, sizeof(out), "-3", "-s", d.sock, "ACQUIRE", "d", "TOKENS", "2", NULL), 0);
    char grant[64];
    assert_int_equal(sscanf(out, "%63s\n%*d\n2\n", grant), 1);
    assert_int_equal(cli(&d, out, sizeof(out), "-3", "-s", d.sock, "SETTLE", grant, NULL), 0);
    assert_string_equal(out, "OK\n");
    assert_int_equal(cli(&d, out, sizeof(out), "-3", "-s", d.sock, "HELLO", NULL), 0);
    assert_contains(out, "server sluiced\n");
    assert_contains(out, "proto 3\n");
    print_message("  redis-cli -3: HELLO 3 on connect, STATUS as a map, ACQUIRE %s and SETTLE OK\n", grant);
    assert_int_equal(daemon_stop(&d), 0);
}

/* Debian's python3 with python3-redis: installed with apt-get when
 * missing (deploy/install-deps.sh installs it too). 1 when usable. */
static int have_python_redis(char *why, size_t whylen) {
    char out[4096];
    char *probe[] = {"/usr/bin/python3", "-c", "import redis", NULL};
    if (access("/usr/bin/python3", X_OK) != 0) {
        snprintf(why, whylen, "/usr/bin/python3 is not installed");
        return 0;
    }
    if (run_capture(probe, NULL, out, sizeof(out)) == 0) return 1;
    print_message("  python3-redis is missing: installing it with apt-get\n");
    char *install[] = {"sh", "-c",
                       "export DEBIAN_FRONTEND=noninteractive; "
                       "timeout 200 apt-get install -y -qq --no-install-recommends python3-redis || "
                       "{ timeout 200 apt-get update -qq && "
                       "timeout 200 apt-get install -y -qq --no-install-recommends python3-redis; }",
                       NULL};
    int rc = run_capture(install, NULL, out, sizeof(out));
    if (run_capture(probe, NULL, out + strlen(out), sizeof(out) - strlen(out)) == 0) return 1;
    snprintf(why, whylen, "python3-redis is not installed and apt-get could not install it (exit %d): %.300s", rc, out);
    return 0;
}

static void test_redis_py(void **state) {
    char why[512];
    if (!have_python_redis(why, sizeof(why))) {
        print_message("  SKIPPED: %s\n", why);
        skip();
    }
    const char *src = getenv("SLUICE_SOURCE_DIR");
    char script[600];
    snprintf(script, sizeof(script), "%s/tests/integration/redispy_client.py", src ? src : ".");
    daemon_proc d;
    start_daemon(&d, "redispy", "  py:\n    rpm: 6000\n");
    char out[8192];
    char *argv[] = {"/usr/bin/python3", script, d.sock, "py", NULL};
    int rc = run_capture(argv, NULL, out, sizeof(out));
    print_message("%s", out);
    assert_int_equal(rc, 0);
    assert_contains(out, "redis-py defaults ok: version=");
    assert_contains(out, "redis-py resp2 ok: version=");
    if (!strstr(out, "redis-py resp3 ok: version=")) assert_contains(out, "raw-socket resp3 ok: redis-py ");
    assert_contains(out, " resp=3");
    /* Every part that printed a grant acquired once and settled once. */
    int parts = 0;
    for (const char *p = out; (p = strstr(p, " grant=")) != NULL; p++) parts++;
    assert_true(parts >= 2);
    char *info = daemon_info(&d);
    assert_non_null(info);
    assert_true(info_field(info, "grants") == parts);
    assert_true(info_field(info, "settles") == parts);
    free(info);
    assert_int_equal(daemon_stop(&d), 0);
}

static void test_ioredis(void **state) {
    char out[8192];
    const char *build = getenv("SLUICE_BUILD_DIR");
    const char *src = getenv("SLUICE_SOURCE_DIR");
    assert_non_null(build);
    char modules[600], installer[600], script[600];
    snprintf(modules, sizeof(modules), "%s/npm", build);
    snprintf(installer, sizeof(installer), "%s/tests/integration/ioredis_install.sh", src ? src : ".");
    snprintf(script, sizeof(script), "%s/tests/integration/ioredis_client.js", src ? src : ".");
    char *install[] = {"bash", installer, modules, NULL};
    int rc = run_capture(install, NULL, out, sizeof(out));
    if (rc == 77) {
        print_message("  SKIPPED: ioredis cannot be installed here: %s", out);
        skip();
    }
    if (rc != 0) fail_msg("ioredis_install.sh %s failed (exit %d):\n%s", modules, rc, out);
    int have6 = strstr(out, "ioredis\n") != NULL;
    if (!have6) print_message("  ioredis 6 not installed (%s): testing ioredis 5 only\n", out);
    daemon_proc d;
    start_daemon(&d, "ioredis", "  js:\n    rpm: 6000\n");
    /* package, protocol option ("": ioredis' default), what the daemon
     * must see (resp=), how STATUS arrives. */
    static const struct {
        const char *pkg, *protocol, *resp, *status;
    } runs[] = {
        {"ioredis", "", "resp=3", "status=array"}, /* 6: HELLO 3 by default, maps flattened */
        {"ioredis", "2", "resp=2", "status=array"},
        {"ioredis", "3", "resp=3", "status=object"}, /* replyMapping resp3: the map as an object */
        {"ioredis5", "", "resp=2", "status=array"},  /* 5: RESP2 only */
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        if (!strcmp(runs[i].pkg, "ioredis") && !have6) continue;
        char *argv[] = {"node",
                        script,
                        modules,
                        (char *)runs[i].pkg,
                        d.sock,
                        "js",
                        runs[i].protocol[0] ? (char *)runs[i].protocol : NULL,
                        NULL};
        rc = run_capture(argv, NULL, out, sizeof(out));
        print_message("  %s", out);
        assert_int_equal(rc, 0);
        assert_contains(out, "ioredis ok: package=");
        assert_contains(out, " reserved=10 settle=OK ");
        assert_contains(out, runs[i].resp);
        assert_contains(out, runs[i].status);
        /* ioredis says who it is with CLIENT SETINFO on connect. */
        assert_contains(out, " lib-name=ioredis lib-ver=");
        ran++;
    }
    char *info = daemon_info(&d);
    assert_non_null(info);
    assert_true(info_field(info, "grants") == ran);
    assert_true(info_field(info, "settles") == ran);
    free(info);
    assert_int_equal(daemon_stop(&d), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_hello_resp2_and_resp3, test_teardown),
        cmocka_unit_test_teardown(test_hello_malformed, test_teardown),
        cmocka_unit_test_teardown(test_client_commands, test_teardown),
        cmocka_unit_test_teardown(test_select, test_teardown),
        cmocka_unit_test_teardown(test_redis_cli_resp3, test_teardown),
        cmocka_unit_test_teardown(test_redis_py, test_teardown),
        cmocka_unit_test_teardown(test_ioredis, test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
