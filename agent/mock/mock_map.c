#define _POSIX_C_SOURCE 200809L
#include "mock_map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mock_map_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

void mock_map_init(mock_map *m) { memset(m, 0, sizeof(*m)); }

void mock_map_free(mock_map *m, void (*free_value)(void *)) {
    mock_map_entry *e = m->first;
    while (e) {
        mock_map_entry *next = e->next;
        if (free_value) free_value(e->value);
        free(e->key);
        free(e);
        e = next;
    }
    free(m->slots);
    mock_map_init(m);
}

void *mock_map_get(const mock_map *m, const char *key) {
    if (m->nslots == 0) return NULL;
    mock_map_entry *e = m->slots[mock_map_hash(key) & (m->nslots - 1)];
    for (; e; e = e->chain)
        if (strcmp(e->key, key) == 0) return e->value;
    return NULL;
}

static int mock_map_grow(mock_map *m) {
    size_t n = m->nslots ? m->nslots * 2 : 16;
    mock_map_entry **slots = calloc(n, sizeof(*slots));
    if (!slots) return -1;
    for (mock_map_entry *e = m->first; e; e = e->next) {
        size_t i = mock_map_hash(e->key) & (n - 1);
        e->chain = slots[i];
        slots[i] = e;
    }
    free(m->slots);
    m->slots = slots;
    m->nslots = n;
    return 0;
}

int mock_map_put(mock_map *m, const char *key, void *value) {
    /* Keep the load factor under 3/4. */
    if ((m->count + 1) * 4 > m->nslots * 3 && mock_map_grow(m) != 0) return -1;
    mock_map_entry *e = calloc(1, sizeof(*e));
    if (!e) return -1;
    e->key = strdup(key);
    if (!e->key) {
        free(e);
        return -1;
    }
    e->value = value;
    size_t i = mock_map_hash(key) & (m->nslots - 1);
    e->chain = m->slots[i];
    m->slots[i] = e;
    if (m->last) m->last->next = e;
    else m->first = e;
    m->last = e;
    m->count++;
    return 0;
}
