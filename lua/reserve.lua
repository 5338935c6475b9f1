-- reserve: decides a batch of acquires at once. Each item gets a grant (a
-- future slot, as a wait in ms) or a shed verdict; nothing is a yes/no that
-- invites polling. GCRA per dimension in reservation mode.
-- ARGV: n, then n pairs (tokens, max_wait_ms).
-- Reply: {now_us, paused_ms, requests_backlog_ms, tokens_backlog_ms,
--        item_1, ..., item_n} where the backlogs are how far the fleet's
-- schedule reaches past now after this call (an agent that loses Redis
-- starts its local pacing there), and an item is
--   {1, grant_id, wait_ms, tokens}                  a grant
--   {0, reason, retry_after_ms}                     a shed; reason is one of
--        rpm tpm paused daily concurrency too_large; retry_after_ms -1 = never
-- A shed item consumes nothing. now_us is the Redis clock, for tests only:
-- callers use the relative wait.

local name, limits, st, err = sl_load()
if not name then return redis.error_reply(err) end

local n = sl_uint(ARGV[1])
if n == nil or n < 1 or #ARGV ~= 1 + 2 * n then
  return redis.error_reply('ERR sluice reserve: ARGV must be n followed by n (tokens, max_wait_ms) pairs')
end
local items = {}
for i = 1, n do
  local c, w = sl_uint(ARGV[2 * i]), sl_uint(ARGV[2 * i + 1])
  if c == nil then
    return redis.error_reply("ERR sluice reserve: item " .. i .. ": tokens must be a non-negative integer, got '" .. ARGV[2 * i] .. "'")
  end
  if w == nil then
    return redis.error_reply("ERR sluice reserve: item " .. i .. ": max_wait_ms must be a non-negative integer, got '" .. ARGV[2 * i + 1] .. "'")
  end
  items[i] = {c, w}
end

local now, now_us = sl_now(limits)
local counts = {expired_total = sl_reclaim(now)}
local dims, scale = sl_schedule(limits, st, now)
local req, tok = dims[1], dims[2]
local qreq, qtok = KEYS[5], KEYS[6]

local paused_until = sl_num(st, 'paused_until', 0)
local last_slot = sl_num(st, 'last_slot', 0)
local next_id = sl_num(st, 'next_grant', 0)
local lease_ms = sl_num(limits, 'lease_ms', 120000)
local maxc = sl_num(limits, 'max_concurrency', 0)
local tpm = sl_num(limits, 'tpm', 0)
local rpd, tpd = sl_num(limits, 'rpd', 0), sl_num(limits, 'tpd', 0)
local interval_ms = 1 / req.r

local active = 0
if maxc > 0 then active = redis.call('ZCARD', KEYS[4]) end

local daily, day_changed
if rpd > 0 or tpd > 0 then
  daily = sl_hash(KEYS[7])
  local day = math.floor(now / 86400000)
  if sl_num(daily, 'day', -1) ~= day then
    daily = {day = day, requests = 0, tokens = 0}
    day_changed = true
  end
  daily.requests, daily.tokens = tonumber(daily.requests), tonumber(daily.tokens)
end
local to_midnight = sl_ceil(86400000 - (now % 86400000))

local out = {now_us, 0, 0, 0, sl_ceil(sl_num(st, 'pause_shift_ms', 0))}
local grants, leases = {}, {}
local granted, shed = 0, 0
for i = 1, n do
  local c, w = items[i][1], items[i][2]
  local verdict
  if (tpm > 0 and c > tpm) or (tpd > 0 and c > tpd) then
    verdict = {0, 'too_large', -1}
  elseif daily and ((rpd > 0 and daily.requests + 1 > rpd) or (tpd > 0 and daily.tokens + c > tpd)) then
    verdict = {0, 'daily', to_midnight}
  elseif maxc > 0 and active >= maxc then
    verdict = {0, 'concurrency', math.max(1, sl_ceil(interval_ms))}
  else
    -- The slot: the latest of now, the previous slot (slots stay monotone,
    -- which the refund bound relies on), the pause and each dimension.
    local s, reason = now, 'rpm'
    if paused_until > s then s, reason = paused_until, 'paused' end
    if last_slot > s then s, reason = last_slot, 'rpm' end
    local e = sl_dim_earliest(req, 1)
    if e > s then s, reason = e, 'rpm' end
    if tok then
      e = sl_dim_earliest(tok, c)
      if e > s then s, reason = e, 'tpm' end
    end
    -- While the provider's pause lasts, the pause is the reason: the
    -- schedule behind it is the backlog the pause shifted.
    if paused_until > now then reason = 'paused' end
    local wait = s - now
    if wait > w then
      verdict = {0, reason, math.max(1, sl_ceil(wait - w))}
    else
      local fence = s
      if sl_dim_big(req, 1) then fence = s + req.jitter end
      if tok and sl_dim_big(tok, c) and s + tok.jitter > fence then fence = s + tok.jitter end
      local creq, ctok = req.granted, tok and tok.granted or 0
      sl_dim_commit(req, 1, s, qreq, st)
      if tok then sl_dim_commit(tok, c, s, qtok, st) end
      last_slot = fence
      next_id = next_id + 1
      local id = tostring(next_id)
      grants[#grants + 1] = id
      grants[#grants + 1] = c .. ',' .. sl_fmt(s) .. ',' .. sl_fmt(now) .. ',' .. creq .. ',' .. ctok
      leases[#leases + 1] = sl_fmt(s + lease_ms)
      leases[#leases + 1] = id
      active = active + 1
      if daily then
        daily.requests = daily.requests + 1
        daily.tokens = daily.tokens + c
      end
      verdict = {1, next_id, sl_ceil(wait), c}
    end
  end
  if verdict[1] == 1 then
    granted = granted + 1
  else
    shed = shed + 1
    counts['shed_' .. verdict[2]] = (counts['shed_' .. verdict[2]] or 0) + 1
  end
  out[#out + 1] = verdict
end

if paused_until > now then out[2] = sl_ceil(paused_until - now) end
if req.tat > now then out[3] = sl_ceil(req.tat - now) end
if tok and tok.tat > now then out[4] = sl_ceil(tok.tat - now) end
if granted > 0 then
  redis.call('HSET', KEYS[3], unpack(grants))
  redis.call('ZADD', KEYS[4], unpack(leases))
  for _, d in ipairs(dims) do sl_dim_save(d, st) end
  sl_set(st, 'last_slot', sl_fmt(last_slot))
  sl_set(st, 'next_grant', next_id)
  if daily then
    redis.call('HSET', KEYS[7], 'day', daily.day, 'requests', daily.requests, 'tokens', daily.tokens)
  end
elseif day_changed then
  redis.call('HSET', KEYS[7], 'day', daily.day, 'requests', 0, 'tokens', 0)
end
counts.granted_total = granted
counts.shed_total = shed
sl_count(st, counts)
sl_save_state(st)
return out
