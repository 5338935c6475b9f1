/* relay: a TCP relay between one client (a sluiced agent) and Redis, to
 * cut that client off and reconnect it.
 *
 * relay_start() listens on a free loopback port and forwards every
 * connection made to it to 127.0.0.1:<upstream port> (Redis' TCP port),
 * both ways, byte for byte, on a thread of its own (poll(2), non-blocking
 * sockets, at most 100 ms per turn). Point one agent's redis.url at
 * redis://127.0.0.1:<relay_port()> and its link to Redis is in the test's
 * hands:
 *
 *   RELAY_PASS       forwarding. A client connection whose upstream
 *                    connect fails (Redis down) is closed at once, as
 *                    Redis' own refusal would look.
 *   RELAY_CUT        a clean cut: every connection is closed (both sides)
 *                    and the listening socket too, so new connects are
 *                    refused (ECONNREFUSED) until the next RELAY_PASS,
 *                    which listens again on the same port.
 *   RELAY_BLACKHOLE  what a real partition looks like to a TCP client:
 *                    nothing is closed and nothing is forwarded. Open
 *                    connections are no longer read or written (what the
 *                    client sends sits in the kernel's buffers, replies
 *                    never come); new connects are accepted (the kernel
 *                    completes the handshake) and held without an
 *                    upstream. The client's own timeouts have to notice.
 *                    Back to RELAY_PASS, the held connections get their
 *                    upstream and everything buffered is delivered, as
 *                    TCP retransmission delivers it when a partition
 *                    heals (commands the client gave up on reach Redis
 *                    late, closes included). RELAY_CUT from here drops
 *                    it all instead.
 *
 * relay_set_mode() returns once the relay's thread has applied the mode
 * (bounded: 5 s). relay_stop() closes every socket and joins the thread
 * (bounded by one turn). Counters are kept for the test's figures.
 *
 * Depends on pthreads and Linux sockets only. Functions return 0 or -1
 * and never print; relay_error() says what failed. Thread-safe: any
 * thread may call relay_set_mode and relay_get_counts. */
#ifndef SLUICE_RELAY_H
#define SLUICE_RELAY_H

#include <stddef.h>

typedef enum relay_mode { RELAY_PASS = 0, RELAY_CUT, RELAY_BLACKHOLE } relay_mode;

typedef struct relay_counts {
    long long accepted;                 /* client connections accepted */
    long long upstream_failed;          /* of them, closed because the upstream connect failed */
    long long closed_by_cut;            /* connections closed by RELAY_CUT */
    long long held;                     /* accepted while in RELAY_BLACKHOLE */
    long long open;                     /* client connections open now (forwarding or held) */
    long long bytes_up;                 /* forwarded client -> Redis */
    long long bytes_down;               /* forwarded Redis -> client */
    long long cuts, blackholes, passes; /* mode changes applied */
} relay_counts;

typedef struct relay relay;

/* Starts a relay to 127.0.0.1:upstream_port on a free loopback port (or
 * listen_port when > 0). Returns the relay, or NULL (errno-style text in
 * err when given). */
relay *relay_start(int upstream_port, int listen_port, char *err, size_t errlen);

/* The loopback port the relay listens on (also while cut: it listens
 * there again on RELAY_PASS). */
int relay_port(const relay *r);

/* Switches the mode; returns 0 once the relay's thread applied it, -1 when
 * it did not within 5 s or could not listen again (relay_error says why;
 * it keeps trying on each turn). */
int relay_set_mode(relay *r, relay_mode m);

relay_mode relay_get_mode(relay *r);

void relay_get_counts(relay *r, relay_counts *out);

/* Copies the last error into buf ("" when none). */
void relay_error(relay *r, char *buf, size_t n);

/* The mode's name: "pass", "cut", "blackhole". */
const char *relay_mode_name(relay_mode m);

/* Closes every connection and the listener, joins the thread, frees r.
 * NULL is fine. */
void relay_stop(relay *r);

#endif
