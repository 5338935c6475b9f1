-- settle: closes a batch of grants with what happened, and applies provider
-- feedback fleet-wide.
-- ARGV: n, then n quads (grant_id, actual_tokens, outcome, pause_ms):
--   grant_id       from reserve, or "-" for feedback without a grant
--   actual_tokens  usage the provider reported, -1 = unknown (keep estimate)
--   outcome        ok | throttled | failed | cancelled | quota
--   pause_ms       -1, or a pause the provider asked for (Retry-After, or
--                  remaining=0 with a reset), from now
-- Reply: {now_us, paused_ms, rate_scale, pause_shift_ms, result_1, ..., result_n}
-- where pause_shift_ms is the running total by which pauses have shifted
-- the schedule (agents shift held callers by its growth), and a result is one of
--   settled   the grant was closed
--   unknown   no such grant (already settled, or expired and reclaimed)
--   feedback  a "-" item: only its pause/throttle was applied
-- Token reconciliation: usage below the estimate is refunded when the
-- deployment's `refund` is 1 (bounded so nothing is over-offered, see
-- sl_dim_refund); usage above it is charged. A cancelled grant whose slot
-- has not started gives back its request and tokens. A throttled outcome on
-- a grant reserved after the last decrease lowers rate_scale (AIMD).
-- Health (see common.lua): with the breaker on, ok and failed feed its
-- window while it is closed and open it when the failure ratio is reached;
-- while it is half-open only the probe's settle decides (ok closes, failed
-- opens again). quota (a hard-quota error) takes the deployment out until
-- now + pause_ms, or now + quota_hold_ms when pause_ms is -1; it is not a
-- rate pause and never moves the schedule.

local name, limits, st, err = sl_load()
if not name then return redis.error_reply(err) end

local OUTCOMES = {ok = true, throttled = true, failed = true, cancelled = true, quota = true}
local n = sl_uint(ARGV[1])
if n == nil or n < 1 or #ARGV ~= 1 + 4 * n then
  return redis.error_reply('ERR sluice settle: ARGV must be n followed by n (grant_id, actual_tokens, outcome, pause_ms) quads')
end
local items = {}
for i = 1, n do
  local b = 1 + 4 * (i - 1)
  local id, actual, outcome, pause = ARGV[b + 1], sl_int(ARGV[b + 2]), ARGV[b + 3], sl_int(ARGV[b + 4])
  if id ~= '-' and not sl_uint(id) then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": bad grant id '" .. id .. "'")
  end
  if actual == nil or actual < -1 then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": actual_tokens must be an integer >= -1, got '" .. ARGV[b + 2] .. "'")
  end
  if not OUTCOMES[outcome] then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": outcome must be ok, throttled, failed, cancelled or quota, got '" .. outcome .. "'")
  end
  if pause == nil or pause < -1 then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": pause_ms must be an integer >= -1, got '" .. ARGV[b + 4] .. "'")
  end
  items[i] = {id, actual, outcome, pause}
end

local now, now_us = sl_now(limits)
local counts = {expired_total = sl_reclaim(now)}
local dims, scale = sl_schedule(limits, st, now)
local req, tok = dims[1], dims[2]
local refund_on = sl_num(limits, 'refund', 1) == 1
local paused_until = sl_num(st, 'paused_until', 0)
local last_decrease = sl_num(st, 'last_decrease_at', -1)
local pct = sl_num(limits, 'retry_percent', 10)
local plan = sl_plan(limits)
local tenant_daily = false
if plan then
  for _, t in pairs(plan.tenants) do if t.daily > 0 then tenant_daily = true end end
end
local daily
if sl_num(limits, 'rpd', 0) > 0 or sl_num(limits, 'tpd', 0) > 0 or tenant_daily then daily = sl_hash(KEYS[7]) end

local function bump(k, v) counts[k] = (counts[k] or 0) + (v or 1) end

-- Health: the breaker (only when on) and the hard-quota out.
local brk_on = sl_breaker_on(limits)
local bstate = st.breaker_state or 'closed'
local bprobe = st.breaker_probe or ''
local bwindow = brk_on and sl_breaker_window(limits, st, now)
local break_ms = sl_num(limits, 'breaker_break_ms', 30000)
local quota_until = sl_num(st, 'quota_until', 0)
local function breaker_open()
  bstate = 'open'
  bprobe = ''
  sl_set(st, 'breaker_state', 'open')
  sl_set(st, 'breaker_open_until', sl_fmt(now + break_ms))
  sl_set(st, 'breaker_probe', '')
  sl_set(st, 'breaker_window', '')
  bump('breaker_opened_total')
end
-- Called for each item that settled a grant or was feedback ("-"); an
-- unknown grant (settled before, or reclaimed) counts nothing, so a
-- repeated settle cannot count twice.
local function breaker_settle(id, outcome)
  if bstate == 'closed' then
    if outcome ~= 'ok' and outcome ~= 'failed' then return end
    sl_breaker_feed(bwindow, st, outcome == 'failed')
    local ratio = sl_num(limits, 'breaker_failure_ratio', 0)
    if bwindow.requests >= sl_num(limits, 'breaker_min_requests', 20)
       and bwindow.failures >= ratio * bwindow.requests - 1e-9 then
      breaker_open()
    end
  elseif bstate == 'half_open' and id ~= '-' and id == bprobe then
    -- Only the probe decides. ok closes with an empty window; failed opens
    -- for another break; any other outcome says nothing about the
    -- provider's health, so the next reserve sends a new probe.
    if outcome == 'ok' then
      bstate, bprobe = 'closed', ''
      sl_set(st, 'breaker_state', 'closed')
      sl_set(st, 'breaker_probe', '')
      sl_set(st, 'breaker_window', '')
      bwindow = sl_breaker_window(limits, st, now)
      bump('breaker_closed_total')
    elseif outcome == 'failed' then
      breaker_open()
    else
      bprobe = ''
      sl_set(st, 'breaker_probe', '')
    end
  end
  -- Open: results of requests granted before the breaker opened are
  -- ignored (the break runs its course; the probe decides after it).
end

-- The day's usage moves with what settles learn (a grant of an earlier day
-- no longer counts). The tenant's daily tokens move with the deployment's.
local function daily_adjust(reserved_ms, dreq, dtok, tenant)
  if not daily or sl_num(daily, 'day', -1) ~= math.floor(reserved_ms / 86400000) then return end
  daily.requests = math.max(0, sl_num(daily, 'requests', 0) + dreq)
  daily.tokens = math.max(0, sl_num(daily, 'tokens', 0) + dtok)
  local tf = tenant and ('t.' .. tenant .. '.tokens')
  if tf and daily[tf] then
    daily[tf] = math.max(0, sl_num(daily, tf, 0) + dtok)
    daily._tf = daily._tf or {}
    daily._tf[tf] = true
  end
  daily._dirty = true
end

local out = {now_us, 0, '1', 0}
local deposits, done = 0, {}
local decreased = false
for i = 1, n do
  local id, actual, outcome, pause = items[i][1], items[i][2], items[i][3], items[i][4]
  local result = 'feedback'
  local rec = nil
  if id ~= '-' then
    rec = redis.call('HGET', KEYS[3], id)
    result = rec and 'settled' or 'unknown'
  end
  if rec then
    done[#done + 1] = id
    local c, slot, reserved, creq, ctok, tenant = string.match(rec, '^([^,]+),([^,]+),([^,]+),([^,]+),([^,]+),?(.*)$')
    if tenant == '' then tenant = nil end
    c, slot, reserved, creq, ctok = tonumber(c), tonumber(slot), tonumber(reserved), tonumber(creq), tonumber(ctok)
    bump('settled_' .. outcome)
    if outcome == 'ok' then deposits = deposits + 1 end
    if outcome == 'cancelled' then
      if slot > now then
        sl_dim_refund(req, 1, now, KEYS[5], st, scale, creq)
        if tok then bump('tokens_refunded', math.floor(sl_dim_refund(tok, c, now, KEYS[6], st, scale, ctok) + 0.5)) end
        daily_adjust(reserved, -1, -c, tenant)
      end
    elseif actual >= 0 and outcome ~= 'throttled' then
      local diff = c - actual
      if diff > 0 and refund_on and tok then
        bump('tokens_refunded', math.floor(sl_dim_refund(tok, diff, now, KEYS[6], st, scale) + 0.5))
      elseif diff < 0 and tok then
        sl_dim_charge(tok, -diff, now)
        bump('tokens_charged', -diff)
      end
      if diff < 0 or refund_on then daily_adjust(reserved, 0, -diff, tenant) end
      bump('tokens_estimated', c)
      bump('tokens_actual', actual)
    end
    if outcome == 'throttled' and reserved > last_decrease and not decreased then
      -- The governor believed this send was within quota (it was reserved
      -- after the last decrease): the provider is tighter than configured.
      local floor = sl_num(limits, 'aimd_min_scale', 0.1)
      local ns = scale * sl_num(limits, 'aimd_decrease', 0.7)
      if ns < floor then ns = floor end
      if ns < scale then
        scale = ns
        sl_set(st, 'rate_scale', string.format('%.4f', scale))
        sl_set(st, 'scale_changed_at', sl_fmt(now))
        sl_rescale(st, dims, scale, now)
        bump('decreases')
      end
      last_decrease = now
      sl_set(st, 'last_decrease_at', sl_fmt(now))
      decreased = true
    end
  end
  if outcome == 'throttled' then bump('throttles_seen') end
  if brk_on and result ~= 'unknown' then breaker_settle(id, outcome) end
  if outcome == 'quota' then
    -- A hard quota (insufficient_quota, a spent monthly budget): out until
    -- the provider's reset, or for quota_hold_ms when it gave none. Only
    -- ever extended; each time the deployment goes out is one event.
    local until_ms = now + pause
    if pause < 0 then until_ms = now + sl_num(limits, 'quota_hold_ms', 3600000) end
    if until_ms > now and until_ms > quota_until then
      if quota_until <= now then bump('quota_events_total') end
      quota_until = until_ms
      sl_set(st, 'quota_until', sl_fmt(quota_until))
    end
  elseif pause >= 0 then
    local until_ms = now + pause
    local base = math.max(now, paused_until)
    if until_ms > base then
      -- The outstanding schedule moves behind the pause instead of piling
      -- up at its end: every TAT and the last slot shift by the same amount,
      -- agents shift the callers they hold by it (pause_shift_ms is the
      -- running total they follow), and refunds wait until after it.
      local shift = until_ms - base
      if paused_until <= now then bump('pauses') end
      paused_until = until_ms
      sl_set(st, 'paused_until', sl_fmt(paused_until))
      local ra = sl_num(st, 'refund_after', 0)
      for _, d in ipairs(dims) do
        if d.tat > now then d.tat = d.tat + shift end
        if d.tat > ra then ra = d.tat end
      end
      local ls = sl_num(st, 'last_slot', 0)
      if ls > now then sl_set(st, 'last_slot', sl_fmt(ls + shift)) end
      sl_set(st, 'refund_after', sl_fmt(ra))
      sl_set(st, 'pause_shift_ms', sl_fmt(sl_num(st, 'pause_shift_ms', 0) + shift))
    end
  end
  out[#out + 1] = result
end

if #done > 0 then
  redis.call('HDEL', KEYS[3], unpack(done))
  redis.call('ZREM', KEYS[4], unpack(done))
end
if deposits > 0 then
  local _, cur = sl_retry_window(limits, now)
  redis.call('HINCRBYFLOAT', KEYS[8], cur, deposits * pct)
  redis.call('PEXPIRE', KEYS[8], sl_num(limits, 'retry_ttl_ms', 10000) * 2)
end
if daily and daily._dirty then
  local args = {'requests', daily.requests, 'tokens', daily.tokens}
  for f in pairs(daily._tf or {}) do
    args[#args + 1] = f
    args[#args + 1] = daily[f]
  end
  redis.call('HSET', KEYS[7], unpack(args))
end
for _, d in ipairs(dims) do sl_dim_save(d, st) end
sl_count(st, counts)
sl_save_state(st)
if paused_until > now then out[2] = sl_ceil(paused_until - now) end
out[3] = string.format('%.4f', scale)
out[4] = sl_ceil(sl_num(st, 'pause_shift_ms', 0))
return out
