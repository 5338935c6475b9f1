/* resp: the Redis protocol (RESP2, and RESP3 after HELLO 3) as sluiced
 * speaks it on its UNIX socket.
 *
 * Two independent halves. The request parser turns the bytes a client sends,
 * split however the kernel delivers them, into complete commands (argv
 * arrays), accepting both multibulk frames (`*2\r\n$4\r\nPING\r\n...`, what
 * every Redis client library sends) and inline commands (`PING\r\n`, what
 * `nc` or telnet send, with Redis' quoting rules). It enforces the limits
 * the caller sets (arguments per command, bulk length, inline length,
 * buffered bytes) and rejects an oversized header at once, before any
 * allocation. The reply writer appends replies to a growable byte buffer,
 * in the protocol version the buffer is set to (resp_buf.proto): a caller
 * says what a reply is (a map, a null, a verbatim text) and the writer
 * picks its wire form, so no command has a RESP2 and a RESP3 branch.
 *
 * Depends on libc only: no event loop, no I/O, no globals. Functions return
 * 0 (or 1 where stated) on success and a negative RESP_E* code on failure;
 * nothing prints, aborts or exits. A parser or buffer is used by one thread
 * at a time. Ownership: resp_parser_new() returns a parser freed with
 * resp_parser_free() (NULL is a no-op); the argv of a returned command points
 * into the parser's own buffer and is borrowed (see resp_parser_next()).
 * A resp_buf owns its data until resp_buf_detach() hands it to the caller. */
#ifndef SLUICE_RESP_H
#define SLUICE_RESP_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>

/* Error codes: negative errno values, as libuv uses, so uv_strerror() and
 * friends understand them. */
#define RESP_ENOMEM (-ENOMEM)    /* allocation failed */
#define RESP_EPROTO (-EPROTO)    /* malformed request */
#define RESP_ETOOBIG (-EMSGSIZE) /* a configured limit was exceeded */

/* Default limits (resp_limits_init()). */
#define RESP_DEFAULT_MAX_ARGS 1024
#define RESP_DEFAULT_MAX_BULK (1024 * 1024)
#define RESP_DEFAULT_MAX_INLINE (64 * 1024)
#define RESP_DEFAULT_MAX_BUFFER (1024 * 1024 + 64 * 1024)

/* Limits applied to one client's input. Fill with resp_limits_init(), then
 * override; the struct may grow at the end. A zero field means the default. */
typedef struct resp_limits {
    size_t max_args;   /* arguments per command */
    size_t max_bulk;   /* bytes in one bulk argument */
    size_t max_inline; /* bytes in one inline command line */
    size_t max_buffer; /* bytes buffered and not yet parsed into a command */
} resp_limits;

/* Sets every limit to its default. */
void resp_limits_init(resp_limits *lim);

/* One complete command. argv[i] points at argvlen[i] bytes followed by a NUL
 * (arguments are binary safe: they may also contain NULs). argc >= 1. */
typedef struct resp_command {
    int argc;
    const char **argv;
    const size_t *argvlen;
} resp_command;

typedef struct resp_parser resp_parser;

/* A new parser with the given limits (NULL: defaults). Returns NULL when out
 * of memory. The limits are copied. */
resp_parser *resp_parser_new(const resp_limits *lim);

/* Frees the parser and its buffer. NULL is a no-op. */
void resp_parser_free(resp_parser *p);

/* Appends len bytes received from the client. Returns 0, RESP_ENOMEM, or
 * RESP_ETOOBIG when the bytes not yet parsed into commands would exceed
 * max_buffer. Invalidates the command last returned by resp_parser_next(). */
int resp_parser_feed(resp_parser *p, const void *data, size_t len);

/* Zero-copy input for a libuv alloc callback: returns in *buf and *avail a place
 * to read into (at least 1 byte, at most `suggested` unless more is already
 * free), within max_buffer plus one byte so that an over-long input is
 * detected by resp_parser_commit(). Then call resp_parser_commit() with the
 * number of bytes actually read (0 is fine). No other call may come in
 * between. Returns 0, RESP_ENOMEM, or the parser's sticky error.
 * Invalidates the command last returned by resp_parser_next(). */
int resp_parser_prepare(resp_parser *p, size_t suggested, char **buf, size_t *avail);

/* Accounts n bytes written at the place given by resp_parser_prepare().
 * Returns 0 or RESP_ETOOBIG (buffer limit exceeded). */
int resp_parser_commit(resp_parser *p, size_t n);

/* Parses the next complete command from the bytes fed so far. Returns 1 and
 * fills *cmd when one is ready; 0 when more bytes are needed (a partial
 * command stays buffered); or a negative RESP_E* code on a protocol error or
 * exceeded limit, with a Redis-style message in resp_parser_error(). Errors
 * are sticky: every later call returns the same code, and the caller is
 * expected to send the message (resp_add_error()) and close the client.
 * Empty commands (`*0`, a blank inline line) are skipped, as Redis does.
 *
 * The returned argv, argvlen and argument bytes stay valid until the next
 * call of resp_parser_next(), _feed(), _prepare() or _free() on this parser;
 * call it again (in a loop) to consume the command and get the next one. */
int resp_parser_next(resp_parser *p, resp_command *cmd);

/* The message of the sticky error, e.g. "Protocol error: invalid bulk
 * length", or "" when there is none. Borrowed, valid until the parser is
 * freed. */
const char *resp_parser_error(const resp_parser *p);

/* Bytes received and not yet returned as part of a command: non-zero after
 * resp_parser_next() returned 0 means a half-written command is waiting, so
 * the caller should run its idle timer. */
size_t resp_parser_pending(const resp_parser *p);

/* Protocol versions of the reply writer (resp_buf.proto). */
#define RESP_PROTO_2 2
#define RESP_PROTO_3 3

/* A growable output buffer. Zero-initialised (or resp_buf_init()) is an
 * empty buffer. data is NULL until the first append.
 *
 * proto is the protocol the resp_add_* replies are written in: 0 (the
 * zero value) or RESP_PROTO_2 for RESP2, RESP_PROTO_3 for RESP3. Set it
 * before the first reply; resp_buf_reset(), _consume() and _detach() keep
 * it, _init() and _free() set it back to RESP2. In RESP2 the RESP3-only
 * kinds take the form Redis gives them: a map is a flat array of its 2n
 * keys and values, a set an array, a null `$-1` (or `*-1` where an array
 * was expected), a verbatim string a bulk string. */
typedef struct resp_buf {
    char *data;
    size_t len;
    size_t cap;
    int proto;
} resp_buf;

void resp_buf_init(resp_buf *b);

/* Frees the data and leaves an empty buffer. NULL is a no-op. */
void resp_buf_free(resp_buf *b);

/* Empties the buffer, keeping its memory. */
void resp_buf_reset(resp_buf *b);

/* Drops the first n bytes (those a partial write sent); n > len empties. */
void resp_buf_consume(resp_buf *b, size_t n);

/* Hands the data to the caller (who frees it with free()), stores its
 * length in *len (when len is not NULL) and leaves an empty buffer (of the
 * same proto). Returns
 * NULL when the buffer never held anything. For uv_write(): the bytes stay
 * put until the write callback frees them. */
char *resp_buf_detach(resp_buf *b, size_t *len);

/* Appends raw bytes. */
int resp_buf_append(resp_buf *b, const void *data, size_t len);

/* Appends printf-style text, at most 511 bytes of it (longer is cut). With
 * RESP_PRINTF_LINE the text is one line: CR and LF in it become spaces and
 * CRLF ends it (INFO's format). Returns 0 or RESP_ENOMEM (b unchanged). */
#define RESP_PRINTF_LINE 1u
int resp_buf_vprintf(resp_buf *b, unsigned flags, const char *fmt, va_list ap);

/* Every resp_add_* appends one complete reply (or array header) and returns
 * 0, or RESP_ENOMEM leaving the buffer exactly as it was. */

/* `+s\r\n`. CR and LF in s become spaces. */
int resp_add_simple(resp_buf *b, const char *s);

/* An error reply. As in Redis, a message that starts with '-' is sent as is
 * (`-SHED 1500 ...`), any other gets the `-ERR ` prefix. CR and LF become
 * spaces so a message can never break the framing. */
int resp_add_error(resp_buf *b, const char *msg);

/* resp_add_error() with a printf-style message. */
int resp_add_errorf(resp_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* `:n\r\n` */
int resp_add_integer(resp_buf *b, long long n);

/* `$len\r\n<bytes>\r\n`. data may be NULL when len is 0. */
int resp_add_bulk(resp_buf *b, const void *data, size_t len);

/* A bulk string of the NUL-terminated s, or a null bulk when s is NULL. */
int resp_add_bulk_str(resp_buf *b, const char *s);

/* A bulk string holding the printf-formatted text. */
int resp_add_bulkf(resp_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The null: `$-1\r\n` (the null bulk string) in RESP2, `_\r\n` in RESP3. */
int resp_add_null(resp_buf *b);

/* `*n\r\n`: the caller then adds the n elements. */
int resp_add_array(resp_buf *b, size_t n);

/* The null in place of an array: `*-1\r\n` in RESP2, `_\r\n` in RESP3. */
int resp_add_null_array(resp_buf *b);

/* A map of n key/value pairs: `%n\r\n` in RESP3, `*2n\r\n` in RESP2; the
 * caller then adds key, value, key, value... (2n elements either way). */
int resp_add_map(resp_buf *b, size_t n);

/* A set of n elements: `~n\r\n` in RESP3, `*n\r\n` in RESP2. */
int resp_add_set(resp_buf *b, size_t n);

/* Text meant for people (INFO, CLIENT LIST): in RESP3 a verbatim string
 * `=<len+4>\r\n<fmt>:<data>\r\n`, fmt being three characters ("txt"); in
 * RESP2 a bulk string of data. */
int resp_add_verbatim(resp_buf *b, const char *fmt, const void *data, size_t len);

/* A whole array of n bulk strings. lens may be NULL (then every item is a
 * NUL-terminated string); a NULL item is a null (resp_add_null()). All or
 * nothing. */
int resp_add_bulk_array(resp_buf *b, const char *const *items, const size_t *lens, size_t n);

#endif
