/* mock_map: a small string-keyed hash map for the mock provider.
 *
 * Maps a NUL-terminated key (copied) to a caller-owned value pointer and
 * remembers insertion order, so that JSON built from it lists deployments
 * and clients in the order they were first seen. Entries are never removed
 * individually; values stay at a stable address for the map's lifetime.
 * Not thread-safe: the mock uses it from its loop thread only. */
#ifndef SLUICE_MOCK_MAP_H
#define SLUICE_MOCK_MAP_H

#include <stddef.h>

typedef struct mock_map_entry {
    char *key;
    void *value;
    struct mock_map_entry *chain; /* next entry in the same bucket */
    struct mock_map_entry *next;  /* next entry in insertion order */
} mock_map_entry;

typedef struct mock_map {
    mock_map_entry **slots;
    size_t nslots, count;
    mock_map_entry *first, *last;
} mock_map;

void mock_map_init(mock_map *m);

/* Frees the entries and their keys. free_value (optional) is called on each
 * value. The map is empty and reusable afterwards. */
void mock_map_free(mock_map *m, void (*free_value)(void *));

/* The value stored under key, or NULL. */
void *mock_map_get(const mock_map *m, const char *key);

/* Stores value under key, which must not be present yet. Returns 0, or -1
 * on allocation failure (the map is unchanged). */
int mock_map_put(mock_map *m, const char *key, void *value);

#endif
