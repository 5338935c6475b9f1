/* world_send: a provider world (world.h) answering a simulated fleet's
 * send (simfleet.h): the one adapter between the two, for the scoreboard,
 * `sluice sim` (agent/cli/cmd_sim.c) and the tests. Header-only, so that
 * neither library links the other: the worlds stay free of everything of
 * lib/ and lua/ (tests/CMakeLists.txt, sluice_simworld).
 *
 * sim_world_answer() sends rq to w and fills out as simfleet wants it:
 * status, latency, usage and the response headers. keep holds the world's
 * response, whose header strings out borrows: it must outlive the use of
 * out (simfleet reads them before send() returns). */
#ifndef SLUICE_SIM_WORLD_SEND_H
#define SLUICE_SIM_WORLD_SEND_H

#include "simfleet.h"
#include "world.h"

static inline void sim_world_answer(sim_world *w, const sim_request *rq, sim_response *keep, sim_outcome *out) {
    sim_world_send(w, rq, keep);
    out->status = keep->status;
    out->latency_ms = keep->latency_ms;
    out->input = keep->input_tokens;
    out->output = keep->output_tokens;
    out->cache_read = keep->cache_read;
    out->nheaders = 0;
    for (int i = 0; i < keep->nheaders && i < SIMFLEET_MAX_HEADERS; i++)
        out->headers[out->nheaders++] = (sim_header){keep->name[i], keep->value[i]};
}

#endif
