#include "script_call.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

redisReply *script_call(redisContext *c, script_id id, const char *deployment, int argc, const char **argv) {
    char keys[SCRIPTS_NKEYS][SCRIPTS_KEY_MAX];
    if (scripts_keys(deployment, keys) != 0) return NULL;
    return script_call_keys(c, id, SCRIPTS_NKEYS, keys, argc, argv);
}

redisReply *script_call_keys(redisContext *c, script_id id, int nkeys, char (*keys)[SCRIPTS_KEY_MAX], int argc,
                             const char **argv) {
    const script *s = scripts_get(id);
    if (!s) return NULL;
    int n = 3 + nkeys + argc;
    char nk[12];
    const char **av = malloc(sizeof(*av) * (size_t)n);
    size_t *al = malloc(sizeof(*al) * (size_t)n);
    if (!av || !al || scripts_evalsha_argv_n(id, keys, nkeys, argc, argv, NULL, av, al, nk) < 0) {
        free(av);
        free(al);
        return NULL;
    }
    redisReply *r = redisCommandArgv(c, n, av, al);
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0) {
        freeReplyObject(r);
        r = redisCommand(c, "SCRIPT LOAD %b", s->source, s->len);
        if (r) freeReplyObject(r);
        r = redisCommandArgv(c, n, av, al);
    }
    free(av);
    free(al);
    return r;
}

redisReply *script_callv(redisContext *c, script_id id, const char *deployment, ...) {
    const char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, deployment);
    const char *a;
    while (argc < 64 && (a = va_arg(ap, const char *)) != NULL) argv[argc++] = a;
    va_end(ap);
    return script_call(c, id, deployment, argc, argv);
}
