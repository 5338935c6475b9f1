-- KEYS as a local: every helper below captures this variable, so a script
-- that decides across several deployments in one call (reserve's group
-- mode) re-points it at one member's 11 keys at a time.
local KEYS = KEYS

-- sluice: common helpers, prepended to every script at build time
-- (lua/embed.cmake). Nothing here touches Redis except through the
-- functions' explicit arguments.
--
-- Every script receives the same KEYS layout for one deployment, all with
-- the deployment's hash tag so the deployment lives in one cluster slot:
--   KEYS[1] sluice:{D}:limits       hash  configured limits (configure)
--   KEYS[2] sluice:{D}:state        hash  schedule and counters
--   KEYS[3] sluice:{D}:grants       hash  grant id -> "tokens,slot_ms,reserved_ms"
--   KEYS[4] sluice:{D}:leases       zset  grant id scored by expiry ms
--   KEYS[5] sluice:{D}:refq:requests list  refund bound queue, requests
--   KEYS[6] sluice:{D}:refq:tokens   list  refund bound queue, tokens
--   KEYS[7] sluice:{D}:daily        hash  UTC day usage
--   KEYS[8] sluice:{D}:retry        hash  retry budget window slices
--   KEYS[9] sluice:{D}:agents       zset  agent id scored by last heartbeat ms
--   KEYS[10] sluice:{D}:refq:input   list  refund bound queue, input tokens
--   KEYS[11] sluice:{D}:refq:output  list  refund bound queue, output tokens
-- Times are milliseconds on the Redis clock (TIME); replies carry relative
-- milliseconds only, plus the server time in microseconds for tests.
--
-- Lua 5.1 allows 200 locals in a chunk's main function, and each script is
-- one chunk: this file's locals, the script's own and, in the simulator's
-- build, two of tests/sim/sim_preamble.lua. settle.lua is at the limit
-- there: a helper only one script uses belongs in that script (reserve's
-- item_charge), and a new helper here takes a local from settle.lua or
-- moves into a table. Past the limit the script does not load: the gate's
-- simulator tests fail, and the scoreboard's verdicts all turn XWORSE.

-- A dry run (ESTIMATE, docs/redis-keys.md "Dry runs"): set from a last ARGV
-- '@dry' (before '@timed', if any) at the end of this file. Only reserve
-- honours it: it decides as it would and writes nothing; the helpers below
-- that write on their own (sl_reclaim, sl_rate_changed, sl_silent) write
-- nothing then either.
local SL_DRY = false

-- The kinds of a verdict (lib/core/vocab.h SLUICE_VERDICT_MAP; test_vocab
-- checks the numbers).
local SL_SHED, SL_GRANT, SL_DEFER = 0, 1, 2

-- A verdict of the reserve script, the one shape of plain and group calls
-- (docs/redis-keys.md "Verdicts"; lib/core/wire.c reads it):
--   {SL_GRANT, grant_id, wait_ms, tokens}
--   {SL_DEFER, reason, ask_in_ms}
--   {SL_SHED, reason, retry_after_ms}
-- after which a group call adds the member that decided a grant or a
-- deferral (sl_on_member), and a dry run the wait to the slot.
local function sl_verdict(kind, a, b, c)
  if kind == SL_GRANT then return {kind, a, b, c} end
  return {kind, a, b}
end

-- v decided on group member j: a copy (a verdict may be shared by the
-- items behind a deferred one) with the member added.
local function sl_on_member(v, j)
  -- Made whole (appending j to sl_verdict's table would grow it again).
  local kind = v[1]
  if kind == SL_GRANT then return {kind, v[2], v[3], v[4], j} end
  if kind == SL_DEFER then return {kind, v[2], v[3], j} end
  return {kind, v[2], v[3]}
end

local SUFFIX = {'limits', 'state', 'grants', 'leases', 'refq:requests',
                'refq:tokens', 'daily', 'retry', 'agents', 'refq:input', 'refq:output'}
local SL_NKEYS = #SUFFIX

-- The dimensions a deployment may have, in this order (docs/providers.md).
-- Each charges an item a cost at the grant: requests 1, tokens the
-- combined estimate (input + max output), input the input estimate, output
-- the max output. `refund` names the limits field that says whether a
-- settle corrects the dimension to the actual usage (the provider gives
-- back what was not used: Anthropic's output tokens) or only charges an
-- overrun (the provider charged the estimate at admission for good: Azure
-- and OpenAI's tokens, Anthropic's input). `q` is the refund-bound queue's
-- KEYS index, `reason` the shed reason when the dimension binds, `letter`
-- its name in settle feedback.
-- f_*: their state fields' names (<name>_tat, ...), spelled out: a
-- literal costs nothing per call, a concatenation does.
local SL_DIMS = {
  {name = 'requests', per = 'rpm', burst = 'burst_requests', q = 5, reason = 'rpm', letter = 'r',
   f_tat = 'requests_tat', f_granted = 'requests_granted', f_rate = 'requests_rate',
   f_adopted = 'requests_adopted', f_outside = 'requests_outside',
   f_cmt = 'requests_cmt', f_chi = 'requests_chi'},
  {name = 'tokens', per = 'tpm', burst = 'burst_tokens', q = 6, reason = 'tpm', letter = 't',
   refund = 'refund_tokens', f_tat = 'tokens_tat', f_granted = 'tokens_granted', f_rate = 'tokens_rate',
   f_adopted = 'tokens_adopted', f_outside = 'tokens_outside',
   f_cmt = 'tokens_cmt', f_chi = 'tokens_chi'},
  {name = 'input', per = 'itpm', burst = 'burst_input', q = 10, reason = 'itpm', letter = 'i',
   refund = 'refund_input', f_tat = 'input_tat', f_granted = 'input_granted', f_rate = 'input_rate',
   f_adopted = 'input_adopted', f_outside = 'input_outside',
   f_cmt = 'input_cmt', f_chi = 'input_chi'},
  {name = 'output', per = 'otpm', burst = 'burst_output', q = 11, reason = 'otpm', letter = 'o',
   refund = 'refund_output', f_tat = 'output_tat', f_granted = 'output_granted', f_rate = 'output_rate',
   f_adopted = 'output_adopted', f_outside = 'output_outside',
   f_cmt = 'output_cmt', f_chi = 'output_chi'},
}

-- The defaults configure writes for the fields a deployment's
-- configuration leaves out (docs/redis-keys.md): the providers' way of
-- counting (docs/providers.md: the combined and the input tokens are
-- charged at admission for good, the output tokens are corrected to the
-- actual output), AIMD, the retry budget, the breaker (off). The packed
-- limits (sl_limits) leave out every field that has its default here.
local SL_DEFAULTS = {
  tpm = 0, itpm = 0, otpm = 0, rpd = 0, tpd = 0, max_concurrency = 0, lease_ms = 120000,
  retry_ttl_ms = 10000, retry_min_per_s = 1, retry_percent = 10,
  aimd_decrease = 0.7, aimd_min_scale = 0.1, aimd_increase = 0.05, aimd_interval_ms = 5000,
  aimd_min_throttles = 3, aimd_window_ms = 10000,
  refund_tokens = 0, refund_input = 0, refund_output = 1, adapt_limits = 1, adapt_outside = 1,
  jitter_ms = 10, refund_lag_ms = 250, tokens_rule = 'sum',
  breaker_failure_ratio = 0, breaker_min_requests = 20, breaker_window_ms = 30000,
  breaker_break_ms = 30000, quota_hold_ms = 3600000,
  silent_ms = 0, agent_window_ms = 0,
  estimate_exact = 0, estimate_half_life_ms = 600000, estimate_learn_horizon_ms = -1,
}
local SL_DEFAULTS_MT = {__index = SL_DEFAULTS}

-- Returns the deployment name after checking that KEYS follow the layout
-- and share one hash tag; errors otherwise.
local function sl_deployment()
  local name = string.match(KEYS[1] or '', '^sluice:{([^{}]+)}:limits$')
  if not name then
    return nil, 'ERR sluice: KEYS[1] must be sluice:{<deployment>}:limits'
  end
  local prefix = 'sluice:{' .. name .. '}:'
  for i = 2, SL_NKEYS do
    if KEYS[i] ~= prefix .. SUFFIX[i] then
      return nil, 'ERR sluice: KEYS[' .. i .. '] must be ' .. prefix .. SUFFIX[i]
    end
  end
  return name
end

local function sl_hash(key)
  local flat = redis.call('HGETALL', key)
  local t
  if #flat > 16 then
    -- Room for 32 fields at once (Lua sizes a constructor's table for the
    -- fields it names, nil or not; filled one by one it would grow five
    -- times on the way): the state hash has 20 to 40.
    t = {f1 = nil, f2 = nil, f3 = nil, f4 = nil, f5 = nil, f6 = nil, f7 = nil, f8 = nil, f9 = nil, f10 = nil,
         f11 = nil, f12 = nil, f13 = nil, f14 = nil, f15 = nil, f16 = nil, f17 = nil, f18 = nil, f19 = nil,
         f20 = nil, f21 = nil, f22 = nil, f23 = nil, f24 = nil, f25 = nil, f26 = nil, f27 = nil, f28 = nil,
         f29 = nil, f30 = nil, f31 = nil, f32 = nil}
  else
    t = {}
  end
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

local function sl_num(t, field, default)
  local v = tonumber(t[field])
  if v == nil then return default end
  return v
end

-- Strict non-negative integer (as sent by clients): digits only, at most
-- 10^15 (SLUICE_AMOUNT_MAX, lib/core/vocab.h: the bound the agent and
-- libsluice accept, itself included; 16 digits, exact in a double).
local function sl_uint(s)
  if type(s) ~= 'string' or #s > 16 or not string.find(s, '^%d+$') then return nil end
  local v = tonumber(s)
  if v > 1e15 then return nil end
  return v
end

-- Signed integer, where -1 means "absent" in several arguments.
local function sl_int(s)
  if type(s) ~= 'string' or not string.match(s, '^%-?%d+$') or #s > 16 then return nil end
  return tonumber(s)
end

-- State writes go through sl_set so a script writes back only what moved.
local function sl_set(st, k, v)
  st[k] = v
  local dirty = st._dirty
  if not dirty then dirty = {}; st._dirty = dirty end
  dirty[k] = true
end

local function sl_fmt(x)
  return string.format('%.3f', x)
end

local function sl_ceil(x)
  -- Waits round up so a caller never starts before its slot.
  return math.ceil(x - 1e-6)
end

-- The Redis clock in ms (float) and µs (integer). limits.test_clock_offset_ms
-- shifts it for tests of day boundaries, or, written "=<ms>", replaces it
-- (a test that must not see the real time pass between its calls: a
-- verdict a loaded machine cannot change); configure accepts that field
-- only when asked explicitly, and production never sets it. Read once per call:
-- a group reserve decides many items on several members, and its grants
-- must share one now, or a slot decided late in a long call would be
-- released together with those decided at its start (the agent releases
-- every grant relative to the reply).
local SL_TIME_US
local function sl_now(limits)
  if not SL_TIME_US then
    local t = redis.call('TIME')
    SL_TIME_US = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local us = SL_TIME_US
  local off = limits.test_clock_offset_ms
  if type(off) == 'string' and string.byte(off, 1) == 61 then -- '=': the clock itself
    local at = tonumber(string.sub(off, 2))
    if at then us = math.floor(at * 1000 + 0.5) end
  else
    us = us + (tonumber(off) or 0) * 1000
  end
  return us / 1000, us
end

-- The day of the daily limits at t (ms): its number and the start of the
-- next one (ms since the epoch). UTC days, or those of a time zone
-- (daily_reset: Gemini's day starts at midnight Pacific time): then
-- limits.day_zone holds the zone's offsets as "off0,t1,off1,t2,off2,..."
-- (off_i in force from t_i on, ms), which the agent computes from the tz
-- database (Redis has none), so a day is 23 or 25 hours across DST.
local function sl_day(limits, t)
  local z = limits.day_zone
  if not z or z == '' then
    local day = math.floor(t / 86400000)
    return day, (day + 1) * 86400000
  end
  local function offset_at(u)
    local it = string.gmatch(z, '[^,]+')
    local off = tonumber(it())
    while true do
      local at, o = it(), it()
      if not at or not o or tonumber(at) > u then return off end
      off = tonumber(o)
    end
  end
  local day = math.floor((t + offset_at(t)) / 86400000)
  -- The next local midnight: its offset may differ from now's.
  local guess = (day + 1) * 86400000 - offset_at(t)
  return day, (day + 1) * 86400000 - offset_at(guess)
end

-- The schedule of one dimension: configured rate r0 (units per ms), the
-- effective rate r (r0 x rate_scale), burst B, and its state fields.
-- Callers start a little after their slot (timers, the network), so the
-- schedule tolerates a release jitter J: it plans against a burst of
-- B - r J, which keeps every send conformant to (B, r) when each is late by
-- up to J (any window of sends then fits B + r x its length). J is capped
-- at half the burst's duration so a burst is never planned away entirely.
-- spec: the SL_DIMS row of a shared dimension (its field names); a private
-- bucket (a lane's, a tenant's) has none and keeps no granted count.
local function sl_dim(name, per_minute, burst, scale, state, jitter_ms, spec)
  local r0 = per_minute / 60000
  local f_tat = spec and spec.f_tat or name .. '_tat'
  local tat = sl_num(state, f_tat, 0)
  -- One constructor, with room for what sl_dims and reserve add (Lua sizes
  -- a table for the fields a constructor names). cg and chi: the
  -- committed tail (sl_rate_changed; a schedule written before it had one
  -- reads as all committed, as it was treated then).
  local d = {name = name, r0 = r0, r = r0 * scale, burst = burst,
             jitter = math.min(jitter_ms or 0, 0.5 * burst / (r0 * scale)), f_tat = f_tat,
             tat = tat, granted = spec and sl_num(state, spec.f_granted, 0) or 0,
             cg = spec and sl_num(state, spec.f_cmt, tat) or tat, chi = spec and sl_num(state, spec.f_chi, 0) or 0,
             spec = spec or false, i = false, q = false, per = false, refund = false, tol = false, qc = false,
             share_burst = false}
  return d
end

-- Earliest time a send of cost c conforms: TAT minus the tolerance the
-- bucket has left for c, tat - (B - J r - c) / r. A cost above the
-- (jitter-reduced) burst B - J r is "big": it gets no tolerance, waits for
-- a full bucket plus the jitter (tat + J) so that sends before it that
-- start late cannot rob it, leaves the bucket in debt, and fences the slot
-- after it by J so that nothing can arrive before it. (reserve.lua's
-- item_slot and private_scan compute this inline, with d.tol = B - J r,
-- per item.)

-- The refund bound's queue (see sl_dim_refund) gets one entry per send
-- committed on the dimension: "s,K,C" with C the units granted before it
-- and K = s - C/r0, kept strictly decreasing in K from the front (an entry
-- whose K a later one reaches is dropped: the later one bounds at least as
-- much). A reserve call records its sends' slots and C (sl_dim_flush's qs
-- and d.qc, by send) and writes the queue once, at the end: the entries of
-- its own sends that a later one dominates are never written, and those
-- of the queue in Redis that its sends dominate are popped at once. (The
-- comparisons use the unrounded K, the entries 3 decimals: an entry is
-- dropped only when dominated exactly, so the queue bounds at least what
-- it did with rounded comparisons.)

-- The K of the i-th entry from the end of d's queue in Redis (1: the
-- last), or nil when it has fewer; read in chunks of 8 from the end, as
-- far as needed.
local function sl_dim_qk(d, ks, i)
  if ks[i] == nil and not ks.all then
    -- The indexes as text: Redis would format numbers with %.17g, at twice
    -- the cost of Lua's %d (the same digits).
    local raw = redis.call('LRANGE', d.q, string.format('%d', -(i + 7)), string.format('%d', -i))
    local m = #raw
    for j = m, 1, -1 do ks[i + m - j] = tonumber(string.match(raw[j], '^[^,]+,([^,]+)')) end
    if m < 8 then ks.all = true end
  end
  return ks[i]
end

-- Writes the queue entries of the n sends a call committed on d: slots
-- qs[1..n] (nondecreasing), the units granted before each d.qc[1..n]. A
-- queue beyond 4096 entries is pathological: it is dropped and refunds
-- stop until the schedule granted so far has passed.
local function sl_dim_flush(d, st, qs, n)
  if n == 0 then return end
  local qc, r0 = d.qc, d.r0
  -- The sends' entries that survive: from the newest back, each whose K
  -- is above every later one's.
  local keep, kk, nk, maxk = {}, {}, 0, nil
  for j = n, 1, -1 do
    local k = qs[j] - qc[j] / r0
    if not maxk or k > maxk then
      nk = nk + 1
      keep[nk], kk[nk], maxk = j, k, k
    end
  end
  -- The entries in Redis whose K the sends reach: popped.
  local ks, pop = {}, 0
  while true do
    local lk = sl_dim_qk(d, ks, pop + 1)
    if not lk or lk > maxk then break end
    pop = pop + 1
  end
  if pop > 0 then redis.call('RPOP', d.q, string.format('%d', pop)) end  -- text: as in sl_dim_qk
  local args = {}
  for t = nk, 1, -1 do
    local j = keep[t]
    args[#args + 1] = string.format('%.3f,%.3f,%.14g', qs[j], kk[t], qc[j])
  end
  if redis.call('RPUSH', d.q, unpack(args)) > 4096 then
    redis.call('DEL', d.q)
    local ra = sl_num(st, 'refund_after', 0)
    if d.tat > ra then sl_set(st, 'refund_after', sl_fmt(d.tat)) end
  end
end

-- The committed tail of a shared dimension (d.cg, state <name>_cmt): where
-- the sends granted so far end, each counted at the rate it was granted
-- at (cg = max(cg, slot) + cost / r per grant), and d.chi (<name>_chi)
-- the highest of those rates among the sends still ahead. TAT is never
-- below it; what TAT holds beyond it is debt a rate decrease converted
-- (sl_rate_changed), which no send occupies yet: reserve grants into it
-- only just in time, and an increase gives it back. Extends the tail by
-- dt ms of sends from `from` on (a grant's slot, a charge's now, a
-- hand-over's start) at the current rate.
local function sl_dim_commit(d, now, from, dt)
  local cg = d.cg
  if cg <= now then
    -- Nothing committed lies ahead any more: the rates of the old sends
    -- no longer matter.
    d.chi = d.r
  elseif d.r > d.chi then
    d.chi = d.r
  end
  if from > cg then cg = from end
  d.cg = cg + dt
end

-- Gives back `amount` units, as exactly as the provider's capped bucket
-- allows. Moving TAT back by amount/r would over-offer when future sends are
-- already scheduled: the real bucket caps at B before they run. With slots
-- monotone, TAT = max over event times u of (u + cost of sends from u on / r),
-- so giving back at time now (usage below the estimate) yields
--   max(TAT - amount/r, now, max over future sends j of (s_j + F_j / r))
-- where F_j is the cost of sends from j on. F_j = granted - C_j with C_j
-- the cumulative cost before j, so the max is max(K_j) + granted/r with
-- K_j = s_j - C_j/r: a sliding-window maximum kept in the queue (entries
-- "s,K,C" in grant order, K strictly decreasing; past entries dropped).
-- Cancelling a future grant g (cost c, cumulative cost before it cg) removes
-- its send: every send granted at or before g loses c from its F, so their
-- K drop by c/r (the queue is re-pruned), later ones keep theirs, and TAT
-- drops by up to c/r. Refunds are skipped while rate_scale < 1 or until
-- refund_after (after a rate change), which is conservative. since: the
-- earliest time the provider may have given the units back (nil: now; a
-- cancel gives back a send that never happened). Returns the units given
-- back.
local function sl_dim_refund(d, amount, now, qkey, st, scale, cg, since)
  if amount <= 0 or scale < 1 or now < sl_num(st, 'refund_after', 0) then return 0 end
  -- The provider gave the unused part back when the response ended, a
  -- little before this settle reached Redis (since: the earliest that may
  -- have been): the bound starts there, counting the sends made after it,
  -- or a refund that the provider's full bucket wasted then could be
  -- given out again now.
  local from = math.min(now, since or now)
  while true do
    local front = redis.call('LINDEX', qkey, 0)
    if not front or tonumber(string.match(front, '^([^,]+),')) > from then break end
    redis.call('LPOP', qkey)
  end
  local bound = from
  if cg then
    local raw = redis.call('LRANGE', qkey, '0', '-1')
    local kept, changed = {}, false
    for _, e in ipairs(raw) do
      local es, ek, ec = string.match(e, '^([^,]+),([^,]+),(.+)$')
      local ent = {es, tonumber(ek), ec}
      if tonumber(ec) <= cg then
        ent[2] = ent[2] - amount / d.r0
        changed = true
      end
      -- Keep K strictly decreasing: drop earlier entries now dominated.
      while #kept > 0 and kept[#kept][2] <= ent[2] do kept[#kept] = nil end
      kept[#kept + 1] = ent
    end
    if changed then
      redis.call('DEL', qkey)
      local args = {}
      for i, ent in ipairs(kept) do args[i] = ent[1] .. ',' .. sl_fmt(ent[2]) .. ',' .. ent[3] end
      if #args > 0 then redis.call('RPUSH', qkey, unpack(args)) end
    end
    if #kept > 0 then bound = math.max(bound, kept[1][2] + d.granted / d.r0) end
  else
    local front = redis.call('LINDEX', qkey, 0)
    if front then
      -- A dimension corrected at the end, whose provider's bucket is known
      -- to be deeper than the burst (caplb), wastes a give-back only
      -- beyond that depth: the bound moves back by the part of it beyond
      -- two bursts (one kept for the answers still out that will count
      -- more than they were charged).
      local slack = 0
      if d.refund then slack = math.max(0, sl_num(st, d.name .. '_caplb', 0) - 2 * d.burst) / d.r0 end
      bound = math.max(bound, tonumber(string.match(front, '^[^,]+,([^,]+)')) + d.granted / d.r0 - slack)
    end
  end
  local new = d.tat - amount / d.r0
  if new < bound then new = bound end
  if new >= d.tat then return 0 end
  local given = (d.tat - new) * d.r0
  d.tat = new
  -- The committed tail may not reach past the schedule (sl_rate_changed):
  -- lowered to it, it bounds the sends ahead at the limit's rate (the
  -- bound above is at r0), so it counts them as committed at r0.
  if d.cg > new then
    d.cg = new
    if d.r0 > d.chi then d.chi = d.r0 end
  end
  return given
end

-- Charges `amount` units learned after the fact (usage above the estimate),
-- at the tail of the schedule: conservative for everything granted later.
local function sl_dim_charge(d, amount, now)
  if amount <= 0 then return end
  local base = d.tat
  if now > base then base = now end
  d.tat = base + amount / d.r
  -- Usage, not a bet on the rate: the committed tail moves with it (a
  -- later tail is only more conservative, sl_rate_changed).
  sl_dim_commit(d, now, now, amount / d.r)
end

local function sl_dim_save(d, st)
  sl_set(st, d.f_tat, sl_fmt(d.tat))
  sl_set(st, d.spec.f_granted, d.granted)
  sl_set(st, d.spec.f_cmt, sl_fmt(d.cg))
  sl_set(st, d.spec.f_chi, string.format('%.9g', d.chi))
end

-- Additive increase of rate_scale: +increase per interval of quiet time
-- since the last change, up to 1. Returns the new scale (the schedule
-- follows it in sl_dims_sync).
local function sl_aimd_tick(limits, st, now)
  local scale = sl_num(st, 'rate_scale', 1)
  if scale >= 1 then return 1 end
  local interval = sl_num(limits, 'aimd_interval_ms', 5000)
  local changed = sl_num(st, 'scale_changed_at', now)
  local steps = math.floor((now - changed) / interval)
  if steps >= 1 then
    scale = scale + steps * sl_num(limits, 'aimd_increase', 0.05)
    if scale > 1 then scale = 1 end
    scale = tonumber(string.format('%.4f', scale))
    sl_set(st, 'rate_scale', string.format('%.4f', scale))
    sl_set(st, 'scale_changed_at', sl_fmt(changed + steps * interval))
  end
  return scale
end

-- After a change of the effective rate, the outstanding debt of each
-- dimension is kept in units, not in time, both ways: TAT - now scales by
-- old / new rate. On a decrease that keeps the wider tolerance of a slower
-- rate from becoming an over-offer: the sends already granted at the
-- faster spacing count at the slower rate. On an increase the debt shrinks
-- back, but never below what the sends already granted need at the new
-- rate: the committed tail (sl_dim_commit) counted at the new rate, at
-- most chi / new times as long (each of those sends was granted at a rate
-- of at most chi), and never above TAT as it was (a schedule built at a
-- slower rate bounds the faster one's). Without the give-back a cut of a
-- second (a 429's AIMD decrease, a false reading of others' use) stretched
-- a backlog of a minute by half for good: the sends already granted kept
-- their times and the stretch became a hole after them
-- (docs/redis-keys.md, "Rate changes"). The refund queues no longer
-- describe the schedule: drop them and refund nothing until the schedule
-- granted so far has passed.
local SL_RETIMES, SL_RETIME_LAG_MS = 32, 1000

-- Where a grant's slot is after the stretches made since it was granted
-- (its agent re-timed it, sl_rate_changed): before, the units of each
-- SL_DIMS dimension granted before it (its record). nil when it was
-- granted before the oldest stretch kept: where it went is not known.
local function sl_retimed_slot(st, slot, before)
  local r = st.retimes
  if not r or r == '' then return slot end
  local n = 0
  for i, u, at, k in string.gmatch(r, '(%d+),([^,]+),([^,]+),([^;]+)') do
    n = n + 1
    local b = before[tonumber(i)]
    if not b then return nil end
    if b < tonumber(u) then
      -- Granted before this stretch: moved by it (and by every later one).
      -- Before the oldest kept of a full list, older ones may be missing.
      if n == 1 and select(2, string.gsub(r, ';', '')) + 1 >= SL_RETIMES then return nil end
      -- An agent re-times what it still holds when it hears of the
      -- stretch, which may be up to a heartbeat later: a slot in that
      -- second may have gone out as granted. A compression is anchored a
      -- bucket's worth after its time (sl_compress), and an agent that
      -- hears of it late moves what it holds from then on: a slot sent
      -- later than placed, never earlier.
      at, k = tonumber(at), tonumber(k)
      if k > 1 and slot > at and slot <= at + SL_RETIME_LAG_MS then return nil end
      if slot > at then slot = at + (slot - at) * k end
    end
  end
  return slot
end

-- A grant record (reserve): tokens,slot,reserved,creq,ctok[,tenant[,input,
-- output,cin,cout[,raw[,out[,agent[,raw_cum,in_cum[,lane]]]]]]] (records
-- of older scripts end after ctok or the tenant; docs/redis-keys.md).
-- Returns its fields, the combined estimate c, the slot,
-- its cost per SL_DIMS index as charged (a combined c charged c to input
-- and output alike; the output the expected one where field 12 says it,
-- the tokens input + k where it says 't<k>'),
-- the units granted before it per SL_DIMS index, and its max output.
local function sl_record(rec)
  local f = {}
  for x in string.gmatch(rec .. ',', '([^,]*),') do f[#f + 1] = x end
  local c = tonumber(f[1])
  local max_out = tonumber(f[8]) or c
  local out, tok = max_out, c
  local o12 = f[12]
  if o12 and o12 ~= '' then
    if string.byte(o12) == 116 then
      -- 't<k>': the tokens dimension charged the input and k for the
      -- output (Bedrock's burndown, reserve.lua's item_charge).
      local k, i = tonumber(string.sub(o12, 2)), tonumber(f[7])
      if k and i then tok = i + k end
    else
      out = tonumber(o12) or max_out
    end
  end
  return f, c, tonumber(f[2]), {1, tok, tonumber(f[7]) or c, out},
         {tonumber(f[4]), tonumber(f[5]), tonumber(f[9]) or 0, tonumber(f[10]) or 0}, max_out
end

-- The local tails agents handed over on their return (heartbeat busy,
-- state field `tails`: "<requests end>:<tokens end>:<share>,..."): each
-- agent's local grants are still being released until its end (Redis
-- ms), paced at its share of the rate. Returns {{req, tok, share}, ...}.
local function sl_tails(st)
  local t = {}
  for a, b, c in string.gmatch(st.tails or '', '([^:,]+):([^:,]+):([^:,]+)') do
    a, b, c = tonumber(a), tonumber(b), tonumber(c)
    if a and b and c and c > 0 then t[#t + 1] = {a, b, c} end
  end
  return t
end

-- The sends granted and not yet due, where their agents hold them (the
-- grant records' slots, re-timed by the stretches since): a list of {s,
-- cost by SL_DIMS index} sorted by s, or nil when one cannot be placed.
local function sl_held_sends(st, now)
  local flat = redis.call('HGETALL', KEYS[3])
  -- OpenAI's combined tokens (tokens_rule max): a grant whose parts are
  -- known charged the tokens dimension the larger of its input and its
  -- max output (reserve.lua item_charge; settle's the same), not their
  -- sum. Replayed at the sum, every held send looked twice its cost, no
  -- compression conformed, and after a limit rose the queue kept the
  -- lower limit's spacing for as long as it lasted (openai-limit-rises).
  local tmax = redis.call('HGET', KEYS[1], 'tokens_rule') == 'max'
  local out = {}
  for i = 2, #flat, 2 do
    local f, c, slot, cost, before, max_out = sl_record(flat[i])
    if tmax and c and (f[8] or '') ~= '' then cost[2] = math.max(cost[3], max_out) end
    if c and slot then
      local s = sl_retimed_slot(st, slot, before)
      if not s then return nil end
      if s > now then out[#out + 1] = {s, cost, tonumber(flat[i - 1])} end
    end
  end
  -- Ties by grant id: HGETALL's order is the hash table's, which Redis'
  -- incremental rehashing moves on its own clock (a replay that took the
  -- sends at one slot in another order could judge them otherwise).
  table.sort(out, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return (x[3] or 0) < (y[3] or 0)
  end)
  return out
end

-- Replays the held sends of d through its schedule at its new rate, the
-- slots after `at` compressed K times toward it (those before stay as
-- granted), with tolerance tau (ms), from tat: the most its bucket can owe
-- at now (every send before now conformed, so its TAT is at most now plus
-- the tolerance and one send; sl_compress). Returns where the schedule
-- ends, or nil when a compressed send would not conform.
local function sl_replay(d, sends, K, at, tau, tat)
  local r, i = d.r, d.i
  for _, e in ipairs(sends) do
    local s = e[1]
    if s > at then
      s = at + (s - at) * K
      if s < tat - tau - 1e-6 then return nil end
    end
    if s > tat then tat = s end
    tat = tat + e[2][i] / r
  end
  return tat
end

-- How much of its tolerance and one send (hi) d's bucket can owe at now
-- and still have every held send conform at d's rate (sl_replay
-- uncompressed, tolerance tau): they were granted to conform with what it
-- owed, and a stretch since only spread them, so it owes no more. Below
-- hi when the sends just ahead are the ones that used the tolerance:
-- owed twice, they kept every compression from being found. hi when they
-- do not conform even owing nothing (compressions then fail as before).
local function sl_owed_at_most(d, sends, tau, now, hi)
  if sl_replay(d, sends, 1, now, tau, now + hi) or not sl_replay(d, sends, 1, now, tau, now) then return hi end
  local lo = 0
  for _ = 1, 16 do
    local mid = (lo + hi) / 2
    if sl_replay(d, sends, 1, now, tau, now + mid) then lo = mid else hi = mid end
  end
  return lo
end

-- The smallest compression K in [want, 1) under which every dimension's
-- held sends still conform at its new rate (sl_replay), the schedule's
-- end per dimension under it, and the time it is anchored at: the held
-- sends within a bucket's worth of now (the tolerance and one send of
-- the slowest dimension) keep their slots, the rest compress toward the
-- end of that. Returns 1 when there is no such K. The local tails agents
-- are still sending (sl_tails, and the extra ones given: {requests end,
-- tokens end, share}) keep their room: nothing moves before the last of
-- them ends, and each replay starts owing what they still send by then.
-- thin: sends were taken out (a dropped agent's): with none left, want
-- and where each replay starts.
local function sl_compress(st, dims, now, want, extra, thin)
  local sends = sl_held_sends(st, now)
  if not sends or (#sends == 0 and not thin) then return 1 end
  local tails, tail_end = sl_tails(st), now
  for _, x in ipairs(extra or {}) do tails[#tails + 1] = x end
  for _, x in ipairs(tails) do tail_end = math.max(tail_end, x[1], x[2]) end
  -- Per dimension, once: its tolerance (ms) and where its replay starts.
  local lead, tau, start = 0, {}, {}
  for j, d in ipairs(dims) do
    local cmax = 0
    for _, e in ipairs(sends) do if e[2][d.i] > cmax then cmax = e[2][d.i] end end
    tau[j] = math.max(0, d.burst - d.jitter * d.r) / d.r
    start[j] = math.max(now, math.min(d.tat, now + sl_owed_at_most(d, sends, tau[j], now, tau[j] + cmax / d.r)))
    for _, x in ipairs(tails) do
      local e = d.i == 1 and x[1] or x[2]
      if e > now then start[j] = start[j] + (e - now) * x[3] * d.r0 / d.r end
    end
    local l = tau[j] + cmax / d.r
    if l > lead then lead = l end
  end
  local at = tail_end + lead
  local function fits(K, a)
    local ends = {}
    for j, d in ipairs(dims) do
      ends[j] = sl_replay(d, sends, K, a, tau[j], start[j])
      if not ends[j] then return nil end
    end
    return ends
  end
  -- The smallest K for the anchor a (nil: none below 0.995).
  local function least(a)
    local e = fits(want, a)
    if e then return want, e end
    local lo, hi, best = want, 1, nil
    for _ = 1, 12 do
      local mid = (lo + hi) / 2
      e = fits(mid, a)
      if e then hi, best = mid, e else lo = mid end
    end
    if not best or hi > 0.995 then return nil end
    return hi, best
  end
  local K, ends = least(at)
  -- Thinned, the room is uneven (a dropped agent's part of each stretch
  -- varies), and one K for every held send is held back by the densest
  -- stretch: a later anchor leaves a dense start as it is and compresses
  -- the rest further. The anchor of ten that frees the most (the last
  -- send's distance from it times 1 - K).
  local last = #sends > 0 and sends[#sends][1] or at
  if thin and last > at then
    local gain, step = K and (last - at) * (1 - K) or 0, math.max(1000, (last - at) / 10)
    for a = at + step, last - step, step do
      local k, e = least(a)
      if k and (last - a) * (1 - k) > gain then gain, K, ends, at = (last - a) * (1 - k), k, e, a end
    end
  end
  if not K then return 1 end
  return K, ends, at
end

local function sl_rate_changed(st, dims, now, old_r, retime, extra, want)
  local ra = sl_num(st, 'refund_after', 0)
  -- The factor K by which the sends already granted are re-timed
  -- (docs/redis-keys.md, "Re-timed grants"), for a change of the
  -- dimensions in retime (a limit the provider's headers said, settle's
  -- observe: evidence, not a reading that may swing back). The agents hold
  -- those sends (their callers wait for their slots) and re-time them: a
  -- slot s becomes now + (s - now) K.
  --  * A stretch (K > 1): the largest old / new among them that slowed
  --    down with a schedule ahead, so what was granted at the faster rate
  --    is sent at the slower one instead of over-running it for as long
  --    as the backlog lasts.
  --  * A compression (K < 1), when they sped up: toward the largest old /
  --    new among them, but only as far as every dimension's held sends
  --    still conform at its new rate (sl_compress: a send moved earlier
  --    could crowd a dimension whose rate did not change), anchored a
  --    bucket's worth after now (at): a slot s after it becomes
  --    at + (s - at) K, those before keep theirs.
  --  * want (no rate changed): a compression toward it all the same, as
  --    far as the held sends conform: a dropped agent's grants were
  --    taken out of them (heartbeat.lua).
  --  * A ratio given for a dimension (retime[name] a number: old / new,
  --    settle's smoothed reading of others' use) stands for its o / r,
  --    whether or not its rate changed just now.
  local K, ends, at = 1, nil, now
  local faster = nil
  for i, d in ipairs(dims) do
    local o = old_r and old_r[i]
    local rt = retime and retime[d.name]
    local k = type(rt) == 'number' and rt or (o and rt and o / d.r)
    if k and d.tat > now then
      if k > 1 + 1e-9 and k > K then K = k end
      if k < 1 - 1e-9 and (not faster or k > faster) then faster = k end
    end
  end
  if K == 1 and (faster or want) and not SL_DRY then
    K, ends, at = sl_compress(st, dims, now, faster or want, extra, want ~= nil)
    at = at or now
  end
  for i, d in ipairs(dims) do
    local o = old_r and old_r[i]
    local cg, chi = d.cg, d.chi
    if K ~= 1 and want and ends and ends[i] then
      -- Thinned: the committed sends are the held ones, and end where their
      -- replay does (at no more than the rate: it saw to that).
      cg = ends[i]
    elseif K ~= 1 and cg > at then
      -- The committed sends ahead run at 1 / K of the rate they had.
      cg = at + (cg - at) * K
      chi = chi / K
    end
    if o and d.tat > now and math.abs(d.r - o) > 1e-12 * o then
      local t = now + (d.tat - now) * o / d.r
      -- What a conversion to a faster rate could not take back because the
      -- held sends keep their slots (below): credit, in ms, for the next
      -- one to a slower rate while those sends last (<name>_credit,
      -- "ms:until"). Lost, a paced neighbour's swings each way ratcheted
      -- the schedule past the held sends (azure-neighbour-leaves). Kept as
      -- ms, a swing there and back gives back the slower rate's share of
      -- the exact round trip (r slow / r fast of it): kept as units, the
      -- whole of it, and a paced neighbour's window reached 1.057x.
      local cf = d.name .. '_credit'
      local cr, cu = string.match(st[cf] or '', '^([^:]+):(.+)$')
      cr, cu = tonumber(cr) or 0, tonumber(cu) or 0
      if cu <= now then cr = 0 end
      if d.r > o then
        if cg > now then
          -- Compressed, the committed sends end at cg (sl_compress replayed
          -- them at the new rate); otherwise they keep the spacing of the
          -- rates they were granted at, at most chi.
          local tb = cg
          if K >= 1 then tb = now + (cg - now) * math.max(1, chi / d.r) end
          if t < tb then
            if K == 1 then cr, cu = cr + (tb - t), cg end
            t = tb
          end
        end
        if K <= 1 and t > d.tat then t = d.tat end
      elseif cr > 0 and K == 1 then
        local c = math.min(cr, t - d.tat)
        t, cr = t - c, cr - c
      end
      local cv = cr > 0 and (string.format('%.3f', cr) .. ':' .. sl_fmt(cu)) or ''
      if cv ~= (st[cf] or '') then sl_set(st, cf, cv) end
      d.tat = t
    elseif K < 1 and d.tat > at then
      -- A dimension whose rate stayed: its schedule ends where the
      -- compressed held sends end at the latest (thinned: where they end).
      d.tat = want and cg or at + (d.tat - at) * K
    end
    if K ~= 1 then
      d.cg, d.chi = cg, chi
      -- Never before the committed sends: they hold their new slots.
      if d.tat < cg then d.tat = cg end
      if ends and ends[i] and d.tat < ends[i] then d.tat = ends[i] end
    end
    if d.tat > ra then ra = d.tat end
  end
  if K ~= 1 then
    -- The running sum of log K and the time of the latest re-timing: an
    -- agent applies the change of the sum since it last looked (pause_shift
    -- is the same idea for pauses, added instead of multiplied).
    local lg = string.match(st.retime or '', '^([^:]+):') or 0
    sl_set(st, 'retime', string.format('%.12g:%s', tonumber(lg) + math.log(K), sl_fmt(at)))
    -- The last SL_RETIMES re-timings, for settle to place a grant's slot
    -- where its agent sent it (sl_retimed_slot): "i,u,at,K;..." with u
    -- the units of SL_DIMS[i] granted before it.
    local d1 = dims[1]
    local list = {}
    for e in string.gmatch(st.retimes or '', '[^;]+') do list[#list + 1] = e end
    list[#list + 1] = string.format('%d,%.14g,%s,%.9g', d1.i or 1, d1.granted, sl_fmt(at), K)
    while #list > SL_RETIMES do table.remove(list, 1) end
    sl_set(st, 'retimes', table.concat(list, ';'))
    -- Slots are granted in order after the last one, which moved too.
    local ls = sl_num(st, 'last_slot', 0)
    if ls > at then sl_set(st, 'last_slot', sl_fmt(at + (ls - at) * K)) end
  end
  sl_set(st, 'refund_after', sl_fmt(ra))
  if not SL_DRY then redis.call('DEL', KEYS[5], KEYS[6], KEYS[10], KEYS[11]) end
  return K
end

-- The pause_shift_ms field of the reserve and settle replies: the running
-- pause shift in ms, followed, once the schedule was ever stretched, by
-- ":<sum of log K>:<time of the latest stretch, ms>" (sl_rate_changed).
-- A reader that takes the leading integer only sees the pause shift.
local function sl_shift_field(st)
  local shift = sl_ceil(sl_num(st, 'pause_shift_ms', 0))
  -- ceil(-1e-6) is -0, which a string shows as "-0".
  if shift == 0 then shift = 0 end
  if not st.retime or st.retime == '' then return shift end
  return shift .. ':' .. st.retime
end

-- Reclaims grants whose lease expired (a crashed or silent worker). Their
-- estimate stays charged. Returns the number reclaimed (in a dry run: the
-- number it would reclaim, left in place).
local function sl_reclaim(now, limits)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', '0', '256')
  if #ids == 0 or SL_DRY then return #ids end
  -- A lease runs from the grant's slot where its agent holds it: a
  -- stretch since (sl_rate_changed) moved that slot later without
  -- touching the lease, and a grant stretched further than lease_ms would
  -- be reclaimed before it was sent (its settle then unknown, the
  -- concurrency cap free while it runs). Such a lease is moved to its
  -- re-timed slot's, never earlier; one that cannot be placed is
  -- reclaimed as before.
  local rt = redis.call('HGET', KEYS[2], 'retimes')
  if rt and rt ~= '' then
    local lease_ms = sl_num(limits, 'lease_ms', 120000)
    local gone, moved = {}, {}
    for _, id in ipairs(ids) do
      local due
      local rec = redis.call('HGET', KEYS[3], id)
      if rec then
        local _, c, slot, _, before = sl_record(rec)
        local s = c and slot and sl_retimed_slot({retimes = rt}, slot, before)
        if s and s + lease_ms > now then due = s + lease_ms end
      end
      if due then
        moved[#moved + 1] = string.format('%d', math.ceil(due))
        moved[#moved + 1] = id
      else
        gone[#gone + 1] = id
      end
    end
    if #moved > 0 then redis.call('ZADD', KEYS[4], unpack(moved)) end
    ids = gone
    if #ids == 0 then return 0 end
  end
  redis.call('HDEL', KEYS[3], unpack(ids))
  redis.call('ZREM', KEYS[4], unpack(ids))
  return #ids
end

-- The retry budget window: ttl split into 10 slices. Returns the sum of
-- live slices, the current slice index, and deletes dead slices.
local function sl_retry_window(limits, now)
  local slice = sl_num(limits, 'retry_ttl_ms', 10000) / 10
  local cur = math.floor(now / slice)
  local flat = redis.call('HGETALL', KEYS[8])
  local sum, dead = 0, {}
  for i = 1, #flat, 2 do
    local idx = tonumber(flat[i])
    if idx and idx > cur - 10 then
      sum = sum + tonumber(flat[i + 1])
    else
      dead[#dead + 1] = flat[i]
    end
  end
  if #dead > 0 then redis.call('HDEL', KEYS[8], unpack(dead)) end
  return sum, cur
end

-- Units: a success deposits `percent` units, a retry withdraws 100, the
-- floor is min_per_s x ttl_s x 100 (Finagle's RetryBudget in integers).
local function sl_retry_reserve(limits)
  return sl_num(limits, 'retry_min_per_s', 1) * sl_num(limits, 'retry_ttl_ms', 10000) / 1000 * 100
end

local function sl_save_state(st)
  local args = {}
  for k in pairs(st._dirty or {}) do
    args[#args + 1] = k
    args[#args + 1] = st[k]
  end
  if #args > 0 then redis.call('HSET', KEYS[2], unpack(args)) end
end

-- Adds counters to the state (written by sl_save_state in the same HSET,
-- since the script holds the whole hash already).
local function sl_count(st, counts)
  for k, v in pairs(counts) do
    if v ~= 0 then sl_set(st, k, sl_num(st, k, 0) + v) end
  end
end

-- The deployment's limits as the scripts read them. configure writes
-- them twice: field by field (what redis-cli HGETALL shows, and what
-- status reports) and packed into one field, `packed`: a JSON object with
-- "v": 1, the fields whose value is not their SL_DEFAULTS default, and the
-- lanes' and tenants' plan ("plan", see sl_plan; absent when there is
-- none). The packed form is what the other scripts read: one HGET and a
-- JSON decode in C instead of a hash of 30-odd fields turned into Lua
-- strings and parsed on every use. The absent fields read as their
-- defaults (a metatable). test_clock_offset_ms (tests only) is never
-- packed: it is read from its own field, as tests set it there. A
-- deployment configured by an older configure has no packed field (or
-- one of another version): then the hash itself is read, as before.
-- Returns the limits table (without `rpm` when the deployment is not
-- configured).
local function sl_limits()
  local packed = redis.call('HGET', KEYS[1], 'packed')
  if packed then
    local ok, l = pcall(cjson.decode, packed)
    if ok and type(l) == 'table' and l.v == 1 then
      l.test_clock_offset_ms = redis.call('HGET', KEYS[1], 'test_clock_offset_ms') or nil
      l._packed = true
      return setmetatable(l, SL_DEFAULTS_MT)
    end
  end
  return sl_hash(KEYS[1])
end

-- The deployment's limits and state, or an error for an unknown one. raw:
-- the limits hash as stored (strings), for status.
local function sl_load(raw)
  local name, err = sl_deployment()
  if not name then return nil, nil, nil, err end
  local limits
  if raw then limits = sl_hash(KEYS[1]) else limits = sl_limits() end
  if limits.rpm == nil then
    return nil, nil, nil, "ERR sluice: unknown deployment '" .. name .. "' (no limits in Redis; configure it first)"
  end
  return name, limits, sl_hash(KEYS[2])
end

-- The agent a script runs for: an agent's calls say who they are with
-- "@<agent id>/<g>" before their ARGV, taken off here (the scripts then
-- read ARGV as documented; tests and other callers leave it out): a proof
-- of life, and the promise of its next call within g ms (without /<g>:
-- silent_ms). See sl_silent.
local SL_AGENT, SL_PROMISE = false, nil
if type(ARGV[1]) == 'string' and string.sub(ARGV[1], 1, 1) == '@' and ARGV[1] ~= '@timed' then
  local a = table.remove(ARGV, 1)
  local id, g = string.match(a, '^@(.+)/(%d+)$')
  if id then SL_AGENT, SL_PROMISE = id, tonumber(g) else SL_AGENT = string.sub(a, 2) end
end

-- The time until which an agent that calls now is counted live (the score
-- in the agents set): now plus its promise, at most silent_ms.
local function sl_agent_due(limits, now)
  local silent = sl_num(limits, 'silent_ms', 0)
  local g = SL_PROMISE or silent
  if g > silent then g = silent end
  return now + g
end

-- Partition safety (docs/operations.md, "Part of the fleet loses Redis").
-- An agent that loses Redis paces locally at its share of the rate (one
-- over the live agents); the agents still on Redis keep that share out of
-- the shared schedule while it is silent. The agents set scores each
-- agent with the time its last call promised the next one by
-- (sl_agent_due): silent once that has passed, its share held back while
-- it passed less than silent_hold_ms ago (at least agent_window_ms, within
-- which an agent counts as live for the fallback share). Then k silent
-- agents of N take k/N locally and the shared schedule runs at (N - k)/N:
-- together never more than the rate. Returns the share held back (0 when
-- silent_ms or agent_window_ms is 0: configured by an older agent), the
-- agents within the hold and the silent ones, once per call and
-- deployment.
--
-- A reserve or settle of an agent proves it alive as a heartbeat does, but
-- only while Redis still counts it live: an agent taken for silent comes
-- back through a heartbeat (after a reconnect, the hand-over of its local
-- tail), so a call it sent before the partition that arrives late (TCP
-- delivers what a black hole held) cannot release its share while it
-- still paces locally. The score is written when it moves by an eighth of
-- the promise or more.
local SL_SILENT = {}
local function sl_agents_window(limits)
  return math.max(sl_num(limits, 'agent_window_ms', 0), sl_num(limits, 'silent_hold_ms', 0))
end

local function sl_silent(limits, now)
  local key = KEYS[9]
  local m = SL_SILENT[key]
  if m then return m[1], m[2], m[3] end
  local window, silent = sl_agents_window(limits), sl_num(limits, 'silent_ms', 0)
  local share, live, quiet = 0, 0, 0
  if sl_num(limits, 'agent_window_ms', 0) > 0 and silent > 0 and silent < window then
    local self_quiet = false
    if SL_AGENT and SL_AGENT ~= '' and #SL_AGENT <= 256 then
      local due, was = sl_agent_due(limits, now), tonumber(redis.call('ZSCORE', key, SL_AGENT))
      -- (a dry run writes nothing: ESTIMATE)
      if not SL_DRY and was and was > now and math.abs(due - was) >= (due - now) / 8 then
        redis.call('ZADD', key, sl_fmt(due), SL_AGENT)
        redis.call('PEXPIRE', key, window * 10)
      end
      self_quiet = was ~= nil and was <= now and was > now - window
    end
    local since = '(' .. sl_fmt(now - window)
    live = redis.call('ZCOUNT', key, since, '+inf')
    if live > 1 then quiet = redis.call('ZCOUNT', key, since, sl_fmt(now)) end
    -- A silent agent's own late call (sent before it fell silent; it
    -- decided those callers locally when no answer came, so what it is
    -- granted now is never sent) is not held back from its own share:
    -- when Redis itself stalled (SIGSTOP, a long fork) every agent is
    -- silent when the calls queued meanwhile run, and at the 1 % left
    -- each of their grants would push the schedule 100 slots ahead, for
    -- good (measured: the soak's stop faults, the fleet at half the rate).
    -- What others are shown (status) still holds it back.
    local q = self_quiet and quiet - 1 or quiet
    -- Never all of it: a status call must not divide by nothing when
    -- every agent fell silent.
    if q > 0 then share = math.min(q / live, 0.99) end
  end
  SL_SILENT[key] = {share, live, quiet}
  return share, live, quiet
end

-- The part of dimension d's rate held back for silent agents and for the
-- local tails agents handed over (d.hs, sl_dims), per ms (0 when none is).
local function sl_held(d, scale)
  local h = d.hs
  if h == nil then
    local m = SL_SILENT[KEYS[9]]
    h = m and m[1] or 0
  end
  return h > 0 and h * d.r0 * scale or 0
end

-- The share of dimension d held back for the slots still to come: the
-- silent agents' (silent, sl_silent) and that of every local tail whose
-- end the schedule (d.tat) has not reached. The shared schedule keeps
-- running beside a tail at the rest of the rate, and has it all once its
-- TAT passes the tail's end: the hold ends in the schedule's time, where
-- the tail does, not at the return (a push past the whole tail would
-- leave the rest of the rate unused for its length). When nothing is left
-- (every share held: the tails of all agents after a restart of Redis),
-- the schedule moves to the first tail's end, where a share comes free.
-- Returns the share (at most 0.99) and whether d.tat moved.
local function sl_dim_hold(d, tails, silent)
  local moved = false
  while true do
    local h, first = silent, nil
    for _, x in ipairs(tails) do
      local e = d.i == 1 and x[1] or x[2]
      if e > d.tat then
        h = h + x[3]
        if not first or e < first then first = e end
      end
    end
    if h < 0.99 or not first then return math.min(h, 0.99), moved end
    d.tat, moved = first, true
    if d.cg < first then d.cg = first end
  end
end

-- The rate the fleet runs a shared dimension at (units per ms): its limit
-- (the configured one, or the lower one a provider's headers reported,
-- <name>_adopted) less what others are seen to use of the same key
-- (<name>_outside, per minute, see settle's observe()), times the AIMD
-- scale, and never below aimd_min_scale of the limit; then less the share
-- held back for silent agents (sl_silent).
local function sl_dim_target(d, limits, st, scale)
  local outside = sl_num(st, d.spec.f_outside, 0) / 60000
  local r = (d.r0 - outside) * scale
  local floor = d.r0 * sl_num(limits, 'aimd_min_scale', 0.1)
  if r < floor then r = floor end
  -- Less the silent agents' share (sl_held; the estimate of others' use
  -- leaves out what that share lets them send, settle's observe()), and
  -- never quite nothing.
  local held = sl_held(d, scale)
  if held > 0 then r = math.max(r - held, 0.01 * d.r0) end
  -- A request count per window (requests_window_ms W, Azure: "evaluated
  -- over 1 s or 10 s"): one send at a time (burst 1, no jitter tolerance,
  -- sl_dim_jitter), spaced so that any W ms holds at most the window's
  -- count even when each send starts up to jitter_ms late: W + J over the
  -- count, the rate times W / (W + J).
  local w = d.i == 1 and sl_num(limits, 'requests_window_ms', 0) or 0
  if w > 0 then r = r * w / (w + sl_num(limits, 'jitter_ms', 10)) end
  return r
end

-- The release jitter the schedule of d tolerates (sl_dim): none for a
-- request count per window, whose spacing covers it (sl_dim_target).
local function sl_dim_jitter(d, limits, j)
  if d.i == 1 and sl_num(limits, 'requests_window_ms', 0) > 0 then return 0 end
  return math.min(j, 0.5 * d.burst / d.r)
end

-- The shared dimensions of the deployment (requests first, then those of
-- tokens, input and output it has), each an sl_dim plus: spec (its SL_DIMS
-- row), i (its index there), q (its refund-bound queue), refund (settles
-- correct it to the actual usage), per (the configured per-minute limit).
-- A limit adopted from the provider's headers scales the burst with it,
-- and so does the share held back (d.hs, sl_dim_hold: with now).
local function sl_dims(limits, st, scale, now)
  local j = sl_num(limits, 'jitter_ms', 10)
  local silent = now and sl_silent(limits, now) or 0
  local tails = now and st.tails and sl_tails(st) or {}
  local dims = {}
  for i, spec in ipairs(SL_DIMS) do
    local per = sl_num(limits, spec.per, 0)
    if per > 0 then
      local lim, burst = per, sl_num(limits, spec.burst, 1)
      local adopted = sl_num(st, spec.f_adopted, 0)
      if adopted > 0 and adopted < per then
        lim = adopted
        burst = math.max(1, burst * adopted / per)
      end
      -- A request count per window sends one at a time; the configured
      -- burst still sets the tenants' share tolerance (reserve, fair.tau).
      local share_burst = burst
      if i == 1 and sl_num(limits, 'requests_window_ms', 0) > 0 then burst = 1 end
      local d = sl_dim(spec.name, lim, burst, 1, st, j, spec)
      d.spec, d.i, d.q, d.per, d.share_burst = spec, i, KEYS[spec.q], per, share_burst
      local held
      held, d.moved = sl_dim_hold(d, tails, silent)
      d.hs = held
      if held > 0 then d.burst = math.max(1, burst * (1 - held)) end
      d.refund = spec.refund ~= nil and sl_num(limits, spec.refund, 0) == 1
      d.r = sl_dim_target(d, limits, st, scale)
      d.jitter = sl_dim_jitter(d, limits, j)
      dims[#dims + 1] = d
    end
  end
  return dims
end

-- The dimension named name among dims, or nil.
local function sl_dim_of(dims, name)
  for _, d in ipairs(dims) do if d.name == name then return d end end
  return nil
end

-- The schedule remembers the rates it was built at (<name>_rate, "r0:r"
-- per ms); a change since (AIMD, a limit adopted from the headers, others'
-- use of the key, a new configuration) converts it here, once; a decrease
-- of a dimension in retime also re-times the sends already granted
-- (sl_rate_changed). Returns true when it converted (the caller then saves
-- every dimension).
local function sl_dims_sync(st, dims, now, retime)
  local old, changed = {}, false
  -- The share held back (d.hs: for silent agents and local tails) when
  -- each dimension was last converted: the third part of <name>_rate
  -- (before it had one, the deployment's silent_share).
  local held_was0 = sl_num(st, 'silent_share', 0)
  for i, d in ipairs(dims) do
    local f = d.spec.f_rate
    local r0, r, h = string.match(st[f] or '', '^([^:]+):([^:]+):?(.*)$')
    r0, r, h = tonumber(r0), tonumber(r), tonumber(h) or held_was0
    local by_held = math.abs((d.hs or 0) - h) > 1e-9
    if d.moved then changed = true end
    if not r0 or not r or by_held or math.abs(r0 - d.r0) > 1e-9 * d.r0 or math.abs(r - d.r) > 1e-9 * d.r then
      if r0 and r then
        -- A change of the share held back keeps the schedule's times both
        -- ways: what was granted so far was granted at the rate then, and
        -- a silent agent's local pacing starts where that schedule ends
        -- (it waits out its promise first, lib/core/engine_local.c), so
        -- from there the shared rate and the local shares add up to the
        -- rate; its burst shrinks with the rate (sl_dims), so the
        -- tolerance stays the same. When an agent comes back, the share
        -- stays held for the slots its local tail still covers
        -- (sl_dim_hold) and comes back where the tail ends: there the
        -- schedule's TAT, kept in time, counts the tail's sends with the
        -- shared ones (what each ran at adds up to the rate), so the rest
        -- of the rate is used beside the tail and all of it after.
        if not by_held then old[i] = r end
        changed = true
      end
      sl_set(st, f, string.format('%.12g:%.12g:%.6g', d.r0, d.r, d.hs or 0))
    end
  end
  -- A ratio asked for (settle: others' use) re-times only what is held.
  local asked = false
  for _, d in ipairs(dims) do
    local k = retime and retime[d.name]
    if type(k) == 'number' and math.abs(k - 1) > 1e-9 and d.tat > now then asked = true end
  end
  local K = 1
  if changed or asked then K = sl_rate_changed(st, dims, now, old, retime) end
  return changed, K
end

-- Sets every dimension's effective rate from the state as it is now (after
-- the caller changed rate_scale or a dimension's outside use), converting
-- the outstanding debt (see sl_rate_changed).
local function sl_dims_retarget(limits, st, dims, scale, now)
  for _, d in ipairs(dims) do
    d.r = sl_dim_target(d, limits, st, scale)
    d.jitter = sl_dim_jitter(d, limits, sl_num(limits, 'jitter_ms', 10))
  end
  return sl_dims_sync(st, dims, now)
end

-- The dimensions at the current effective rate, after the lazy AIMD
-- increase. Returns dims, scale, and whether the schedule was converted.
local function sl_schedule(limits, st, now)
  local scale = sl_aimd_tick(limits, st, now)
  local dims = sl_dims(limits, st, scale, now)
  local changed = sl_dims_sync(st, dims, now)
  return dims, scale, changed
end

-- An item's token estimate as sent: "c" (combined: input plus max output)
-- or "i+o" (input, max output; c = i + o). Returns c, i, o and the text of
-- i and o as sent (for the grant record: '' for both when c came alone,
-- which tells settle the parts are unknown), or nil. A plain c charges c
-- to each of input and output too: an upper bound of both, so a caller
-- that does not split its estimate is never under-charged.
--
-- A leading '=' marks an estimate the caller counted exactly (its own
-- tokenizer): it is charged as sent, never calibrated, and teaches the
-- calibration nothing. The sixth value says so (true), else false. A
-- leading '~' marks one that leaves part of the prompt out or guesses it
-- (images, audio, files): calibrated like any other, but it teaches
-- nothing (a mix of such requests would set the ratio of every request to
-- theirs). The seventh value says so.
local function sl_tokens(s)
  if type(s) ~= 'string' then return nil end
  local exact, partial = false, false
  if string.byte(s, 1) == 61 then  -- '=' (vocab.h's EXACT marker)
    exact = true
    s = string.sub(s, 2)
  elseif string.byte(s, 1) == 126 then  -- '~' (vocab.h's PARTIAL marker)
    partial = true
    s = string.sub(s, 2)
  end
  local c = sl_uint(s)
  if c then return c, c, c, '', '', exact, partial end
  local is, os = string.match(s, '^(%d+)%+(%d+)$')
  local i, o = sl_uint(is), sl_uint(os)
  if not i or not o then return nil end
  return i + o, i, o, is, os, exact, partial
end

-- ---- calibrated estimates (docs/redis-keys.md, "Calibrated estimates") ----
-- sluice's own estimate of a prompt (characters / 4) is a first guess; the
-- provider's count (usage.prompt_tokens) comes back with every settle.
-- settle keeps the last SL_CAL_N ratios count / estimate of the estimate's
-- input part (the only part that is a guess: max output is charged as
-- given) in the state (estimate_ratios, decayed to estimate_ratio_at) and
-- their SL_CAL_Q quantile (estimate_ratio): the safe side, not the mean.
-- Without news the ratio decays toward 1 with a half-life of
-- estimate_half_life_ms. reserve charges each estimated input part times
-- the ratio in force, in every dimension that charges it. Until the
-- deployment has SL_CAL_LEARN fresh ratios (within a half-life) it is
-- learning: an item that teaches is granted no further ahead than
-- estimate_learn_horizon_ms (when that is >= 0), so the first settles'
-- news reaches nearly every grant instead of a schedule reserved minutes
-- ahead at the first guess.
local SL_CAL_N, SL_CAL_Q, SL_CAL_LEARN = 32, 0.9, 4
local SL_CAL_MIN, SL_CAL_MAX = 0.05, 20

-- The ratio in force at now of the ratios kept under pfx ('estimate':
-- <pfx>_ratios, <pfx>_ratio, <pfx>_ratio_at), and whether the deployment
-- is learning it.
local function sl_ratio(limits, st, now, pfx)
  local q = tonumber(st[pfx .. '_ratio'])
  local at = tonumber(st[pfx .. '_ratio_at'])
  if not q or not at then return 1, true, 0 end
  local h = sl_num(limits, 'estimate_half_life_ms', 600000)
  local age = now - at
  if age < 0 then age = 0 end
  local r = q
  -- As stored (4 decimals), so that every call in a moment reads one ratio.
  if h > 0 then r = tonumber(string.format('%.4f', 1 + (q - 1) * math.pow(0.5, age / h))) end
  local n = 0
  local ring = st[pfx .. '_ratios']
  if ring and ring ~= '' then n = select(2, string.gsub(ring, ',', '')) + 1 end
  return r, n < SL_CAL_LEARN or age > h, n
end

local function sl_cal(limits, st, now) return sl_ratio(limits, st, now, 'estimate') end

-- Adds the ratios of news (a list, each clamped to [lo, hi]) at now: the
-- kept ones decay to now, the news joins them, the oldest beyond SL_CAL_N
-- drop, and the quantile qt (nil: SL_CAL_Q) is taken again. Writes
-- <pfx>_ratios, <pfx>_ratio and <pfx>_ratio_at.
local function sl_ratio_learn(limits, st, now, news, pfx, lo, hi, qt)
  local h = sl_num(limits, 'estimate_half_life_ms', 600000)
  local f = 1
  local at = tonumber(st[pfx .. '_ratio_at'])
  if at and h > 0 and now > at then f = math.pow(0.5, (now - at) / h) end
  local kept = {}
  for x in string.gmatch(st[pfx .. '_ratios'] or '', '[^,]+') do
    local v = tonumber(x)
    if v then kept[#kept + 1] = 1 + (v - 1) * f end
  end
  for _, v in ipairs(news) do
    if v < lo then v = lo elseif v > hi then v = hi end
    kept[#kept + 1] = v
  end
  local first = #kept - SL_CAL_N + 1
  if first < 1 then first = 1 end
  local ring, sorted = {}, {}
  for k = first, #kept do
    local v = tonumber(string.format('%.4f', kept[k]))
    ring[#ring + 1] = string.format('%.4f', v)
    sorted[#sorted + 1] = v
  end
  table.sort(sorted)
  local q = sorted[math.ceil((qt or SL_CAL_Q) * #sorted)]
  sl_set(st, pfx .. '_ratios', table.concat(ring, ','))
  sl_set(st, pfx .. '_ratio', string.format('%.4f', q))
  sl_set(st, pfx .. '_ratio_at', sl_fmt(now))
end

local function sl_cal_learn(limits, st, now, news)
  sl_ratio_learn(limits, st, now, news, 'estimate', SL_CAL_MIN, SL_CAL_MAX)
end

-- ---- expected output (docs/redis-keys.md, "Expected output") -------------
-- With output_charge 'expected' (Anthropic's current rule: OTPM counts
-- the tokens generated, max_tokens does not factor in), the output
-- dimension charges an item its max output times the ratio in force of
-- actual / max output (output_ratio: the SL_CAL_Q quantile of the last
-- SL_CAL_N answers, decaying toward 1 without news), rounded up, at least
-- 1; the settle corrects it to the actual either way (refund_output): a
-- long answer is charged at the schedule's tail as debt. Until
-- SL_CAL_LEARN fresh ratios are known, the largest share of the n seen
-- times 1 + 1 / n (the max output before the first answer; reserve.lua).
local SL_OUT_MIN = 0.001
-- Bedrock's burndown charges the expected output times the burndown rate
-- (5 for the Claude 4-class models) into the tokens dimension. A charge
-- above what the answers use is given back at the settle only as far as
-- the provider's bucket could hold it, and a schedule paced at the rate
-- keeps that bucket nearly full: at the 90th percentile the give-backs
-- were mostly wasted (bedrock-5x, seeds 1..10: 92..96 % of the floor), at
-- the mean the 10 s windows swung to 1.033x. The 80th: 95.8..98.4 %,
-- windows up to 1.012x (35 of seeds 1..40 within both bounds; the 75th
-- 33, the 85th 21). A deployment with an output dimension as well (style
-- custom) charges that its max output.
local SL_OUT_BURN_Q = 0.8

-- What the answers' share of their max output is learned for (reserve
-- charges by it, settle learns it): Bedrock's burndown (its rate when not
-- 1, else false) and Anthropic's expected output (output_charge expected
-- on a deployment with otpm).
local function sl_out_rule(limits)
  local b = sl_num(limits, 'output_burndown', 1)
  return b ~= 1 and b, limits.output_charge == 'expected' and sl_num(limits, 'otpm', 0) > 0
end

-- The share of the max output an answer is charged on the deployment by
-- its learned ratio (pfx 'output'; a lane's 'l.<lane>.output'): the
-- ratio in force; while learning (fewer than SL_CAL_LEARN fresh answers
-- known, sl_ratio) the largest share of the n known times 1 + 1 / n
-- (twice it after one answer, 4 / 3 after three), or 1 (the max) before
-- any. An answer longer than that is repaid as debt. Twice the largest
-- until the fourth answer ran the issue's short answers (a fifth of
-- max_tokens) at under half the rate for a second more. A lane's share
-- while it learns is learning_r when given (the deployment's: reserve's
-- item_out_r, settle's out_ahead). Returns the share (at most 1) and
-- whether it is learning.
local function sl_out_charge_r(limits, st, now, pfx, learning_r)
  local r, learning, n = sl_ratio(limits, st, now, pfx)
  if learning then
    if learning_r then return learning_r, true end
    if not st[pfx .. '_ratio'] or n < 1 then return 1, true end
    r = (1 + 1 / n) * r
  end
  return math.min(1, r), learning
end

-- The output an item is charged: o its max output, r the ratio in force
-- (nil: the max). Returns the charge.
local function sl_out_item(r, o)
  if not r or r >= 1 or o <= 1 then return o end
  local k = math.ceil(o * r - 1e-9)
  if k < 1 then k = 1 end
  return k
end

-- An item's estimate as charged: the input part times the ratio r in
-- force (rounded up), the max output as given; a combined c whose parts
-- are unknown times the ratio only when it is above 1 (its max output
-- part is exact, so a lower ratio could charge less than the provider
-- does at admission). exact items are charged as sent. Returns c, i, o,
-- the texts of i and o for the record (both '' for a combined c), the
-- text of c when it is unchanged as sent (else nil), and the raw input
-- estimate for the record ('' when the item teaches nothing).
local function sl_cal_item(r, c, i, o, is, os, cs, exact)
  if exact then return c, i, o, is, os, cs, '' end
  if os == '' then
    if r <= 1 or c == 0 then return c, i, o, is, os, cs, '' end
    local k = math.ceil(c * r - 1e-9)
    return k, k, k, '', '', nil, ''
  end
  if r == 1 or i == 0 then return c, i, o, is, os, cs, is end
  local k = math.ceil(i * r - 1e-9)
  return k + o, k, o, string.format('%d', k), os, nil, is
end

-- Actual usage as sent to settle: "-1" (unknown), "n" (combined), "i+o"
-- or "i+o+r" (input, output and the part of the input read from the
-- provider's prompt cache). Returns {total, input, output, cache_read}
-- with nil for what is unknown, or nil for a malformed value.
local function sl_usage(s)
  if s == '-1' then return {} end
  local n = sl_uint(s)
  if n then return {n} end
  local i, o, r = string.match(s or '', '^(%d+)%+(%d+)%+?(%d*)$')
  i, o = sl_uint(i), sl_uint(o)
  if not i or not o then return nil end
  r = (r ~= nil and r ~= '') and sl_uint(r) or 0
  if not r or r > i then return nil end
  return {i + o, i, o, r}
end

-- ---- lanes and tenants (docs/redis-keys.md, "Lanes and tenants") --------
-- Configured in limits by configure:
--   plan.<lane>    "in_h,ex_h,cap,band,top"   derived: the lane's horizon for
--                  items within their tenant's share and beyond it (ms
--                  ahead of now a grant may be; -1 = up to the item's max
--                  wait), the share of the rate the lane may use (1 -
--                  headroom reserved for the lanes above it), and the
--                  in-share horizon used instead of -1 when tenants are
--                  configured: a share is judged at the slot, so slots
--                  are given out no earlier than a band before they come;
--                  top: 1 for a lane of the top priority (reserve.lua
--                  judges its horizon on the schedule ahead of an item)
--   default_lane   the lane of items that name none (or an unknown one)
--   tenant.<name>  "weight,ceiling_rpm,ceiling_tpm,daily_tokens" (0 = none)
--   tenant_idle_ms how long a tenant without demand still holds its share
-- Nothing configured: sl_plan returns nil and reserve keeps its plain
-- reservation mode (reserve as far ahead as the max wait allows).

local function sl_csv(v)
  local t = {}
  for x in string.gmatch(v, '[^,]+') do t[#t + 1] = x end
  return t
end

-- The plan from the limits' fields (lane.*, plan.*, tenant.*, ...): what
-- configure packs, and what a deployment without the packed field gives.
local function sl_plan_scan(limits)
  local p = {lanes = {}, tenants = {}, fair = false}
  local any = false
  for k, v in pairs(limits) do
    local ln = string.match(k, '^plan%.(.+)$')
    if ln then
      local f = sl_csv(v)
      p.lanes[ln] = {name = ln, in_h = tonumber(f[1]), ex_h = tonumber(f[2]), cap = tonumber(f[3]),
                     band = tonumber(f[4] or f[1]), top = f[5] == '1'}
      any = true
    end
    local tn = string.match(k, '^tenant%.(.+)$')
    if tn then
      local f = sl_csv(v)
      p.tenants[tn] = {name = tn, w = tonumber(f[1]), crpm = tonumber(f[2]), ctpm = tonumber(f[3]),
                       daily = tonumber(f[4])}
      if tn ~= 'default' then p.fair = true end
      any = true
    end
  end
  if not any then return nil end
  if not p.tenants.default then
    p.tenants.default = {name = 'default', w = 1, crpm = 0, ctpm = 0, daily = 0}
  end
  p.default_lane = limits.default_lane or ''
  if not p.lanes[p.default_lane] then
    p.lanes[''] = {name = '', in_h = -1, ex_h = 0, cap = 1, band = sl_num(limits, 'lane_step_ms', 10)}
    p.default_lane = ''
  end
  if p.fair then
    for _, l in pairs(p.lanes) do
      if l.in_h < 0 then l.in_h = l.band end
    end
  end
  p.idle_ms = sl_num(limits, 'tenant_idle_ms', 2000)
  return p
end

-- The plan of a deployment (nil: no lanes or tenants): from the packed
-- limits, where configure derived it (its presence is the marker that the
-- deployment has one), or scanned from the hash.
local function sl_plan(limits)
  if limits._packed then return limits.plan end
  return sl_plan_scan(limits)
end

-- The lane and tenant an item names; unknown names fall back to the
-- default lane and to the default tenant class (so a typo cannot mint a
-- new share).
local function sl_plan_lane(p, name)
  return p.lanes[name] or p.lanes[p.default_lane]
end
local function sl_plan_tenant(p, name)
  return p.tenants[name] or p.tenants.default
end

-- Start-time fair queueing across the fleet on a virtual clock V that
-- advances by 1/W per ms, W the summed weight of the tenants with demand
-- in the last tenant_idle_ms. A tenant's virtual finish vt grows by
-- cost/weight per grant, where cost is the ms of deployment time the send
-- occupies (max over dimensions of units / rate, as in dominant resource
-- fairness). A send at slot s is within its tenant's share when
-- vt <= V(s) + tau, tau one burst of the deployment divided by W.
local function sl_fair_open(p, st, now, names)
  for n in pairs(names) do sl_set(st, 't.' .. n .. '.seen', sl_fmt(now)) end
  local w = 0
  for n, t in pairs(p.tenants) do
    if names[n] or sl_num(st, 't.' .. n .. '.seen', -1e18) >= now - p.idle_ms then w = w + t.w end
  end
  if w <= 0 then w = 1 end
  local vw = sl_num(st, 'v_w', w)
  local v = sl_num(st, 'v', 0) + math.max(0, now - sl_num(st, 'v_at', now)) / vw
  sl_set(st, 'v', sl_fmt(v))
  sl_set(st, 'v_at', sl_fmt(now))
  sl_set(st, 'v_w', sl_fmt(w))
  return {v = v, at = now, w = w}
end

-- V at time s, for the f sl_fair_open returns: f.v + (s - f.at) / f.w
-- (reserve computes it inline).

-- ---- health: the circuit breaker and hard-quota outs ---------------------
-- (docs/redis-keys.md, "Health"). Kept in the state hash so every agent
-- sees the same verdict and redis-cli shows it:
--   breaker_state       closed | open | half_open (absent = closed)
--   breaker_open_until  ms; an open breaker sheds until then
--   breaker_probe       the half-open probe's grant id while it is out
--   breaker_window      "start_ms:requests:failures,..." one entry per
--                       slice (breaker_window_ms / 10) with settles in it
--   quota_until         ms; a hard-quota error sheds until then
-- The breaker is off while breaker_failure_ratio is 0 (the default): then
-- nothing reads or writes its fields and the deployment behaves as if it
-- had none. quota_until applies whenever a `quota` outcome was reported.

local function sl_breaker_on(limits)
  return sl_num(limits, 'breaker_failure_ratio', 0) > 0
end

-- The live slices of the breaker's window: entries whose slice started
-- within the last breaker_window_ms. Slices are keyed by their start time
-- (not an index), so a reconfigured width ages old entries sensibly.
-- Returns {start = current slice start, live = {{start, req, fail}, ...},
-- requests = sum, failures = sum}.
local function sl_breaker_window(limits, st, now)
  local width = sl_num(limits, 'breaker_window_ms', 30000)
  local slice = width / 10
  local cur = math.floor(now / slice) * slice
  local w = {start = cur, live = {}, requests = 0, failures = 0}
  for s, r, f in string.gmatch(st.breaker_window or '', '([^:,]+):([^:,]+):([^:,]+)') do
    s, r, f = tonumber(s), tonumber(r), tonumber(f)
    if s and r and f and s > cur - width then
      w.live[#w.live + 1] = {s, r, f}
      w.requests = w.requests + r
      w.failures = w.failures + f
    end
  end
  return w
end

-- Adds one settled request (failed or not) to the current slice and writes
-- the window back with only its live slices.
local function sl_breaker_feed(w, st, failed)
  local last = w.live[#w.live]
  if not last or last[1] ~= w.start then
    last = {w.start, 0, 0}
    w.live[#w.live + 1] = last
  end
  last[2] = last[2] + 1
  w.requests = w.requests + 1
  if failed then
    last[3] = last[3] + 1
    w.failures = w.failures + 1
  end
  local parts = {}
  for i, e in ipairs(w.live) do parts[i] = string.format('%.0f:%d:%d', e[1], e[2], e[3]) end
  sl_set(st, 'breaker_window', table.concat(parts, ','))
end

-- The breaker as reserve and status see it: an open breaker whose break
-- has passed is half-open (reserve writes that transition; status only
-- reports it). Returns state, open_until.
local function sl_breaker_state(limits, st, now)
  if not sl_breaker_on(limits) then return 'closed', 0 end
  local s = st.breaker_state or 'closed'
  local until_ms = sl_num(st, 'breaker_open_until', 0)
  if s == 'open' and until_ms <= now then s = 'half_open' end
  return s, until_ms
end

-- A call's own time, for the agent's bound on it (redis.max_script_ms): a
-- script called with a last ARGV '@timed' (no name has an @) reads TIME
-- here, before its body, and sl_timed(reply) appends the µs since to its
-- reply, TIME read again after everything was written. TIME is
-- gettimeofday and runs during a script. The definitions above this line
-- and the reply's encoding are not in it.
local SL_T0
if ARGV[#ARGV] == '@timed' then
  SL_T0 = redis.call('TIME')
  ARGV[#ARGV] = nil
end
if ARGV[#ARGV] == '@dry' then
  SL_DRY = true
  ARGV[#ARGV] = nil
end
local function sl_timed(out)
  if SL_T0 and type(out) == 'table' and not out.err then
    local t = redis.call('TIME')
    out[#out + 1] = (tonumber(t[1]) - tonumber(SL_T0[1])) * 1000000 + tonumber(t[2]) - tonumber(SL_T0[2])
  end
  return out
end

-- ---- end of common.lua ----
