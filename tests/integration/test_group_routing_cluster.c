/* test_group_routing_cluster: test_group_routing on a one-node Redis
 * Cluster, where the engine routes a group's requests step by step (the
 * members' keys live in different slots, so no one script may touch them
 * all; each step is one atomic reserve on one member). */
#define ROUTING_CLUSTER 1
#include "test_group_routing.c"
