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
-- loses Redis starts its local pacing there), and an item is
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
-- Deferrals happen only on deployments with lanes or tenants configured
-- (see sl_plan). A shed or deferred item consumes nothing. now_us is the
-- Redis clock, for tests only: callers use the relative wait.

-- The verdicts on items ({tokens, max_wait_ms, lane, tenant, cost}, cost
-- by SL_DIMS index from sl_costs; the tables are changed) for the deployment KEYS names, limits and st its loaded
-- hashes (nil: loaded here, KEYS already checked); returns the reply
-- described above. quiet: a shed is not counted
-- in the deployment's shed counters (group mode's probes; the verdict the
-- caller returns is counted by count_shed).
local function reserve_items(items, quiet, limits, st)
  if not limits then
    limits, st = sl_limits(), sl_hash(KEYS[2])
  end
  local n = #items
  local now, now_us = sl_now(limits)
  local counts = {expired_total = sl_reclaim(now)}
  local dims, scale, rescheduled = sl_schedule(limits, st, now)
  local req = dims[1]
  local tokd = {}  -- the token dimensions, for the backlog
  for k = 2, #dims do tokd[#tokd + 1] = dims[k] end

  local paused_until = sl_num(st, 'paused_until', 0)
  local last_slot = sl_num(st, 'last_slot', 0)
  local next_id = sl_num(st, 'next_grant', 0)
  local lease_ms = sl_num(limits, 'lease_ms', 120000)
  local maxc = sl_num(limits, 'max_concurrency', 0)
  local rpd, tpd = sl_num(limits, 'rpd', 0), sl_num(limits, 'tpd', 0)
  local plain_h = sl_num(limits, 'horizon_ms', -1)
  local interval_ms = 1 / req.r
  local jitter = sl_num(limits, 'jitter_ms', 10)

  -- Lanes and tenants: each item resolved to its lane and tenant class.
  local plan = sl_plan(limits)
  local fair, tenant_daily = nil, false
  if plan then
    local names = {}
    for i = 1, n do
      local t = sl_plan_tenant(plan, items[i][4])
      items[i][3] = sl_plan_lane(plan, items[i][3])
      items[i][4] = t
      names[t.name] = true
      if t.daily > 0 then tenant_daily = true end
    end
    if plan.fair then fair = sl_fair_open(plan, st, now, names) end
  else
    for i = 1, n do items[i][3], items[i][4] = nil, nil end
  end

  -- Health (see common.lua). The open -> half_open transition is written
  -- here, by the first call that finds the break over.
  local quota_until = sl_num(st, 'quota_until', 0)
  local bstate, bopen_until = sl_breaker_state(limits, st, now)
  local probe_out = false
  local probe_hint = math.min(1000, sl_num(limits, 'breaker_break_ms', 30000))
  if bstate == 'half_open' then
    if st.breaker_state ~= 'half_open' then
      sl_set(st, 'breaker_state', 'half_open')
      sl_set(st, 'breaker_probe', '')
    end
    local p = st.breaker_probe or ''
    if p ~= '' then
      -- HGET, not HEXISTS: the commands the scripts call are exactly those
      -- deploy/acl.conf grants (docs/security.md).
      if redis.call('HGET', KEYS[3], p) then
        probe_out = true
      else
        sl_set(st, 'breaker_probe', '')
      end
    end
  end

  local active = 0
  if maxc > 0 then active = redis.call('ZCARD', KEYS[4]) end

  local daily, day_changed
  if rpd > 0 or tpd > 0 or tenant_daily then
    daily = sl_hash(KEYS[7])
    local day = math.floor(now / 86400000)
    if sl_num(daily, 'day', -1) ~= day then
      daily = {day = day, requests = 0, tokens = 0}
      day_changed = true
    end
    daily.requests, daily.tokens = sl_num(daily, 'requests', 0), sl_num(daily, 'tokens', 0)
  end
  local to_midnight = sl_ceil(86400000 - (now % 86400000))

  -- The private buckets, made on first use: a lane's capped share of the
  -- effective rate, a tenant's ceiling (absolute, not scaled by AIMD).
  local private = {}
  local function lane_dims(L)
    if L.cap >= 1 then return nil end
    local k = 'l.' .. L.name
    if not private[k] then
      local p = {}
      for _, d in ipairs(dims) do
        local pd = sl_dim(k .. '.' .. d.name, d.r * 60000 * L.cap, math.max(1, math.floor(d.burst * L.cap)), 1, st, jitter)
        pd.i = d.i
        p[#p + 1] = pd
      end
      private[k] = p
    end
    return private[k]
  end
  local function tenant_dims(T)
    if T.crpm <= 0 and T.ctpm <= 0 then return nil end
    local k = 't.' .. T.name
    if not private[k] then
      local p = {}
      if T.crpm > 0 then
        p[#p + 1] = sl_dim(k .. '.requests', T.crpm, math.max(1, math.floor(T.crpm / 60)), 1, st, jitter)
        p[#p].i = 1
      end
      if T.ctpm > 0 then
        p[#p + 1] = sl_dim(k .. '.tokens', T.ctpm, math.max(1, math.floor(T.ctpm / 60)), 1, st, jitter)
        p[#p].i = 2
      end
      private[k] = p
    end
    return private[k]
  end
  -- The earliest slot the private buckets allow for an item of costs cost,
  -- and the fence a grant at s needs on them (like sl_dim_big for the
  -- shared ones). A private dimension's i is the SL_DIMS cost it charges.
  local function private_earliest(p, cost)
    local s = -1e18
    for _, d in ipairs(p or {}) do
      local e = sl_dim_earliest(d, cost[d.i])
      if e > s then s = e end
    end
    return s
  end
  local function private_fence(p, cost, s, fence)
    for _, d in ipairs(p or {}) do
      if sl_dim_big(d, cost[d.i]) and s + d.jitter > fence then fence = s + d.jitter end
    end
    return fence
  end
  local function private_commit(p, cost, s)
    if not p then return end
    for _, d in ipairs(p) do sl_cap_commit(d, cost[d.i], s, st) end
  end
  local function bump(k, v) counts[k] = (counts[k] or 0) + (v or 1) end

  local out = {now_us, 0, 0, 0, sl_ceil(sl_num(st, 'pause_shift_ms', 0))}
  local grants, leases = {}, {}
  local granted, shed, deferred = 0, 0, 0
  local blocked = {}
  for i = 1, n do
    local c, w, L, T, cost = items[i][1], items[i][2], items[i][3], items[i][4], items[i][5]
    local verdict
    local key = L and (L.name .. '|' .. T.name)
    local too_large = (tpd > 0 and c > tpd) or (T and T.ctpm > 0 and c > T.ctpm) or (T and T.daily > 0 and c > T.daily)
    for k = 2, #dims do
      if cost[dims[k].i] > dims[k].per then too_large = true end
    end
    if too_large then
      verdict = {0, 'too_large', -1}
    elseif quota_until > now then
      verdict = {0, 'quota', math.max(1, sl_ceil(quota_until - now))}
    elseif bstate == 'open' then
      verdict = {0, 'breaker', math.max(1, sl_ceil(bopen_until - now))}
    elseif bstate == 'half_open' and probe_out then
      verdict = {0, 'breaker', probe_hint}
    elseif key and blocked[key] then
      -- Items of one lane and tenant stay in order: behind a deferred one.
      verdict = blocked[key]
    elseif daily and ((rpd > 0 and daily.requests + 1 > rpd) or (tpd > 0 and daily.tokens + c > tpd)) then
      verdict = {0, 'daily', to_midnight}
    elseif T and T.daily > 0 and sl_num(daily, 't.' .. T.name .. '.tokens', 0) + c > T.daily then
      verdict = {0, 'tenant_daily', to_midnight}
    elseif maxc > 0 and active >= maxc then
      verdict = {0, 'concurrency', math.max(1, sl_ceil(interval_ms))}
    else
      -- The slot: the latest of now, the previous slot (slots stay monotone,
      -- which the refund bound relies on), the pause and each dimension.
      local s, reason = now, 'rpm'
      if paused_until > s then s, reason = paused_until, 'paused' end
      if last_slot > s then s, reason = last_slot, 'rpm' end
      for _, d in ipairs(dims) do
        local e = sl_dim_earliest(d, cost[d.i])
        if e > s then s, reason = e, d.spec.reason end
      end
      -- While the provider's pause lasts, the pause is the reason: the
      -- schedule behind it is the backlog the pause shifted.
      if paused_until > now then reason = 'paused' end
      -- Lanes and tenants: private buckets, the share, and the horizon.
      local horizon, in_share, ldims, tdims, vt, k, tau, lag = w, true, nil, nil, nil, nil, nil, nil
      -- A deployment's horizon (horizon_ms): slots no further ahead than
      -- this; beyond, the item is deferred and asks again when it is near.
      if plain_h >= 0 and plain_h < horizon then horizon = plain_h end
      if L then
        ldims, tdims = lane_dims(L), tenant_dims(T)
        local shared = s
        local e1, e2 = private_earliest(ldims, cost), private_earliest(tdims, cost)
        if e1 > s then s, reason = e1, 'lane' end
        if e2 > s then s, reason = e2, 'ceiling' end
        if fair then
          -- The deployment time the send occupies: its largest share of a
          -- dimension (dominant-resource style).
          k = 0
          for _, d in ipairs(dims) do
            if cost[d.i] / d.r > k then k = cost[d.i] / d.r end
          end
          tau = req.burst / req.r / fair.w
          vt = sl_num(st, 't.' .. T.name .. '.vt', -1e18)
          lag = sl_fair_v(fair, s) + tau - vt
          in_share = lag >= 0
        end
        -- An item held back by its own bucket or beyond its share may only
        -- take capacity that is free about now (its lane's excess horizon):
        -- reserving further ahead would fence the shared schedule. Within
        -- their shares, the tenant further behind sees a slot first: its
        -- horizon grows with its lag, from the excess horizon at the edge
        -- of its share to the lane's at a full burst behind (start-time
        -- fair queueing, with agents asking in lag order).
        if in_share and s <= shared then
          horizon = L.in_h
          if fair and L.in_h > L.ex_h then
            horizon = L.ex_h + (L.in_h - L.ex_h) * math.min(1, lag / tau)
          end
        else
          horizon = L.ex_h
        end
        if horizon < 0 or horizon > w then horizon = w end
      end
      local fence = s
      for _, d in ipairs(dims) do
        if sl_dim_big(d, cost[d.i]) and s + d.jitter > fence then fence = s + d.jitter end
      end
      if L then fence = private_fence(tdims, cost, s, private_fence(ldims, cost, s, fence)) end
      local wait = s - now
      if wait > w then
        verdict = {0, reason, math.max(1, sl_ceil(wait - w))}
      elseif wait > horizon + 1e-6 then
        local ask = wait - horizon
        local why = reason
        if not in_share then
          why = 'share'
          -- The item is within its share for slots from s_in on, which it
          -- reaches by the time s_in at the latest.
          local s_in = fair.at + fair.w * (vt - tau - fair.v)
          if s_in - now < ask then ask = s_in - now end
        end
        verdict = {2, why, math.max(1, sl_ceil(ask))}
        if key then blocked[key] = verdict end
      else
        -- The record keeps each dimension's cost and the units granted
        -- before it (for a cancel's refund bound, see sl_dim_refund):
        -- tokens,slot,reserved,creq,ctok,tenant,input,output,cin,cout.
        local before = {0, 0, 0, 0}
        for _, d in ipairs(dims) do
          before[d.i] = d.granted
          sl_dim_commit(d, cost[d.i], s, d.q, st)
        end
        last_slot = fence
        next_id = next_id + 1
        local id = tostring(next_id)
        local tname = ''
        if L then
          private_commit(ldims, cost, s)
          private_commit(tdims, cost, s)
          if fair then
            if in_share then
              sl_set(st, 't.' .. T.name .. '.vt', sl_fmt(math.max(vt, sl_fair_v(fair, s)) + k / T.w))
            else
              bump('t.' .. T.name .. '.excess_total')
            end
          end
          if T.daily > 0 then
            local f = 't.' .. T.name .. '.tokens'
            daily[f] = sl_num(daily, f, 0) + c
          end
          tname = T.name
          if L.name ~= '' then bump('l.' .. L.name .. '.granted_total') end
          bump('t.' .. T.name .. '.granted_total')
          bump('t.' .. T.name .. '.tokens_total', c)
        end
        local rec = c .. ',' .. sl_fmt(s) .. ',' .. sl_fmt(now) .. ',' .. before[1] .. ',' .. before[2] .. ','
                    .. tname .. ',' .. cost[3] .. ',' .. cost[4] .. ',' .. before[3] .. ',' .. before[4]
        grants[#grants + 1] = id
        grants[#grants + 1] = rec
        leases[#leases + 1] = sl_fmt(s + lease_ms)
        leases[#leases + 1] = id
        active = active + 1
        if daily then
          daily.requests = daily.requests + 1
          daily.tokens = daily.tokens + c
        end
        verdict = {1, next_id, sl_ceil(wait), c}
        if bstate == 'half_open' then
          probe_out = true
          sl_set(st, 'breaker_probe', id)
          bump('breaker_probes_total')
        end
      end
    end
    if verdict[1] == 1 then
      granted = granted + 1
    elseif verdict[1] == 2 then
      deferred = deferred + 1
      if L and L.name ~= '' then bump('l.' .. L.name .. '.deferred_total') end
    elseif not quiet then
      shed = shed + 1
      bump('shed_' .. verdict[2])
      if L and L.name ~= '' then bump('l.' .. L.name .. '.shed_total') end
      if T then bump('t.' .. T.name .. '.shed_total') end
    end
    out[#out + 1] = verdict
  end

  if paused_until > now then out[2] = sl_ceil(paused_until - now) end
  if req.tat > now then out[3] = sl_ceil(req.tat - now) end
  -- One token backlog for all token dimensions: the longest, so that an
  -- agent losing Redis starts every local token bucket where the fleet's
  -- latest one ends (the safe side).
  for _, d in ipairs(tokd) do
    if d.tat > now and sl_ceil(d.tat - now) > out[4] then out[4] = sl_ceil(d.tat - now) end
  end
  if day_changed then redis.call('DEL', KEYS[7]) end
  if granted > 0 or rescheduled then
    for _, d in ipairs(dims) do sl_dim_save(d, st) end
  end
  if granted > 0 then
    redis.call('HSET', KEYS[3], unpack(grants))
    redis.call('ZADD', KEYS[4], unpack(leases))
    sl_set(st, 'last_slot', sl_fmt(last_slot))
    sl_set(st, 'next_grant', next_id)
  end
  if daily and (granted > 0 or day_changed) then
    local args = {'day', daily.day, 'requests', daily.requests, 'tokens', daily.tokens}
    for f, v in pairs(daily) do
      if string.match(f, '^t%.') then
        args[#args + 1] = f
        args[#args + 1] = v
      end
    end
    redis.call('HSET', KEYS[7], unpack(args))
  end
  counts.granted_total = granted
  counts.shed_total = shed
  counts.deferred_total = deferred
  sl_count(st, counts)
  sl_save_state(st)
  return out
end

-- Counts a shed of an item (lane, tenant as sent) on the deployment KEYS
-- names, as reserve_items counts one it sheds when not quiet.
local function count_shed(lane, tenant, reason)
  local limits, st = sl_limits(), sl_hash(KEYS[2])
  local counts = {shed_total = 1}
  counts['shed_' .. reason] = 1
  local plan = sl_plan(limits)
  if plan then
    local L, T = sl_plan_lane(plan, lane), sl_plan_tenant(plan, tenant)
    if L.name ~= '' then counts['l.' .. L.name .. '.shed_total'] = 1 end
    counts['t.' .. T.name .. '.shed_total'] = 1
  end
  sl_count(st, counts)
  sl_save_state(st)
end

-- Group mode: which member of a deployment group serves each item, decided
-- in this one call (all members' keys on one server: a single Redis or
-- Sentinel; under Cluster the agent routes step by step instead).
-- KEYS: the 11 keys of member 1, then of member 2, ... (11 x m).
-- ARGV: 'group', m, spill_ms, policy (priority | weighted), n, then n x
-- (tokens, max_wait_ms, lane, tenant, order), order the 1-based indexes of
-- the members allowed for the item, comma-separated, in the order to try
-- them (the agent computes tags and the weighted turn).
-- Reply: {now_us, item_1, ..., item_n}, an item being
--   {1, member, grant_id, wait_ms, tokens}  granted on that member
--   {2, member, reason, ask_in_ms}          deferred on that member
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
local RATE_SHED = {rpm = true, tpm = true, itpm = true, otpm = true, paused = true, lane = true, ceiling = true}
local BACK_SHED = {breaker = true, quota = true, concurrency = true}

local function reserve_group()
  local function bad(msg) return redis.error_reply('ERR sluice reserve: group: ' .. msg) end
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
  local items = {}
  for i = 1, n do
    local b = 5 + 5 * (i - 1)
    local c, ti, to = sl_tokens(ARGV[b + 1])
    local w, o = sl_uint(ARGV[b + 2]), ARGV[b + 5]
    if c == nil then
      return bad("item " .. i .. ": tokens must be a non-negative integer or input+output, got '" .. ARGV[b + 1] .. "'")
    end
    if w == nil then
      return bad("item " .. i .. ": max_wait_ms must be a non-negative integer, got '" .. ARGV[b + 2] .. "'")
    end
    local order, seen = {}, {}
    for x in string.gmatch(o .. ',', '([^,]*),') do
      local j = sl_uint(x)
      if j == nil or j < 1 or j > m or seen[j] then
        return bad("item " .. i .. ": order must list distinct members 1.." .. m .. ", got '" .. o .. "'")
      end
      seen[j] = true
      order[#order + 1] = j
    end
    items[i] = {c, w, ARGV[b + 3], ARGV[b + 4], order, sl_costs(c, ti, to)}
  end
  local ALL, members = KEYS, {}
  for j = 1, m do
    local k = {}
    for x = 1, SL_NKEYS do k[x] = ALL[SL_NKEYS * (j - 1) + x] end
    KEYS = k
    local name, err = sl_deployment()
    if not name then return bad('member ' .. j .. ': ' .. string.gsub(err, '^ERR sluice: ', '')) end
    if not redis.call('HGET', k[1], 'rpm') then
      return bad('member ' .. j .. ": unknown deployment '" .. name .. "' (no limits in Redis; configure it first)")
    end
    members[j] = k
  end

  local now_us
  local reply = {}
  for i = 1, n do
    local c, w, lane, tenant, order, cost = items[i][1], items[i][2], items[i][3], items[i][4], items[i][5], items[i][6]
    local function ask(j, wait)
      KEYS = members[j]
      local out = reserve_items({{c, wait, lane, tenant, cost}}, true)
      if not now_us then now_us = out[1] end
      return out[6]
    end
    local ws = math.min(spill, w)
    local tries = policy == 'priority' and #order or 1
    local first, best, best_s, soon, res
    for t = 1, tries do
      local j = order[t]
      local v = ask(j, ws)
      if v[1] == 1 then res = {1, j, v[2], v[3], v[4]} break end
      if v[1] == 2 then res = {2, j, v[2], v[3]} break end
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
      local v = ask(best, w)
      if v[1] == 1 then res = {1, best, v[2], v[3], v[4]}
      elseif v[1] == 2 then res = {2, best, v[2], v[3]} end
    end
    if not res then
      local ra = -1
      if soon then
        if soon > w then ra = math.max(1, sl_ceil(soon - w)) else ra = math.max(1, sl_ceil(soon)) end
      end
      res = {0, first[2], ra}
      KEYS = members[order[1]]
      count_shed(lane, tenant, first[2])
    end
    reply[i + 1] = res
  end
  reply[1] = now_us
  return reply
end

if ARGV[1] == 'group' then return reserve_group() end

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
local items = {}
for i = 1, n do
  local b = 1 + stride * (i - 1)
  local c, ti, to = sl_tokens(ARGV[b + 1])
  local w = sl_uint(ARGV[b + 2])
  if c == nil then
    return redis.error_reply("ERR sluice reserve: item " .. i .. ": tokens must be a non-negative integer or input+output, got '" .. ARGV[b + 1] .. "'")
  end
  if w == nil then
    return redis.error_reply("ERR sluice reserve: item " .. i .. ": max_wait_ms must be a non-negative integer, got '" .. ARGV[b + 2] .. "'")
  end
  items[i] = {c, w, stride == 4 and ARGV[b + 3] or '', stride == 4 and ARGV[b + 4] or '', sl_costs(c, ti, to)}
end

return reserve_items(items, false, limits, st)
