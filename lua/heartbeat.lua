-- heartbeat: an agent says it is alive for this deployment; the number of
-- live agents is what each agent divides the rate by when Redis becomes
-- unreachable (its fallback share).
-- ARGV: agent_id, window_ms (an agent is live if seen within it),
-- optionally "leave" to deregister at shutdown, or "busy" followed by
-- busy_requests_ms and busy_tokens_ms: an agent rejoining after an outage
-- hands over its local schedule, whose grants are still being released
-- for that long. The shared schedule then starts no earlier than that
-- (each dimension's TAT >= now + busy + one burst, so the bucket is empty
-- where the local tail ends; busy_tokens_ms for every token dimension) and
-- refunds wait until after it. The estimate of others' use (settle.lua
-- observe) starts again once that tail has been sent: the local sends are
-- in the provider's counts and not in the fleet's, so no span of its
-- readings may contain them. Optionally four more: the units the agent
-- granted locally meanwhile (requests, tokens, input, output); the
-- requests are added to local_requests (status). Optionally three more:
-- the agent's local tail (tail_requests_ms, tail_tokens_ms: until when
-- its local grants are still released, beyond the fleet's schedule it
-- last saw, which busy_*_ms then covers) and the share of the rate it
-- paced them at (a decimal in (0, 1]). The schedule is then not pushed
-- past the tail: the tail is recorded (state field `tails`) and its share
-- stays held for the slots before its end (common.lua sl_dim_hold), so
-- the others use the rest of the rate beside it. When no local tail is
-- held after the hand-over, the sends the others were granted at the held
-- rate are re-timed toward the rate now (sl_rate_changed: the reply's
-- pause_shift_ms field carries it), anchored after the hand-over.
-- Reply: {live, pause_shift_ms, now_us, requests_backlog_ms,
-- tokens_backlog_ms}: the number of live agents (including this one
-- unless leaving), the pause shift and re-timing an agent follows (the
-- field reserve and settle reply with, common.lua sl_shift_field: an agent
-- holding callers hears of a re-timing within a heartbeat even when it has
-- nothing else to ask), the server time, and how far the fleet's schedule
-- reaches past now, as reserve's reply head says it (the longest token
-- dimension's for tokens): an agent with no callers of its own learns it
-- too, so that should it lose Redis its local schedule starts after the
-- slots the others already hold.
-- Grants whose lease ended are reclaimed (sl_reclaim), as a reserve does.
--
-- Several deployments at once (one call where each would cost one: an
-- agent's heartbeats of one interval): KEYS are the 11 keys of each of m
-- deployments (all on one node, so not with Redis Cluster), ARGV as above
-- without busy; reply: the replies of each, in order.

local ALL = KEYS
local m = math.floor(#ALL / SL_NKEYS)
if m < 1 or #ALL ~= SL_NKEYS * m then
  return redis.error_reply('ERR sluice heartbeat: KEYS must be the ' .. SL_NKEYS .. ' keys of each deployment, got ' .. #ALL)
end
local id, window = ARGV[1], sl_uint(ARGV[2] or '')
if not id or id == '' or #id > 256 then return redis.error_reply('ERR sluice heartbeat: agent id must be 1..256 bytes') end
if not window or window < 1 then return redis.error_reply('ERR sluice heartbeat: window_ms must be a positive integer') end
local busy_req, busy_tok, tail_req, tail_tok, tail_share
local sent = {0, 0, 0, 0}
if ARGV[3] == 'busy' then
  if m > 1 then return redis.error_reply('ERR sluice heartbeat: busy takes one deployment') end
  busy_req, busy_tok = sl_uint(ARGV[4] or ''), sl_uint(ARGV[5] or '')
  if not busy_req or not busy_tok then
    return redis.error_reply('ERR sluice heartbeat: busy needs busy_requests_ms and busy_tokens_ms (non-negative integers)')
  end
  if ARGV[6] then
    for i = 1, 4 do
      sent[i] = sl_uint(ARGV[5 + i] or '')
      if not sent[i] then
        return redis.error_reply('ERR sluice heartbeat: busy takes no or four local counts (requests, tokens, input, output; non-negative integers)')
      end
    end
  end
  if ARGV[10] then
    tail_req, tail_tok, tail_share = sl_uint(ARGV[10]), sl_uint(ARGV[11] or ''), tonumber(ARGV[12] or '')
    if not tail_req or not tail_tok or not tail_share or tail_share <= 0 or tail_share > 1 then
      return redis.error_reply('ERR sluice heartbeat: a local tail is tail_requests_ms, tail_tokens_ms (non-negative integers) and its share (0 < share <= 1)')
    end
  end
end
local members = {}
for j = 1, m do
  local k = {}
  for x = 1, SL_NKEYS do k[x] = ALL[SL_NKEYS * (j - 1) + x] end
  KEYS = k
  local name, err = sl_deployment()
  if not name then return redis.error_reply(err) end
  members[j] = k
end

-- Agents dropped after their hold (gone: a crashed agent, or one away
-- from Redis for longer than the others held its share, which releases
-- no grant of Redis' from then on: lib/core/engine_call.c) send none of
-- the grants they were made: those still ahead (their records' field 13
-- names the agent; slots re-timed by the stretches since) are given back
-- (abandoned_total), and the sends the others hold are re-timed toward
-- the room they leave (sl_rate_changed, thinned: as far as every
-- dimension's held sends conform). Without it a killed agent's slots,
-- granted up to a max wait ahead, stayed empty in the schedule until
-- their time (fault-agent-killed: 77 % of the floor).
--
-- One factor is held back by the densest stretch after its anchor (the
-- dropped agent's part of each varies): sl_compress picks the anchor of
-- ten that frees the most, and some room stays unused all the same. A
-- later try found nothing: the grants made since fill the schedule's end
-- at the whole rate, and no one factor moves the middle without crowding
-- the end.
local function abandon(limits, now, gone)
  local set = {}
  for _, a in ipairs(gone) do set[a] = true end
  local st = sl_hash(KEYS[2])
  local flat = redis.call('HGETALL', KEYS[3])
  local ids = {}
  for i = 2, #flat, 2 do
    local f, _, slot, _, before = sl_record(flat[i])
    if f[13] and set[f[13]] and slot then
      local s = sl_retimed_slot(st, slot, before)
      if s and s > now then ids[#ids + 1] = flat[i - 1] end
    end
  end
  if #ids == 0 then return end
  for i = 1, #ids, 1000 do
    local part = {unpack(ids, i, math.min(i + 999, #ids))}
    redis.call('HDEL', KEYS[3], unpack(part))
    redis.call('ZREM', KEYS[4], unpack(part))
  end
  local dims = sl_schedule(limits, st, now)
  sl_rate_changed(st, dims, now, nil, nil, nil, 0.01)
  for _, d in ipairs(dims) do sl_dim_save(d, st) end
  sl_set(st, 'abandoned_total', sl_num(st, 'abandoned_total', 0) + #ids)
  sl_save_state(st)
end

-- One deployment (KEYS bound to it): the agent is counted (or leaves)
-- first: the shared rate then no longer holds back its share if it was
-- silent (sl_silent), and the schedule is converted to that rate before
-- its local tail is handed over, so the conversion cannot shorten the
-- hand-over.
local function beat()
  local limits = sl_limits()
  local now, now_us = sl_now(limits)
  local st
  if ARGV[3] == 'leave' then
    redis.call('ZREM', KEYS[9], id)
  else
    -- A hand-over from an agent this Redis does not know (it restarted
    -- empty, or lost the set): the agents it paced beside (1 / share of
    -- them) may still pace locally, unknown here, so nothing holds their
    -- shares. Each missing one is held as a silent stand-in (scored now)
    -- until its hold passes, or until an agent unknown here comes back
    -- and takes a stand-in's place: by a hand-over, or by a plain
    -- heartbeat (it had nothing to hand over, and is counted live from
    -- now on; its stand-in held its share a second time, a quarter of
    -- the rate for the 20 s hold, test_sim_handover).
    local unknown = limits.rpm and not redis.call('ZSCORE', KEYS[9], id)
    local fresh = unknown and tail_share
    redis.call('ZADD', KEYS[9], sl_fmt(sl_agent_due(limits, now)), id)
    if unknown and (fresh or not busy_req) then
      local stand = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', '+inf')
      local n = 0
      for _, a in ipairs(stand) do if string.sub(a, 1, 9) == '?unknown:' then n = n + 1 end end
      if n > 0 then
        for _, a in ipairs(stand) do
          if string.sub(a, 1, 9) == '?unknown:' then
            redis.call('ZREM', KEYS[9], a)
            break
          end
        end
      elseif fresh then
        -- (At most 1024: a share is 1 / the live agents as last seen.)
        local want = math.min(math.floor(1 / tail_share + 0.5), 1024)
        local live = redis.call('ZCOUNT', KEYS[9], '(' .. sl_fmt(now - window), '+inf')
        for i = 1, want - live do redis.call('ZADD', KEYS[9], sl_fmt(now), '?unknown:' .. i) end
      end
    end
  end
  -- Entries are kept as long as a silent agent's share is held back
  -- (silent_hold_ms, sl_silent); the reply counts the live ones.
  local keep = math.max(window, sl_agents_window(limits))
  -- (At most 64 a call: the rest go with the next heartbeat.)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', '(' .. sl_fmt(now - keep), 'LIMIT', '0', '64')
  if #gone > 0 then redis.call('ZREM', KEYS[9], unpack(gone)) end
  redis.call('PEXPIRE', KEYS[9], keep * 10)
  -- Grants whose lease ended (a killed agent's, or made by a call that
  -- ran after its agent gave up on it) are reclaimed here too, not only
  -- by the next reserve or settle: a fleet that stopped calling is left
  -- with none once the leases end (while it still heartbeats).
  local reclaimed = sl_reclaim(now, limits)
  if reclaimed > 0 and limits.rpm then
    redis.call('HINCRBY', KEYS[2], 'expired_total', reclaimed)
  end
  if #gone > 0 and limits.rpm then abandon(limits, now, gone) end
  if busy_req and limits.rpm then
    st = sl_hash(KEYS[2])
    -- Each dimension's effective rate before the return (the second part
    -- of <name>_rate): its share was held back while it was silent.
    local was = {}
    for i, spec in ipairs(SL_DIMS) do was[i] = tonumber(string.match(st[spec.f_rate] or '', '^[^:]+:([^:]+)')) end
    local dims, _, changed = sl_schedule(limits, st, now)
    local ra = sl_num(st, 'refund_after', 0)
    -- The tails still held, and the new one (recorded only where the
    -- schedule does not already reach past it). Beyond 32 (a fleet that
    -- keeps falling off Redis) the new tail is covered by the push of
    -- old: the schedule past all of it.
    local tails, live = sl_tails(st), {}
    for _, x in ipairs(tails) do
      if math.max(x[1], x[2]) > now then live[#live + 1] = string.format('%.3f:%.3f:%.6g', x[1], x[2], x[3]) end
    end
    local tail_on = tail_req and (tail_req > 0 or tail_tok > 0) and #live < 32
    if tail_req and not tail_on then
      busy_req, busy_tok = math.max(busy_req, tail_req), math.max(busy_tok, tail_tok)
    end
    -- Nothing left to release (only counts to report): the schedule
    -- stays as it is, as a plain heartbeat would leave it.
    local push = busy_req > 0 or busy_tok > 0
    local tail_held, pushed = false, false
    for _, d in ipairs(dims) do
      -- busy_tokens_ms covers every token dimension: the agent hands over
      -- the longest of its local token schedules (the safe side).
      local busy = d.i == 1 and busy_req or busy_tok
      local floor_tat = now + busy + d.burst / d.r
      if push and d.tat < floor_tat then
        d.tat = floor_tat
        changed, pushed = true, true
      end
      -- The hand-over's sends are committed: the committed tail reaches
      -- past them (common.lua, sl_dim_commit).
      if push and d.cg < floor_tat then
        sl_dim_commit(d, now, now, floor_tat - math.max(d.cg, now))
        changed = true
      end
      if changed then sl_dim_save(d, st) end
      if d.tat > ra then ra = d.tat end
      if tail_on and d.tat < now + (d.i == 1 and tail_req or tail_tok) then tail_held = true end
      sl_set(st, d.name .. '_obs', '')
    end
    if tail_held then
      live[#live + 1] = string.format('%.3f:%.3f:%.6g', now + tail_req, now + tail_tok, tail_share)
      -- Refunds wait until the tail has been sent: its sends are in no
      -- refund-bound queue.
      local e = now + math.max(tail_req, tail_tok)
      if e > ra then ra = e end
    end
    if #live > 0 or (st.tails or '') ~= '' then sl_set(st, 'tails', table.concat(live, ',')) end
    -- The agent is back: the share held for it is free, and the sends
    -- the others were granted at the held rate are re-timed toward the
    -- rate now (sl_rate_changed, as a higher limit the headers said: the
    -- return is known, not a reading that may swing back), after every
    -- local tail (a pushed hand-over counts as a tail at the whole rate). Without it they kept the held spacing for
    -- as long as the backlog granted at it lasted (test_partition's
    -- idle-hole: the fleet back at 95 % of the rate 2.7 s after the heal).
    -- Only when no tail is held: a share held for a tail still comes
    -- back where the tail ends in the schedule (sl_dim_hold).
    local old, rt = {}, nil
    for j, d in ipairs(#live == 0 and dims or {}) do
      local o = was[d.i]
      if o and o < d.r * (1 - 1e-9) then
        old[j] = o
        rt = rt or {}
        rt[d.name] = true
      end
    end
    if rt then
      -- The returning agent's own tail, where the schedule already reaches
      -- past it (not recorded): its local grants are still sent beside the
      -- held sends until its end, so none of them moves before it.
      -- The fleet's schedule as the agent last saw it (busy) is a tail of
      -- its own only where Redis' schedule did not reach that far (it
      -- lost its state: the push above moved it); otherwise those sends
      -- are the held sends the replay places, and counted again before
      -- them (at the whole rate) they pushed the schedule past them by
      -- as much: two agents back from a cut, the tokens schedule a minute
      -- past the last send granted (fault-cut-two).
      local extra = {{now + busy_req, now + busy_tok, pushed and 1 or 0}}
      if tail_on then extra[2] = {now + tail_req, now + tail_tok, tail_share} end
      sl_rate_changed(st, dims, now, old, rt, extra)
      for _, d in ipairs(dims) do sl_dim_save(d, st) end
    end
    local tail = now + math.max(busy_req, busy_tok, tail_on and math.max(tail_req, tail_tok) or 0)
    if tail > sl_num(st, 'obs_after', 0) then sl_set(st, 'obs_after', sl_fmt(tail)) end
    if sent[1] > 0 then sl_set(st, 'local_requests', sl_num(st, 'local_requests', 0) + sent[1]) end
    sl_set(st, 'refund_after', sl_fmt(ra))
    sl_save_state(st)
  end
  if not st then
    -- HGETs, not an HMGET: the commands the scripts call are the ACL
    -- deploy/acl.conf grants (docs/security.md), and a deployed ACL
    -- without HMGET would refuse every heartbeat.
    st = {pause_shift_ms = redis.call('HGET', KEYS[2], 'pause_shift_ms') or nil,
          retime = redis.call('HGET', KEYS[2], 'retime') or nil}
    for _, spec in ipairs(SL_DIMS) do
      if sl_num(limits, spec.per, 0) > 0 then st[spec.f_tat] = redis.call('HGET', KEYS[2], spec.f_tat) or nil end
    end
  end
  local backlog = {0, 0}
  -- The dimensions the deployment has (a field left from an old
  -- configuration says nothing), as stored: a rate change since the last
  -- reserve or settle is converted by the next one, not here.
  for i, spec in ipairs(SL_DIMS) do
    local b = sl_num(limits, spec.per, 0) > 0 and sl_num(st, spec.f_tat, 0) - now or 0
    local k = i == 1 and 1 or 2
    if b > 0 and sl_ceil(b) > backlog[k] then backlog[k] = sl_ceil(b) end
  end
  return {redis.call('ZCOUNT', KEYS[9], '(' .. sl_fmt(now - window), '+inf'), sl_shift_field(st), now_us,
          backlog[1], backlog[2]}
end

if m == 1 then return beat() end
local out = {}
for j = 1, m do
  KEYS = members[j]
  out[j] = beat()
end
return out
