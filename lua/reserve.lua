-- reserve: decides a batch of acquires at once. Each item gets a grant (a
-- future slot, as a wait in ms), a deferral, or a shed verdict; nothing is
-- a yes/no that invites polling. GCRA per dimension in reservation mode.
-- ARGV: n, then n pairs (tokens, max_wait_ms), or n quads (tokens,
-- max_wait_ms, lane, tenant) where lane and tenant may be empty; or
-- 'group', ... for a deployment group decided in one call (see
-- reserve_group below).
-- Reply: {now_us, paused_ms, requests_backlog_ms, tokens_backlog_ms,
--        pause_shift_ms, item_1, ..., item_n} where the backlogs are how far
-- the fleet's schedule reaches past now after this call (an agent that
-- loses Redis starts its local pacing there), and an item a verdict
-- (common.lua sl_verdict, the kinds SL_GRANT 1, SL_DEFER 2, SL_SHED 0):
--   {1, grant_id, wait_ms, tokens}                  a grant
--   {2, reason, ask_in_ms}                          a deferral: the slot is
--        beyond the item's horizon (its lane's, or the excess horizon when
--        its tenant is over its share); ask again in ask_in_ms. reason is
--        one of rpm tpm itpm otpm paused lane ceiling share
--   {0, reason, retry_after_ms}                     a shed; reason is one of
--        rpm tpm itpm otpm paused daily concurrency too_large lane ceiling
--        tenant_daily quota breaker; retry_after_ms -1 = never
-- Health comes before lanes and tenants: while a hard-quota error holds
-- the deployment out (quota_until) every item is shed `quota`; while the
-- breaker is open every item is shed `breaker` until the break ends; after
-- it, the breaker is half-open and exactly one item is granted as the
-- probe (its grant id kept in breaker_probe) while the others are shed
-- `breaker` with a short hint, until the probe settles. A probe reclaimed
-- unsettled (its lease expired) is not a verdict: the next call sends a
-- new one.
-- Deferrals happen on deployments with lanes or tenants configured (see
-- sl_plan), with a horizon (horizon_ms, or estimate_learn_horizon_ms while
-- learning), and while the schedule carries debt a rate decrease
-- converted (reserve_one). A shed or deferred item consumes nothing.
-- now_us is the Redis clock, for tests only: callers use the relative
-- wait.
-- A last ARGV '@timed' (in either mode) appends the call's own time in µs
-- to the reply (sl_timed in common.lua): the agent sizes its batches by it.
-- A dry run (a last ARGV '@dry', before '@timed'; in either mode) decides
-- every item exactly as above and writes nothing: no grant, no lease, no
-- state, no counter (ESTIMATE: "what would a request get now"). Each item
-- of its reply carries one more element at the end, the wait to the slot
-- the item's decision found, in ms (-1 when it was decided before a slot
-- was looked for: too_large, quota, breaker, daily, tenant_daily,
-- concurrency, tag); its grant ids are the ids the grants would get.

-- A reserve decides on a deployment in three steps, so that what is per
-- call is paid once per call (and once per member in group mode, however
-- many items ask it): reserve_open loads and prepares (the schedule, the
-- health, the plan, the daily and concurrency counts), reserve_one decides
-- one item in memory, reserve_close writes everything back at once (the
-- state in one HSET, the grants in one HSET, the leases in one ZADD, each
-- refund-bound queue in one RPUSH).

-- How far ahead a slot past the committed tail is granted (reserve_one's
-- horizon):
-- enough for the agents' next ask to arrive before the committed sends
-- run out, as the learning horizon's default.
local SL_CONV_LEAD_MS = 250

-- On a deployment that grants just in time (horizon_ms), the horizon an
-- item asks with grows with how long it has waited (its max_wait_ms field
-- "<left>:<waited>"), to the whole horizon at SL_AGE_FULL_MS: when a
-- settle gives room back, the next ask takes it, and that is most often
-- the settling agent's own next request, sent with the settle, while the
-- other agents' deferred requests sleep until their ask times. The
-- agents whose calls happened to end first kept the room among their
-- callers (anthropic-short-24 seed 10: one agent's mean wait 0.7 s in a
-- 5 s span, another's 3.5 s), and the fleet's last calls came from the
-- callers left behind, one response time after another: 20 of seeds
-- 1..40 within 95 % of the floor. A request that has just arrived asks
-- with none of the horizon (its slot must be due), one that has waited
-- half of SL_AGE_FULL_MS with half: the older asks take the room first,
-- and no slot is granted further ahead than before. With it: 36 of 40.
-- An item sent without its wait (an older agent) asks with the whole.
local SL_AGE_FULL_MS = 2000

-- common.lua's names that the functions below use, as locals of this
-- file: the same values, nearer. Every call of the script makes its
-- functions anew, and a function made finds each local it uses from
-- outside by walking the list of those already in use, newest first: one
-- declared at common.lua's top is behind all of common.lua's (about a
-- hundred steps), one declared here behind this file's few.
local SL_DRY, SL_SHED, SL_GRANT, SL_DEFER, SL_NKEYS = SL_DRY, SL_SHED, SL_GRANT, SL_DEFER, SL_NKEYS
local sl_num, sl_set, sl_fmt, sl_ceil, sl_uint, sl_tokens = sl_num, sl_set, sl_fmt, sl_ceil, sl_uint, sl_tokens
local sl_verdict, sl_on_member, sl_hash, sl_deployment, sl_limits = sl_verdict, sl_on_member, sl_hash, sl_deployment, sl_limits
local sl_now, sl_day, sl_reclaim, sl_schedule, sl_shift_field = sl_now, sl_day, sl_reclaim, sl_schedule, sl_shift_field
local sl_dim, sl_dim_commit, sl_dim_save, sl_dim_flush = sl_dim, sl_dim_commit, sl_dim_save, sl_dim_flush
local sl_cal, sl_out_charge_r, sl_cal_item, sl_out_item, sl_breaker_state = sl_cal, sl_out_charge_r, sl_cal_item, sl_out_item, sl_breaker_state
local sl_plan, sl_plan_lane, sl_plan_tenant, sl_fair_open = sl_plan, sl_plan_lane, sl_plan_tenant, sl_fair_open
local sl_count, sl_save_state = sl_count, sl_save_state
-- And the globals the per-item paths read (the items' arguments, parsing
-- and the grant's record): a global is a lookup by name, its field a
-- second one.
local ARGV, str_find, str_format, math_ceil = ARGV, string.find, string.format, math.ceil

-- An item's max_wait_ms field: "<max wait>" or "<max wait>:<waited>", both
-- non-negative integers (wire.c). Returns the max wait and how long the
-- item has waited (false when not sent), or nil when malformed.
local str_match = string.match
local function sl_wait(aw)
  -- The agent's form first (it always sends both).
  local a, b = str_match(aw, '^(%d+):(%d+)$')
  if a then
    if #a <= 15 and #b <= 15 then return a + 0, b + 0 end
    a, b = sl_uint(a), sl_uint(b) -- up to 10^15 itself (sl_uint)
    if a and b then return a, b end
    return nil
  end
  if #aw <= 15 and str_find(aw, '^%d+$') then return aw + 0, false end
  local w = sl_uint(aw)
  if w then return w, false end
  return nil
end

-- Opens the deployment keys names (KEYS, where common.lua's helpers read
-- them), limits and st its loaded hashes. Returns the call's context x,
-- x.keys the keys. (This file's functions read them as keys or x.keys:
-- a function made per call that uses KEYS, common.lua's first local,
-- finds it behind all the others, see above.)
local function reserve_open(keys, limits, st)
  local now, now_us = sl_now(limits)
  local expired = sl_reclaim(now, limits)
  local dims, scale, rescheduled = sl_schedule(limits, st, now)
  local burn, expected = sl_out_rule(limits)
  local req, now_s = dims[1], sl_fmt(now)
  local rpd, tpd, maxc = sl_num(limits, 'rpd', 0), sl_num(limits, 'tpd', 0), sl_num(limits, 'max_concurrency', 0)
  -- One constructor: Lua sizes a table for the fields it names at once
  -- (adding them one by one would grow it five times over).
  local x = {
    keys = keys, limits = limits, st = st, now = now, now_us = now_us, now_s = now_s,
    counts = {expired_total = expired}, dims = dims, nd = #dims, rescheduled = rescheduled, req = req,
    dim_of = {},  -- by SL_DIMS index
    -- The grant records write the units granted so far as integers (%d)
    -- while they are whole numbers, as they always are (costs are).
    int_ok = true,
    qs = {}, nq = 0,  -- the sends committed: their slots (their C per dimension in d.qc)
    paused_until = sl_num(st, 'paused_until', 0), last_slot = sl_num(st, 'last_slot', 0),
    -- Grant ids never run behind the clock (ten per ms): a state lost or
    -- rolled back (Redis restarted empty, an evicted or deleted state
    -- hash, a failover to a replica behind) must not hand out again the
    -- ids of grants the agents still hold, whose settles and cancels
    -- would then settle someone else's grant. (14 digits: within
    -- settle's 15 and a double's exact integers.)
    next_id = math.max(sl_num(st, 'next_grant', 0), math.floor(now) * 10),
    lease_ms = sl_num(limits, 'lease_ms', 120000),
    maxc = maxc, rpd = rpd, tpd = tpd, plain_h = sl_num(limits, 'horizon_ms', -1),
    interval_ms = 1 / req.r, jitter = sl_num(limits, 'jitter_ms', 10), tmax = limits.tokens_rule == 'max',
    pause_shift = sl_shift_field(st),
    -- Lanes and tenants: only a deployment that has a plan looks for one.
    plan = sl_plan(limits), fair = false,
    quota_until = sl_num(st, 'quota_until', 0), bstate = false, bopen_until = false, probe_out = false,
    probe_hint = math.min(1000, sl_num(limits, 'breaker_break_ms', 30000)),
    active = 0,
    -- The day's usage: loaded now when the deployment has daily limits, or
    -- by the first item whose tenant has daily tokens (reserve_daily).
    daily_on = rpd > 0 or tpd > 0, daily = false, day_changed = false, daily_dirty = false,
    to_midnight = false,  -- the next day's start less now (sl_day)
    private = {},       -- lane and tenant buckets, by their plan object
    private_used = {},  -- the private dimensions committed to (saved at close)
    grants = {}, leases = {}, granted = 0, shed = 0, deferred = 0,
    slot_v = now, slot_s = now_s, lease_v = false, lease_s = false,
    -- Calibrated estimates (common.lua, sl_cal): the ratio in force and
    -- the learning state (each item's charge: item_charge).
    cal_r = 1, cal_learning = false, learn_h = sl_num(limits, 'estimate_learn_horizon_ms', -1),
    cal_off = sl_num(limits, 'estimate_exact', 0) == 1,
    -- The raw input estimates and their charged input of the items that
    -- teach, added up over every grant (cal_raw_cum, cal_in_cum): their
    -- records keep the sums after them (fields 14 and 15), so that settle
    -- knows a span's calibrated input when no usage comes back
    -- (settle.lua, hdr_calibrate).
    raw_cum = sl_num(st, 'cal_raw_cum', 0), in_cum = sl_num(st, 'cal_in_cum', 0),
    -- Expected output (common.lua, sl_out_item): the ratio in force (false:
    -- charge the max output).
    out_r = false, out_learning = false,
    -- Per lane (item_out_r): whether the deployment learns the expected
    -- output per lane (it has lanes, and the output is expected or burned
    -- down), and each lane's ratio once looked up in this call.
    out_lane = false, lane_r = {},
    burn = burn,
    -- The agent the grants are for, as the records' field 13 (',<id>';
    -- '' without one, or with an id a record cannot hold): a heartbeat
    -- that drops the agent after its hold gives back its grants not yet
    -- due (heartbeat.lua).
    agent_f = (SL_AGENT and SL_AGENT ~= '' and #SL_AGENT <= 256 and not string.find(SL_AGENT, ',', 1, true))
              and (',' .. SL_AGENT) or '',
  }
  if not x.cal_off then x.cal_r, x.cal_learning = sl_cal(limits, st, now) end
  if x.burn then
    -- Bedrock's burndown (docs/providers.md): the tokens dimension counts
    -- input + output x burndown at the end. The grant charges input + the
    -- larger of the max output (what Bedrock reserves at admission) and
    -- the expected output burned down (output_ratio: for this style the
    -- SL_OUT_BURN_Q quantile, settle.lua); the bound (burndown x max)
    -- until the first answer is known, then the largest share seen times
    -- 1 + 1 / n until four are (sl_out_charge_r).
    x.out_r, x.out_learning = sl_out_charge_r(limits, st, now, 'output')
  elseif expected then
    -- Learning (fewer than four answers known): the largest share seen
    -- times 1 + 1 / n, or the max before any (sl_out_charge_r). An answer
    -- longer than that is repaid as debt; charging the max until the
    -- fourth answer ran the first seconds of the issue's short answers (a
    -- fifth of max_tokens) at a third of the rate (anthropic-short-24:
    -- 91.8..95.4 % of the floor, 92.4..98.9 % at twice the largest).
    local k, learning = sl_out_charge_r(limits, st, now, 'output')
    if k < 1 then x.out_r = k end
    x.out_learning = learning  -- (reserve_one: how soon a deferred item asks again)
  end
  x.out_lane = x.plan and (burn or expected) or false
  local day, next_day = sl_day(limits, now)
  x.day, x.to_midnight = day, sl_ceil(next_day - now)
  for j = 1, #dims do
    local d = dims[j]
    d.qc = {}
    x.dim_of[d.i] = d
    if d.granted ~= math.floor(d.granted) then x.int_ok = false end
    -- What the (jitter-reduced) burst tolerates (common.lua, "Earliest
    -- time a send of cost c conforms"): a cost above it is "big", waits for
    -- a full bucket and fences the next slot.
    d.tol = d.burst - d.jitter * d.r
  end

  -- Health (see common.lua). The open -> half_open transition is written
  -- here, by the first call that finds the break over.
  x.bstate, x.bopen_until = sl_breaker_state(limits, st, now)
  if x.bstate == 'half_open' then
    if st.breaker_state ~= 'half_open' then
      sl_set(st, 'breaker_state', 'half_open')
      sl_set(st, 'breaker_probe', '')
    end
    local p = st.breaker_probe or ''
    if p ~= '' then
      -- HGET, not HEXISTS: the commands the scripts call are exactly those
      -- deploy/acl.conf grants (docs/security.md).
      if redis.call('HGET', keys[3], p) then
        x.probe_out = true
      else
        sl_set(st, 'breaker_probe', '')
      end
    end
  end
  -- A dry run left the expired leases in place: not counted as active.
  if maxc > 0 then x.active = redis.call('ZCARD', keys[4]) - (SL_DRY and expired or 0) end
  return x
end

-- The day's usage of x, loaded on first use (replaced at a new day, sl_day).
local function reserve_daily(x)
  local daily = x.daily
  if daily then return daily end
  daily = sl_hash(x.keys[7])
  local day = x.day
  if sl_num(daily, 'day', -1) ~= day then
    daily = {day = day, requests = 0, tokens = 0}
    x.day_changed = true
  end
  daily.requests, daily.tokens = sl_num(daily, 'requests', 0), sl_num(daily, 'tokens', 0)
  x.daily = daily
  return daily
end

-- The private buckets, made on first use: a lane's capped share of the
-- effective rate, a tenant's ceiling (absolute, not scaled by AIMD). A
-- private dimension's i is the SL_DIMS cost it charges.
local function lane_dims(x, L)
  if L.cap >= 1 then return nil end
  local p = x.private[L]
  if not p then
    p = {}
    local k = 'l.' .. L.name
    for _, d in ipairs(x.dims) do
      local pd = sl_dim(k .. '.' .. d.name, d.r * 60000 * L.cap, math.max(1, math.floor(d.burst * L.cap)), 1, x.st,
                        x.jitter)
      pd.i = d.i
      pd.tol = pd.burst - pd.jitter * pd.r
      p[#p + 1] = pd
    end
    x.private[L] = p
  end
  return p
end
local function tenant_dims(x, T)
  if T.crpm <= 0 and T.ctpm <= 0 then return nil end
  local p = x.private[T]
  if not p then
    p = {}
    local k = 't.' .. T.name
    if T.crpm > 0 then
      p[#p + 1] = sl_dim(k .. '.requests', T.crpm, math.max(1, math.floor(T.crpm / 60)), 1, x.st, x.jitter)
      p[#p].i = 1
    end
    if T.ctpm > 0 then
      p[#p + 1] = sl_dim(k .. '.tokens', T.ctpm, math.max(1, math.floor(T.ctpm / 60)), 1, x.st, x.jitter)
      p[#p].i = 2
    end
    for _, d in ipairs(p) do d.tol = d.burst - d.jitter * d.r end
    x.private[T] = p
  end
  return p
end
-- The earliest slot the private buckets p allow for an item of costs
-- cost, and the fence a grant needs on them: the largest jitter of those
-- the item is "big" for (the same rule as item_slot's for the shared
-- ones).
local function private_scan(p, cost)
  local s, maxj = -1e18, 0
  if not p then return s, maxj end
  for j = 1, #p do
    local d = p[j]
    local room = d.tol - cost[d.i]
    local e
    if room < 0 then
      e = d.tat + d.jitter
      if d.jitter > maxj then maxj = d.jitter end
    else
      e = d.tat - room / d.r
    end
    if e > s then s = e end
  end
  return s, maxj
end
-- Commits a send on a private bucket. No refunds: giving back there is
-- never needed for the provider's sake.
local function private_commit(x, p, cost, s)
  if not p then return end
  for j = 1, #p do
    local d = p[j]
    local base = d.tat
    if s > base then base = s end
    d.tat = base + cost[d.i] / d.r
    x.private_used[d] = true
  end
end

-- Per-lane and per-tenant counters, kept in the plan's objects for the call
-- (folded into the counts at close).
local function lt_bump(o, k, v)
  local c = o.counts
  if not c then c = {}; o.counts = c end
  c[k] = (c[k] or 0) + (v or 1)
end

-- An item as reserve_one decides it. One table per call (item_new), filled
-- for each item by the plain path and for each ask by the group path, so
-- that deciding an item makes no table but its verdict (and, when it is
-- deferred first in its class, its lane's blocked list). Filled by the
-- caller, as sent:
--   c          the combined estimate (item_charge replaces it with the
--              calibrated one)
--   w          the max wait (ms)
--   L, T       its lane and tenant (plan objects; false without a plan)
--   cost       its cost by SL_DIMS index, {1, c, input, output} (the
--              charged figures once item_charge has run)
--   in_s, out_s  the text of its input and max output for the record (as
--              sent: "i+o"; '' for both when c was sent as one number)
--   c_s        the text of c when it was sent as one number (false: made
--              when recorded)
--   exact      counted exactly: charged as sent (vocab.h's EXACT marker)
--   partial    leaves part of the prompt out: teaches nothing (PARTIAL)
-- Set while it is decided:
--   raw, out   item_charge's: the raw input estimate of an item that
--              teaches ('' when it teaches nothing) and the output charged
--              when below the max output ('' when the max), for the record
--   wait       the wait to the slot found, for a dry run's reply (-1 when
--              it was decided before a slot was looked for; set in a dry
--              run only)
--   ldims, tdims, in_share, vt, k, tau  item_plan's, for an item with a
--              lane: its private buckets, whether it is within its
--              tenant's share, and the fair share's figures
local function item_new()
  return {c = 0, w = 0, age = false, L = false, T = false, cost = {1, 0, 0, 0}, in_s = '', out_s = '', c_s = false,
          exact = false, partial = false, raw = '', out = '', wait = -1,
          ldims = false, tdims = false, in_share = true, vt = false, k = false, tau = false}
end

-- The expected output's ratio for an item of lane L on x: the lane's own
-- (state l.<lane>.output_ratios, learned from its answers by settle.lua)
-- once it has four fresh ones, else the deployment's (x.out_r). A lane of
-- short answers beside one of long ones is charged its own share, not
-- the mix's high percentile.
local function item_out_r(x, L)
  if not x.out_lane or not L or L.name == '' then return x.out_r end
  local r = x.lane_r[L]
  if r == nil then
    -- (While the lane learns, the deployment's; the max is false.)
    r = sl_out_charge_r(x.limits, x.st, x.now, 'l.' .. L.name .. '.output', x.out_r or 1)
    if not x.burn and r >= 1 then r = false end
    x.lane_r[L] = r
  end
  return r
end

-- The charge of the item it on x: its estimate calibrated (sl_cal_item:
-- the ratio in force, unless the item or the deployment counts exactly),
-- the output dimension's charge (the expected output of a split item: its
-- max output known; the record keeps both, field 12), and OpenAI's
-- combined tokens (tokens_rule max): the larger of the input and the max
-- output, where the parts are known (docs/providers.md). Refills it.c,
-- it.cost, it.in_s, it.c_s, it.raw and it.out; returns it.c.
local function item_charge(x, it)
  local cost, c0, is0, cs0 = it.cost, it.c, it.in_s, it.c_s
  local c, ti, to, is, os, cs, raw = sl_cal_item(x.cal_r, c0, cost[3], cost[4], is0, it.out_s, cs0,
                                                 it.exact or x.cal_off)
  -- Written when calibrated (sl_cal_item gives the rest back as given;
  -- the parts change only with c).
  if c ~= c0 then
    it.c = c
    cost[2], cost[3], cost[4] = c, ti, to
  end
  if cs ~= cs0 then it.c_s = cs or false end
  if is ~= is0 then it.in_s = is end
  -- A partial estimate (images, audio, files left out) teaches nothing.
  it.raw = it.partial and '' or raw
  local out = ''
  local out_r = x.out_r
  if os ~= '' and x.out_lane then out_r = item_out_r(x, it.L) end
  if x.burn then
    -- Burndown: the tokens dimension's output part (field 12, sl_record).
    if os ~= '' then
      local k = math.ceil(to * x.burn * out_r - 1e-9)
      -- Never past what the limit holds (a large request before any
      -- answer is known would be shed too_large forever, and learn
      -- nothing): at most the limit less the input, at least the max.
      local dt = x.dim_of[2]
      if dt and cost[3] + k > dt.per then k = math.max(to, dt.per - cost[3]) end
      if k > to then
        cost[2] = cost[3] + k
        out = string.format('t%d', k)
      end
    end
  elseif out_r and os ~= '' then
    local k = sl_out_item(out_r, to)
    if k < to then
      cost[4] = k
      out = string.format('%d', k)
    end
  end
  it.out = out
  if x.tmax and os ~= '' then
    local o = tonumber(os) or cost[4]  -- the max output, whatever otpm charges
    -- The tokens dimension's cost only: c stays the combined estimate.
    cost[2] = cost[3] > o and cost[3] or o
  end
  return c
end

-- The slot of an item of costs cost on x: one pass over the dimensions
-- (common.lua, "Earliest time a send of cost c conforms", inlined: this is
-- the per-item path). Returns
--   s       the earliest slot: the latest of now, the previous slot (slots
--           stay monotone, which the refund bound relies on), the pause
--           and each dimension
--   reason  why it is not sooner (while the provider's pause lasts, the
--           pause: the schedule behind it is the backlog the pause shifted)
--   maxj    the fence after it: the largest jitter of the dimensions it is
--           big for
--   conv    the earliest committed tail of the dimensions whose TAT
--           reaches more than a burst past it (debt a rate decrease
--           converted, see reserve_one), or false
--   big     whether its cost on a token dimension is above that
--           dimension's limit (it can never fit: item_health)
--   s0      the slot an item of no cost would get: s less the item's own
--           span (reserve_one's horizon for a top lane)
local function item_slot(x, cost)
  local now, dims = x.now, x.dims
  local paused_until = x.paused_until
  local s, reason, maxj, conv, big = now, 'rpm', 0, false, false
  if paused_until > s then s, reason = paused_until, 'paused' end
  if x.last_slot > s then s, reason = x.last_slot, 'rpm' end
  local s0 = s
  for j = 1, x.nd do
    local d = dims[j]
    local cd = cost[d.i]
    if cd > d.per and j > 1 then big = true end
    local cg = d.cg
    if cg < now then cg = now end
    if d.tat - cg > d.burst / d.r and (not conv or cg < conv) then conv = cg end
    local room = d.tol - cd
    local e
    if room < 0 then
      e = d.tat + d.jitter
      if d.jitter > maxj then maxj = d.jitter end
    else
      e = d.tat - room / d.r
    end
    if e > s then s, reason = e, d.spec.reason end
    local e0 = d.tat - d.tol / d.r
    if e0 > s0 then s0 = e0 end
  end
  if paused_until > now then reason = 'paused' end
  return s, reason, maxj, conv, big, s0
end

-- The health of the deployment and the item's admission, before its slot
-- counts: the verdict of an item that is not granted whatever its slot, or
-- nil. A shed (too_large, quota, breaker, daily, tenant_daily,
-- concurrency), or the verdict of the deferred item of its lane and tenant
-- class it stays behind (bl: its lane's blocked verdicts by tenant). c
-- and T: the item's charged estimate and tenant; big: item_slot's; daily:
-- the day's usage when it counts this item.
local function item_health(x, c, T, big, bl, daily)
  local now = x.now
  if big or (x.tpd > 0 and c > x.tpd) or (T and T.ctpm > 0 and c > T.ctpm) or (T and T.daily > 0 and c > T.daily) then
    return sl_verdict(SL_SHED, 'too_large', -1)
  elseif x.quota_until > now then
    return sl_verdict(SL_SHED, 'quota', math.max(1, sl_ceil(x.quota_until - now)))
  elseif x.bstate == 'open' then
    return sl_verdict(SL_SHED, 'breaker', math.max(1, sl_ceil(x.bopen_until - now)))
  elseif x.bstate == 'half_open' and x.probe_out then
    return sl_verdict(SL_SHED, 'breaker', x.probe_hint)
  elseif bl and bl[T] then
    -- Items of one lane and tenant stay in order: behind a deferred one.
    return bl[T]
  elseif daily and ((x.rpd > 0 and daily.requests + 1 > x.rpd) or (x.tpd > 0 and daily.tokens + c > x.tpd)) then
    return sl_verdict(SL_SHED, 'daily', x.to_midnight)
  elseif T and T.daily > 0 and sl_num(daily, 't.' .. T.name .. '.tokens', 0) + c > T.daily then
    return sl_verdict(SL_SHED, 'tenant_daily', x.to_midnight)
  elseif x.maxc > 0 and x.active >= x.maxc then
    return sl_verdict(SL_SHED, 'concurrency', math.max(1, sl_ceil(x.interval_ms)))
  end
  return nil
end

-- The plan of an item with a lane (lanes and tenants, sl_plan): its
-- lane's and tenant's private buckets, its tenant's fair share, and its
-- horizon. s, reason and maxj are the slot so far (item_slot), which the
-- private buckets may move. Keeps in it what the deferral and the grant
-- need (ldims, tdims, in_share, vt, k, tau). Returns the slot, its reason,
-- the fence and the horizon.
local function item_plan(x, it, s, reason, maxj)
  local L, T, cost, w = it.L, it.T, it.cost, it.w
  local ldims, tdims = lane_dims(x, L), tenant_dims(x, T)
  local shared = s
  -- (Without buckets, private_scan's answer is -1e18, 0: not called.)
  local e1, j1, e2, j2 = -1e18, 0, -1e18, 0
  if ldims then e1, j1 = private_scan(ldims, cost) end
  if tdims then e2, j2 = private_scan(tdims, cost) end
  if e1 > s then s, reason = e1, 'lane' end
  if e2 > s then s, reason = e2, 'ceiling' end
  if j1 > maxj then maxj = j1 end
  if j2 > maxj then maxj = j2 end
  local in_share, vt, k, tau, lag = true, false, false, false, nil
  local fair = x.fair
  if fair then
    -- The deployment time the send occupies: its largest share of a
    -- dimension (dominant-resource style).
    local dims = x.dims
    k = 0
    for j = 1, x.nd do
      local d = dims[j]
      local u = cost[d.i] / d.r
      if u > k then k = u end
    end
    tau = fair.tau
    if not tau then
      tau = (x.req.share_burst or x.req.burst) / x.req.r / fair.w
      fair.tau = tau
    end
    -- The tenant's virtual finish, read once per call (kept in T, written
    -- at close).
    vt = T.vt
    if vt == nil then
      vt = sl_num(x.st, 't.' .. T.name .. '.vt', -1e18)
      T.vt = vt
    end
    lag = fair.v + (s - fair.at) / fair.w + tau - vt
    in_share = lag >= 0
  end
  -- An item held back by its own bucket or beyond its share may only
  -- take capacity that is free about now (its lane's excess horizon):
  -- reserving further ahead would fence the shared schedule. Within
  -- their shares, the tenant further behind sees a slot first: its
  -- horizon grows with its lag, from the excess horizon at the edge
  -- of its share to the lane's at a full burst behind (start-time
  -- fair queueing, with agents asking in lag order).
  local horizon
  if in_share and s <= shared then
    horizon = L.in_h
    if fair and L.in_h > L.ex_h then
      horizon = L.ex_h + (L.in_h - L.ex_h) * math.min(1, lag / tau)
    end
  else
    horizon = L.ex_h
  end
  if horizon < 0 or horizon > w then horizon = w end
  it.ldims, it.tdims, it.in_share, it.vt, it.k, it.tau = ldims or false, tdims or false, in_share, vt, k, tau
  return s, reason, maxj, horizon
end

-- The deferral of an item whose slot is beyond its horizon by ask ms:
-- it asks again then, or sooner when the committed sends run out first
-- (conv: item_slot's) or when it comes within its tenant's share. reason:
-- why the slot is not sooner (item_slot, item_plan). Returns the verdict.
local function item_defer(x, it, ask, reason, conv)
  local now = x.now
  if conv then
    local lead = conv - now - SL_CONV_LEAD_MS
    if lead >= SL_CONV_LEAD_MS and lead < ask then ask = lead end
  end
  local why = reason
  if it.L and not it.in_share then
    why = 'share'
    -- The item is within its share for slots from s_in on, which it
    -- reaches by the time s_in at the latest.
    local fair = x.fair
    local s_in = fair.at + fair.w * (it.vt - it.tau - fair.v)
    if s_in - now < ask then ask = s_in - now end
  end
  return sl_verdict(SL_DEFER, why, math.max(1, sl_ceil(ask)))
end

-- A grant's part in the plan of an item with a lane: the send committed on
-- its private buckets, its tenant's virtual finish moved on (within its
-- share) or its excess counted, its tenant's daily tokens (c its charged
-- estimate; daily: the day's usage), the lane's and tenant's counts.
local function plan_grant(x, it, c, s, daily)
  local L, T, cost, ldims, tdims = it.L, it.T, it.cost, it.ldims, it.tdims
  if ldims then private_commit(x, ldims, cost, s) end
  if tdims then private_commit(x, tdims, cost, s) end
  local fair = x.fair
  if fair then
    if it.in_share then
      local v = fair.v + (s - fair.at) / fair.w  -- V(s)
      local vt = it.vt
      if vt > v then v = vt end
      -- As stored (3 decimals): the next grant of the tenant reads
      -- what a later call would read (+ 0: tonumber, converted once).
      T.vt = sl_fmt(v + it.k / T.w) + 0
      T.vt_dirty = true
    else
      lt_bump(T, 'excess_total')
    end
  end
  if T.daily > 0 then
    local f = 't.' .. T.name .. '.tokens'
    daily[f] = sl_num(daily, f, 0) + c
  end
  -- (lt_bump's counting, inline: this is per grant.)
  if L.name ~= '' then
    local lc = L.counts
    if not lc then lc = {}; L.counts = lc end
    lc.granted_total = (lc.granted_total or 0) + 1
  end
  local tc = T.counts
  if not tc then tc = {}; T.counts = tc end
  tc.granted_total = (tc.granted_total or 0) + 1
  tc.tokens_total = (tc.tokens_total or 0) + c
end

-- Grants the item it (c its charged estimate) on x at slot s (wait ms
-- ahead) with the fence maxj after it: its record, the send committed on
-- each dimension (and on its lane's and tenant's, plan_grant), its lease,
-- the day's usage (daily, when it counts it), and the breaker's probe
-- while half-open. Returns the verdict.
local function item_grant(x, it, c, s, maxj, wait, daily)
  local now, dims, cost = x.now, x.dims, it.cost
  -- The grant record (settle reads it): each dimension's cost and the
  -- units granted before it (for a cancel's refund bound, see
  -- sl_dim_refund), so made before the send is committed:
  -- tokens,slot,reserved,creq,ctok,tenant,input,output[,cin,cout] (cin
  -- and cout only on a deployment with input or output tokens: settle
  -- reads them as 0 when absent), then the raw input estimate of an item
  -- that teaches (settle learns the provider's count / it, field 11) and
  -- the output the output dimension charged, when below the max output
  -- (field 12: only on a deployment with output tokens).
  local dim_of = x.dim_of
  local b1 = dims[1].granted
  local dt, di, dout = dim_of[2], dim_of[3], dim_of[4]
  local b2 = dt and dt.granted or 0
  local b3 = di and di.granted or 0
  local b4 = dout and dout.granted or 0
  local L = it.L
  local tname = L and it.T.name or ''
  local in_s, out_s = it.in_s, it.out_s
  -- The numbers take the text tostring() gives them (%.14g: all the
  -- digits of an integer below 1e14); made with %d (much cheaper than
  -- tostring's %g) while they are integers below that, as they are
  -- (costs are whole units). The estimate as sent when it was one
  -- number; the slot with 3 decimals, made once for the slots that
  -- repeat (every grant of a call at now while the budget is
  -- plentiful).
  if s ~= x.slot_v then x.slot_v, x.slot_s = s, sl_fmt(s) end
  local rec
  if x.int_ok and c + b1 + b2 + b3 + b4 < 1e14 then
    rec = (it.c_s or str_format('%d', c)) .. ',' .. x.slot_s .. ',' .. x.now_s .. ',' .. str_format('%d,%d', b1, b2)
          .. ',' .. tname .. ',' .. in_s .. ',' .. out_s
    if di or dout then rec = rec .. ',' .. str_format('%d,%d', b3, b4) end
  else
    rec = c .. ',' .. x.slot_s .. ',' .. x.now_s .. ',' .. b1 .. ',' .. b2 .. ',' .. tname .. ',' .. in_s .. ',' .. out_s
    if di or dout then rec = rec .. ',' .. b3 .. ',' .. b4 end
  end
  local raw, out, ag = it.raw, it.out, x.agent_f
  -- The lane whose answers teach its own expected output (item_out_r):
  -- field 16, after empty ones where need be.
  local ln = (x.out_lane and L and L.name ~= '' and it.out_s ~= '') and L.name or ''
  if raw ~= '' or out ~= '' or ag ~= '' or ln ~= '' then
    if di or dout then rec = rec .. ',' .. raw else rec = rec .. ',,,' .. raw end
    if raw ~= '' then
      x.raw_cum = x.raw_cum + tonumber(raw)
      x.in_cum = x.in_cum + cost[3]
      rec = rec .. ',' .. out .. (ag ~= '' and ag or ',') .. str_format(',%d,%d', x.raw_cum, x.in_cum)
      if ln ~= '' then rec = rec .. ',' .. ln end
    elseif ln ~= '' then
      rec = rec .. ',' .. out .. (ag ~= '' and ag or ',') .. ',,,' .. ln
    elseif out ~= '' or ag ~= '' then
      rec = rec .. ',' .. out .. ag
    end
  end
  -- Commit on each dimension: TAT moves on by the cost at the rate (from
  -- the slot if it is later); the send is recorded for the refund bound's
  -- queue (sl_dim_flush, at close).
  local q = x.nq + 1
  x.nq = q
  x.qs[q] = s
  for j = 1, x.nd do
    local d = dims[j]
    local cd = cost[d.i]
    local base = d.tat
    if s > base then base = s end
    d.tat = base + cd / d.r
    sl_dim_commit(d, now, s, cd / d.r)
    d.qc[q] = d.granted
    d.granted = d.granted + cd
  end
  x.last_slot = s + maxj
  local id = x.next_id + 1
  x.next_id = id
  if L then plan_grant(x, it, c, s, daily) end
  local grants, leases = x.grants, x.leases
  local g = 2 * x.granted
  -- The id and the lease's expiry in whole ms (rounded up: never earlier)
  -- as text made in Lua, the id once for both writes: %d is cheap, and a
  -- number would be formatted %.17g by Redis (the same digits, at more
  -- than twice the cost, each time) and the expiry parsed back.
  local id_s = str_format('%d', id)
  grants[g + 1] = id_s
  grants[g + 2] = rec
  if s ~= x.lease_v then x.lease_v, x.lease_s = s, str_format('%d', math_ceil(s + x.lease_ms)) end
  leases[g + 1] = x.lease_s
  leases[g + 2] = id_s
  x.active = x.active + 1
  if daily then
    daily.requests = daily.requests + 1
    daily.tokens = daily.tokens + c
    x.daily_dirty = true
  end
  local verdict = sl_verdict(SL_GRANT, id, math_ceil(wait - 1e-6), c)
  if x.bstate == 'half_open' then
    x.probe_out = true
    sl_set(x.st, 'breaker_probe', id_s)
    x.counts.breaker_probes_total = (x.counts.breaker_probes_total or 0) + 1
  end
  return verdict
end

-- Decides the item it (item_new) on x: its charge (item_charge), its slot
-- (item_slot), the deployment's health and the item's admission
-- (item_health), its plan (item_plan, or the plain horizon), then a shed,
-- a deferral (item_defer) or a grant (item_grant); and counts the verdict.
-- quiet: a shed is not counted (group mode's asks; the verdict the caller
-- returns is counted by reserve_count_shed). blocked: the verdicts of the
-- deferred lane and tenant classes so far, by lane then tenant (items of
-- a class stay behind a deferred one; nil without a plan). Returns the
-- verdict.
local function reserve_one(x, it, quiet, blocked)
  local c = item_charge(x, it)
  -- The wait to the slot found is only read by a dry run.
  if SL_DRY then it.wait = -1 end
  local s, reason, maxj, conv, big, s0 = item_slot(x, it.cost)
  local L, T = it.L, it.T
  -- The item's own span: how much later than an item of no cost it is
  -- placed (its cost at the rate on the dimension that holds it back, or
  -- the tolerance and jitter for one above the tolerance; 0 behind a
  -- pause or the previous slot). Read before its plan moves s.
  local own = s - s0
  local bl = L and blocked[L]
  -- The day's usage counts this item when the deployment has daily limits
  -- or its tenant daily tokens (or, in one plain call, any item's tenant).
  local daily = (x.daily_on or (T and T.daily > 0)) and reserve_daily(x) or nil
  local verdict = item_health(x, c, T, big, bl, daily)
  -- Every lease out: a request with time left waits for one, deferred (its
  -- agent's later requests behind it), rather than shed. Shed with the
  -- rate's interval as its hint, the callers whose streams ended first
  -- asked again first and took every lease freed, and the others spent
  -- their attempts in a second (a third of 144 calls of 8..15 s streams
  -- at max_concurrency 16 failed). A group's member is asked quietly: its
  -- shed lets the group try the next member.
  if verdict and verdict[2] == 'concurrency' and not quiet and it.w > 0 then
    verdict = sl_verdict(SL_DEFER, 'concurrency', verdict[3])
    if L then
      if not bl then bl = {}; blocked[L] = bl end
      bl[T] = verdict
    end
  end
  if not verdict then
    -- share: the part of the horizon this item may use (SL_AGE_FULL_MS).
    local w, horizon, share = it.w, nil, 1
    if L then
      s, reason, maxj, horizon = item_plan(x, it, s, reason, maxj)
    else
      -- A deployment's horizon (horizon_ms): slots no further ahead than
      -- this; beyond, the item is deferred and asks again when it is near.
      horizon = w
      if x.plain_h >= 0 and x.plain_h < horizon then
        horizon = x.plain_h
        -- Just in time: the item uses the part of it its wait has earned.
        local age = it.age
        if age and age < SL_AGE_FULL_MS then share = age / SL_AGE_FULL_MS end
      end
      -- Learning the estimate's ratio (sl_cal): an item that teaches is
      -- granted just in time, so the first settles' news reaches the rest.
      if x.cal_learning and it.raw ~= '' and x.learn_h >= 0 and x.learn_h < horizon then horizon = x.learn_h end
    end
    -- Debt a rate decrease converted (common.lua, sl_rate_changed) is a
    -- bet that the lower rate lasts; a slot beyond it granted now would
    -- leave a hole where the debt was if the rate comes back (an increase
    -- gives the debt back, not the slots granted). So past the committed
    -- tail the slots are granted just in time (SL_CONV_LEAD_MS ahead), and
    -- an item asks again just before the committed sends run out, when the
    -- schedule knows more: back at the rate, the debt is gone and the item
    -- follows the committed sends; still at the lower rate, it waits for
    -- its slot. A persistent cut costs nothing (the same slots, one or two
    -- more asks per class); a transient one no longer costs the backlog.
    if conv and horizon > SL_CONV_LEAD_MS then horizon = SL_CONV_LEAD_MS end
    local whole = horizon
    horizon = horizon * share
    local wait = s - x.now
    if SL_DRY then it.wait = sl_ceil(wait) end
    -- In the top priority's lanes the horizon bounds the schedule ahead
    -- of the item, not the item's own span: its slot lies its own cost at
    -- the rate past the backlog, and a slot judged whole deferred a lane
    -- of large items (max_tokens 1000) behind one of small ones (250) for
    -- as long as those kept coming (each found room within the horizon
    -- before the large one asked again; anthropic-lanes). Judged by the
    -- backlog, every size is granted once the schedule ahead of it is
    -- near. Below the top priority a lane's horizon stays on the slot:
    -- it keeps a higher lane's later request from waiting behind a lower
    -- one's by more than one send. A deployment without lanes keeps it on
    -- the slot too: a just-in-time schedule gives back more (bedrock-5x
    -- fell from 95.8..98.4 % to 91..94 % of the floor judged by the
    -- backlog, and the calibrating rows' first windows rose to 1.075x);
    -- its classes are one queue per agent, a deferred item holding back
    -- the agent's later ones.
    -- So items of every size that the same backlog holds back ask again
    -- at the same time, and the lanes' turns (the agent's) decide
    -- between them.
    if not (L and L.top) then own = 0 end
    if wait > w then
      verdict = sl_verdict(SL_SHED, reason, math.max(1, sl_ceil(wait - w)))
    elseif wait - own > horizon + 1e-6 then
      local ask = wait - own - horizon
      -- While the expected output is learned (more than the answers use is
      -- charged until four are known), a slot far off is mostly the
      -- charges of answers still out, which their settles give back within
      -- a response's time: the item asks again within the horizon rather
      -- than at a slot computed before those give-backs. (Asking at that
      -- slot, six callers at 18 000 OTPM learned one answer per max_tokens
      -- worth of schedule: 89..91 % of the floor, 96.7..98.2 % this way.)
      -- (Within the whole horizon: a request that has just arrived asks
      -- with none of it, SL_AGE_FULL_MS, and would ask at that slot.)
      if x.out_learning and it.out_s ~= '' and whole > 0 and ask > whole then ask = whole end
      verdict = item_defer(x, it, ask, reason, conv)
      if L then
        if not bl then bl = {}; blocked[L] = bl end
        bl[T] = verdict
      end
    else
      verdict = item_grant(x, it, c, s, maxj, wait, daily)
    end
  end
  local kind = verdict[1]
  if kind == SL_GRANT then
    x.granted = x.granted + 1
  elseif kind == SL_DEFER then
    x.deferred = x.deferred + 1
    if L and L.name ~= '' then lt_bump(L, 'deferred_total') end
  elseif not quiet then
    x.shed = x.shed + 1
    local f = 'shed_' .. verdict[2]
    x.counts[f] = (x.counts[f] or 0) + 1
    if L and L.name ~= '' then lt_bump(L, 'shed_total') end
    if T then lt_bump(T, 'shed_total') end
  end
  return verdict
end

-- Writes back everything x decided.
local function reserve_close(x)
  local st, now, dims, keys = x.st, x.now, x.dims, x.keys
  if x.day_changed then redis.call('DEL', keys[7]) end
  if x.granted > 0 or x.rescheduled then
    for j = 1, x.nd do sl_dim_save(dims[j], st) end
  end
  for j = 1, x.nd do sl_dim_flush(dims[j], st, x.qs, x.nq) end
  if x.granted > 0 then
    redis.call('HSET', keys[3], unpack(x.grants))
    redis.call('ZADD', keys[4], unpack(x.leases))
    sl_set(st, 'last_slot', sl_fmt(x.last_slot))
    sl_set(st, 'next_grant', x.next_id)
    if x.raw_cum > 0 then
      sl_set(st, 'cal_raw_cum', str_format('%d', x.raw_cum))
      sl_set(st, 'cal_in_cum', str_format('%d', x.in_cum))
    end
  end
  for d in pairs(x.private_used) do sl_set(st, d.f_tat, sl_fmt(d.tat)) end
  local daily = x.daily
  if daily and (x.daily_dirty or x.day_changed) then
    local args = {'day', daily.day, 'requests', daily.requests, 'tokens', daily.tokens}
    for f, v in pairs(daily) do
      if string.match(f, '^t%.') then
        args[#args + 1] = f
        args[#args + 1] = v
      end
    end
    redis.call('HSET', keys[7], unpack(args))
  end
  local counts = x.counts
  counts.granted_total = x.granted
  counts.shed_total = x.shed
  counts.deferred_total = x.deferred
  local plan = x.plan
  if plan then
    for name, L in pairs(plan.lanes) do
      if L.counts then
        for k, v in pairs(L.counts) do counts['l.' .. name .. '.' .. k] = v end
      end
    end
    for name, T in pairs(plan.tenants) do
      if T.counts then
        for k, v in pairs(T.counts) do counts['t.' .. name .. '.' .. k] = v end
      end
      if T.vt_dirty then sl_set(st, 't.' .. name .. '.vt', sl_fmt(T.vt)) end
    end
  end
  sl_count(st, counts)
  sl_save_state(st)
end

-- The reply's head: {now_us, paused_ms, requests_backlog_ms,
-- tokens_backlog_ms, pause_shift_ms}.
local function reserve_head(x)
  local now = x.now
  local out = {x.now_us, 0, 0, 0, x.pause_shift}
  if x.paused_until > now then out[2] = sl_ceil(x.paused_until - now) end
  if x.req.tat > now then out[3] = sl_ceil(x.req.tat - now) end
  -- One token backlog for all token dimensions: the longest, so that an
  -- agent losing Redis starts every local token bucket where the fleet's
  -- latest one ends (the safe side).
  for k = 2, x.nd do
    local d = x.dims[k]
    if d.tat > now and sl_ceil(d.tat - now) > out[4] then out[4] = sl_ceil(d.tat - now) end
  end
  return out
end

-- Group mode: which member of a deployment group serves each item, decided
-- in this one call (all members' keys on one server: a single Redis or
-- Sentinel; under Cluster the agent routes step by step instead).
-- KEYS: the 11 keys of member 1, then of member 2, ... (11 x m).
-- ARGV: 'group', m, spill_ms, policy (priority | weighted), n, then n x
-- (tokens, max_wait_ms, lane, tenant, order), order the 1-based indexes of
-- the members allowed for the item, comma-separated, in the order to try
-- them (the agent computes tags and the weighted turn).
-- Reply: {now_us, item_1, ..., item_n}, an item being a verdict of the
-- plain form's shape (sl_verdict) with the member (1-based) that decided
-- it added (sl_on_member):
--   {1, grant_id, wait_ms, tokens, member}  granted on that member
--   {2, reason, ask_in_ms, member}          deferred on that member
--   {0, reason, retry_after_ms}             shed: no allowed member within
--        the max wait; the reason is the first member's, retry_after when
--        the soonest allowed member could serve it past the max wait
--        (members out for breaker, quota or concurrency: when they come
--        back), -1 when none ever can (too_large, daily, tenant_daily).
-- Per item: each member of the order (weighted: only its head) is asked
-- with a max wait of min(spill_ms, max_wait): a grant or a deferral ends
-- the search. Otherwise the member whose shed put its slot soonest, if
-- within max_wait, is asked with the full max wait. A probe that sheds
-- consumes nothing and is not counted; the final shed is counted on the
-- first member of the order. One item never holds two reservations.
local function reserve_group()
  -- (Made here, not per call of the script: a plain call needs neither.)
  local RATE_SHED = {rpm = true, tpm = true, itpm = true, otpm = true, paused = true, lane = true, ceiling = true}
  local BACK_SHED = {breaker = true, quota = true, concurrency = true}
  local function bad(msg) return redis.error_reply('ERR sluice reserve: group: ' .. msg) end
  -- Counts a shed of an item (lane, tenant as sent) on x, as reserve_one
  -- counts one it sheds when not quiet (made here: only group mode
  -- counts so).
  local function reserve_count_shed(x, lane, tenant, reason)
    local f = 'shed_' .. reason
    x.counts[f] = (x.counts[f] or 0) + 1
    x.shed = x.shed + 1
    if x.plan then
      local L, T = sl_plan_lane(x.plan, lane), sl_plan_tenant(x.plan, tenant)
      if L.name ~= '' then lt_bump(L, 'shed_total') end
      lt_bump(T, 'shed_total')
    end
  end
  local m, spill, policy, n = sl_uint(ARGV[2]), sl_uint(ARGV[3]), ARGV[4], sl_uint(ARGV[5])
  if m == nil or m < 1 then return bad("m must be a positive integer, got '" .. tostring(ARGV[2]) .. "'") end
  if spill == nil then return bad("spill_ms must be a non-negative integer, got '" .. tostring(ARGV[3]) .. "'") end
  if policy ~= 'priority' and policy ~= 'weighted' then
    return bad("policy must be priority or weighted, got '" .. tostring(policy) .. "'")
  end
  if n == nil or n < 1 or #ARGV ~= 5 + 5 * n then
    return bad('ARGV must be group, m, spill_ms, policy, n, then n (tokens, max_wait_ms, lane, tenant, order)')
  end
  if #KEYS ~= SL_NKEYS * m then
    return bad('KEYS must be the ' .. SL_NKEYS .. ' keys of each of the ' .. m .. ' members (' .. SL_NKEYS * m .. '), got ' .. #KEYS)
  end
  local items, orders = {}, {}
  for i = 1, n do
    local b = 5 + 5 * (i - 1)
    local a, aw, o = ARGV[b + 1], ARGV[b + 2], ARGV[b + 5]
    -- sl_tokens and sl_uint, the plain case inlined (as in the plain form).
    local c, ti, to, is, os, exact, partial
    if #a <= 15 and str_find(a, '^%d+$') then
      c = a + 0
      ti, to, is, os, exact, partial = c, c, '', '', false, false
    else
      c, ti, to, is, os, exact, partial = sl_tokens(a)
    end
    local w, age = sl_wait(aw)
    if c == nil then
      return bad("item " .. i .. ": tokens must be a non-negative integer or input+output, got '" .. a .. "'")
    end
    if w == nil then
      return bad("item " .. i .. ": max_wait_ms must be a non-negative integer, optionally followed by :<waited ms>, got '" .. ARGV[b + 2] .. "'")
    end
    -- An order is parsed once per call however many items name it (the
    -- agent's orders repeat: its members' turns).
    local order = orders[o]
    if not order then
      local seen = {}
      order = {}
      for x in string.gmatch(o .. ',', '([^,]*),') do
        local j = sl_uint(x)
        if j == nil or j < 1 or j > m or seen[j] then
          return bad("item " .. i .. ": order must list distinct members 1.." .. m .. ", got '" .. o .. "'")
        end
        seen[j] = true
        order[#order + 1] = j
      end
      orders[o] = order
    end
    -- The item as sent (each ask fills the item decided from it), by
    -- position: an array costs a fraction of a table of named fields.
    --   1 c, 2 w, 3 lane, 4 tenant, 5 order, 6 ti, 7 to, 8 in_s, 9 out_s,
    --   10 c_s, 11 exact, 12 age, 13 partial (item_new's fields of the same names)
    local cs = false
    if os == '' and not exact then cs = partial and string.sub(a, 2) or a end
    items[i] = {c, w, ARGV[b + 3], ARGV[b + 4], order, ti, to, is, os, cs, exact, age, partial}
  end
  -- Every member's keys and limits are checked before anything is
  -- decided; its state is loaded when an item first asks it, once.
  local ALL, members = KEYS, {}
  for j = 1, m do
    local k = {}
    for x = 1, SL_NKEYS do k[x] = ALL[SL_NKEYS * (j - 1) + x] end
    KEYS = k
    local name, err = sl_deployment()
    if not name then return bad('member ' .. j .. ': ' .. string.gsub(err, '^ERR sluice: ', '')) end
    local limits = sl_limits()
    if limits.rpm == nil then
      return bad('member ' .. j .. ": unknown deployment '" .. name .. "' (no limits in Redis; configure it first)")
    end
    members[j] = {keys = k, limits = limits}
  end
  local opened = {}
  local function ctx(j)
    local mem = members[j]
    KEYS = mem.keys
    if not mem.x then
      mem.x = reserve_open(KEYS, mem.limits, sl_hash(KEYS[2]))
      opened[#opened + 1] = mem.x
    end
    return mem.x
  end

  local now_us, last_wait
  local reply = {}
  local dec = item_new()  -- the item decided, filled per ask
  -- One ask of member j for item it, as a plain reserve of this one item
  -- would decide it (quiet: its shed is not counted).
  local function ask(j, it, wait)
    local x = ctx(j)
    if not now_us then now_us = x.now_us end
    local L, T, blocked = false, false, nil
    local plan = x.plan
    if plan then
      L, T = sl_plan_lane(plan, it[3]), sl_plan_tenant(plan, it[4])
      if plan.fair then x.fair = sl_fair_open(plan, x.st, x.now, {[T.name] = true}) end
      blocked = {}
    end
    -- Calibrated per member (each learns its own ratio): filled from the
    -- item as sent, so the next member starts from the estimate as sent.
    local d, cost = dec, dec.cost
    d.c, d.w, d.L, d.T, d.in_s, d.out_s, d.c_s, d.exact, d.age = it[1], wait, L, T, it[8], it[9], it[10], it[11], it[12]
    d.partial = it[13]
    cost[2], cost[3], cost[4] = it[1], it[6], it[7]
    local v = reserve_one(x, d, true, blocked)
    last_wait = d.wait
    return v
  end
  for i = 1, n do
    local it = items[i]
    local w, lane, tenant, order = it[2], it[3], it[4], it[5]
    local ws = math.min(spill, w)
    local tries = policy == 'priority' and #order or 1
    local first, best, best_s, soon, res
    for t = 1, tries do
      local j = order[t]
      local v = ask(j, it, ws)
      if v[1] ~= SL_SHED then res = sl_on_member(v, j) break end
      first = first or v
      if v[3] >= 0 and RATE_SHED[v[2]] then
        local s = v[3] + ws
        if s <= w and (not best or s < best_s) then best, best_s = j, s end
        if not soon or s < soon then soon = s end
      elseif v[3] >= 0 and BACK_SHED[v[2]] then
        if not soon or v[3] < soon then soon = v[3] end
      end
    end
    if not res and best then
      local v = ask(best, it, w)
      if v[1] ~= SL_SHED then res = sl_on_member(v, best) end
    end
    if not res then
      local ra = -1
      if soon then
        if soon > w then ra = math.max(1, sl_ceil(soon - w)) else ra = math.max(1, sl_ceil(soon)) end
      end
      res = sl_verdict(SL_SHED, first[2], ra)
      last_wait = -1
      reserve_count_shed(ctx(order[1]), lane, tenant, first[2])
    end
    if SL_DRY then res[#res + 1] = last_wait end
    reply[i + 1] = res
  end
  if not SL_DRY then
    for _, x in ipairs(opened) do
      KEYS = x.keys
      reserve_close(x)
    end
  end
  reply[1] = now_us
  return reply
end

if ARGV[1] == 'group' then return sl_timed(reserve_group()) end

local name, limits, st, err = sl_load()
if not name then return redis.error_reply(err) end

local n = sl_uint(ARGV[1])
local stride = 0
if n ~= nil and n >= 1 then
  if #ARGV == 1 + 2 * n then stride = 2 elseif #ARGV == 1 + 4 * n then stride = 4 end
end
if stride == 0 then
  return redis.error_reply('ERR sluice reserve: ARGV must be n followed by n (tokens, max_wait_ms) pairs or n (tokens, max_wait_ms, lane, tenant) quads')
end
-- Validated whole before anything is decided: a bad item changes nothing.
local C, W, TI, TO, IN, OUT, CS, EX, AG, PA = {}, {}, {}, {}, {}, {}, {}, {}, {}, {}
for i = 1, n do
  local b = 1 + stride * (i - 1)
  -- sl_tokens and sl_uint, the plain case inlined (this runs per item).
  -- A string of digits converts as tonumber would with + 0, converted
  -- once (Lua 5.1's tonumber converts it twice: to test, then to give).
  local a, aw = ARGV[b + 1], ARGV[b + 2]
  local c, ti, to, is, os, exact, partial
  if #a <= 15 and str_find(a, '^%d+$') then
    c = a + 0
    ti, to, is, os, exact, partial = c, c, '', '', false, false
    CS[i] = a
  else
    c, ti, to, is, os, exact, partial = sl_tokens(a)
    if (exact or partial) and os == '' then CS[i] = string.sub(a, 2) end
  end
  local w, age = sl_wait(aw)
  if c == nil then
    return redis.error_reply("ERR sluice reserve: item " .. i .. ": tokens must be a non-negative integer or input+output, got '" .. ARGV[b + 1] .. "'")
  end
  if w == nil then
    return redis.error_reply("ERR sluice reserve: item " .. i .. ": max_wait_ms must be a non-negative integer, optionally followed by :<waited ms>, got '" .. ARGV[b + 2] .. "'")
  end
  C[i], W[i], TI[i], TO[i], IN[i], OUT[i], EX[i], AG[i], PA[i] = c, w, ti, to, is, os, exact, age, partial
end

local x = reserve_open(KEYS, limits, st)
local out = {}
-- The item decided, one table filled per item (item_new).
local it = item_new()
local cost = it.cost
local DW = {}  -- a dry run: each item's wait to its slot
local plan = x.plan
if plan then
  -- Lanes and tenants: each item resolved to its lane and tenant class.
  local LS, TS, names = {}, {}, {}
  for i = 1, n do
    local b = 1 + stride * (i - 1)
    local L = sl_plan_lane(plan, stride == 4 and ARGV[b + 3] or '')
    local T = sl_plan_tenant(plan, stride == 4 and ARGV[b + 4] or '')
    LS[i], TS[i] = L, T
    names[T.name] = true
    if T.daily > 0 then x.daily_on = true end
  end
  if plan.fair then x.fair = sl_fair_open(plan, st, x.now, names) end
  local blocked = {}
  for i = 1, n do
    it.L, it.T = LS[i], TS[i]
    it.c, it.w, it.in_s, it.out_s, it.c_s, it.exact, it.age = C[i], W[i], IN[i], OUT[i], CS[i] or false, EX[i], AG[i]
    it.partial = PA[i]
    cost[2], cost[3], cost[4] = C[i], TI[i], TO[i]
    out[5 + i] = reserve_one(x, it, false, blocked)
    if SL_DRY then DW[i] = it.wait end
  end
else
  for i = 1, n do
    it.c, it.w, it.in_s, it.out_s, it.c_s, it.exact, it.age = C[i], W[i], IN[i], OUT[i], CS[i] or false, EX[i], AG[i]
    it.partial = PA[i]
    cost[2], cost[3], cost[4] = C[i], TI[i], TO[i]
    out[5 + i] = reserve_one(x, it, false, nil)
    if SL_DRY then DW[i] = it.wait end
  end
end
if SL_DRY then
  -- Copies: a verdict may be shared by the items behind a deferred one.
  for i = 1, n do
    local v, d = out[5 + i], {}
    for k = 1, #v do d[k] = v[k] end
    d[#d + 1] = DW[i]
    out[5 + i] = d
  end
else
  reserve_close(x)
end
local head = reserve_head(x)
for k = 1, 5 do out[k] = head[k] end
return sl_timed(out)
