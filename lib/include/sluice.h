/* sluice.h: the public C API of libsluice, a fleet-wide quota governor for
 * LLM API calls.
 *
 * This header is the whole API. Names are prefixed sl_ / SL_. Functions
 * return 0 or a negative SL_E* code; sl_strerror() names a code. The
 * library never aborts, exits or prints; it returns an error. */
#ifndef SLUICE_H
#define SLUICE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: X(name, value, message). One table generates the enum and
 * sl_strerror(), as libuv's UV_ERRNO_MAP does. */
#define SL_ERRNO_MAP(X)                                                                    \
    X(OK, 0, "success")                                                                    \
    X(EINVAL, -1, "invalid argument")                                                      \
    X(ENOMEM, -2, "out of memory")                                                         \
    X(ESHED, -3, "shed: no slot within the max wait (see the retry-after and reason)")    \
    X(EUNKNOWN, -4, "unknown deployment")                                                  \
    X(ETIMEDOUT, -5, "timed out")                                                          \
    X(EUNAVAIL, -6, "governor unavailable: Redis unreachable and the agent fails closed") \
    X(ECANCELED, -7, "canceled")                                                           \
    X(ECLOSING, -8, "the governor is shutting down")                                       \
    X(EREDIS, -9, "Redis error")                                                           \
    X(EPROTO, -10, "protocol error")                                                       \
    X(EIO, -11, "I/O error")                                                               \
    X(ENORETRY, -12, "the fleet's retry budget is spent")                                  \
    X(EDEADLINE, -13, "the deadline would pass before the next attempt")                   \
    X(EFATAL, -14, "not retryable: the provider refused for good (quota, auth, request)")

typedef enum sl_errno {
#define SL_ERRNO_ENUM(name, value, msg) SL_##name = value,
    SL_ERRNO_MAP(SL_ERRNO_ENUM)
#undef SL_ERRNO_ENUM
} sl_errno;

/* A static message for code; "unknown error" for values not in the table. */
const char *sl_strerror(int code);

/* The library version, "MAJOR.MINOR.PATCH". */
const char *sl_version(void);

#ifdef __cplusplus
}
#endif
#endif
