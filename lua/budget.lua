-- budget: budgets in money (docs/redis-keys.md "Budgets in money"). A
-- request reserves its largest possible cost from every budget it draws
-- from, atomically, before it asks for a slot; its settle corrects the
-- reservation to what it cost; a reservation never settled is charged in
-- full when its lease ends (it may have been sent). So the actual costs
-- of a period never exceed its limit as long as no request costs more
-- than its reservation: the sum of what was charged and what is held
-- never exceeds the limit, and every correction goes down.
--
-- Every key is in one Redis Cluster slot, {$budgets} ($ is in no
-- deployment's name), apart from the deployments':
--   KEYS[1] sluice:{$budgets}:held    hash  reservation id -> "amount;name,day,month;..."
--   KEYS[2] sluice:{$budgets}:leases  zset  reservation id scored by lease expiry (ms)
--   KEYS[3] sluice:{$budgets}:clock   hash  test_clock_offset_ms (tests only; absent)
--   KEYS[3 + i] sluice:{$budgets}:b:<name>  hash  one budget (below)
-- Amounts are integers in 1e-6 of the budget's currency (the agent prices
-- usage exactly, lib/core/budget.c). Each budget is described on every
-- call by 7 ARGV: name, currency, daily, monthly, total (limits, 0 =
-- none), zone ("off0,t1,off1,...", the time zone's UTC offsets in ms as
-- tz_changes writes them; "" = UTC), warn_at (share of a limit).
--
-- ARGV: 'reserve', nb, nb x budget, n, n x (rid, amount, lease_ms, k,
--   k x index of a budget above, 1-based): the items in order, each all
--   or none as if alone (an agent's requests of one loop turn in one
--   call); the reply is one of these per item, its kind first (SL_GRANT 1,
--   SL_SHED 0, SL_DEFER 2: common.lua's, vocab.h's SLUICE_VERDICT_MAP):
--   -> {1, left, warn}: left the least any limit has left after it; warn
--      '<budget> <period>[; <budget> <period>...]' for the limits this
--      grant first took past their warn_at in their period, else 0
--   -> {0, name, period, left, renew_ms, limit}: shed (nothing written
--      but the budget's sheds count): it would not fit even were every
--      reservation held settled at nothing; period day|month|total;
--      renew_ms until the period renews, -1 when it never does or the
--      request costs more than the whole limit
--   -> {2, name, period, left, renew_ms, limit}: not now (nothing
--      written): it fits once requests in flight settle below their
--      reservations; the agent asks again within the request's max wait
-- ARGV: 'settle', n, n x (rid, actual, skip) -> {found_1, ..., found_n}:
--      0 for a reservation no longer held (charged in full at its lease
--      end); skip: budgets (comma-separated) that get the reservation back
--      whole instead (a group's request reserved from every member's
--      budgets; the member that served it keeps the charge on its own)
-- ARGV: 'status', nb, nb x budget -> per budget a flat list of field,
--      value pairs, the periods rolled to now (nothing written but the
--      charges of reservations whose lease ended)

local held_key, leases_key = KEYS[1], KEYS[2]
if #KEYS < 3 or held_key ~= 'sluice:{$budgets}:held' or leases_key ~= 'sluice:{$budgets}:leases'
    or KEYS[3] ~= 'sluice:{$budgets}:clock' then
  return redis.error_reply('ERR sluice budget: KEYS must start sluice:{$budgets}:held, sluice:{$budgets}:leases, '
                           .. 'sluice:{$budgets}:clock')
end
local now = sl_now({test_clock_offset_ms = redis.call('HGET', KEYS[3], 'test_clock_offset_ms')})
now = math.floor(now)

-- ---- calendar ----

-- Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  if m <= 2 then y = y + 1 end
  return y, m, d
end

-- The zone's offset at t (ms) from its spec "off0,t1,off1,...".
local function offset_at(spec, t)
  if spec == '' then return 0 end
  local v = {}
  for x in string.gmatch(spec, '[^,]+') do v[#v + 1] = tonumber(x) end
  local off = v[1] or 0
  for j = 2, #v - 1, 2 do
    if v[j] > t then break end
    off = v[j + 1]
  end
  return off
end

-- The UTC ms of local midnight starting local day dn.
local function local_midnight(spec, dn)
  local l = dn * 86400000
  local guess = l - offset_at(spec, l)
  return l - offset_at(spec, guess)
end

-- The periods at now: day key, month key, ms to the next day and month.
local function periods(spec)
  local dn = math.floor((now + offset_at(spec, now)) / 86400000)
  local y, m, d = civil_from_days(dn)
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  local day = string.format('%04d-%02d-%02d', y, m, d)
  local month = string.format('%04d-%02d', y, m)
  return day, month, local_midnight(spec, dn + 1) - now, local_midnight(spec, days_from_civil(ny, nm, 1)) - now
end

-- ---- budgets ----

local function num(h, f) return tonumber(h[f]) or 0 end

-- An amount as Redis stores it: an integer, never in exponent form.
local function amt(x) return string.format('%.0f', x) end

-- 1 when the space-separated list has tag.
local function has_token(list, tag)
  for t in string.gmatch(list, '%S+') do
    if t == tag then return true end
  end
  return false
end

-- Budget i of the ARGV list starting at base: its hash rolled to now.
local function load_budget(i, base)
  local a = base + (i - 1) * 7
  local b = {key = KEYS[3 + i], name = ARGV[a], currency = ARGV[a + 1],
             daily = tonumber(ARGV[a + 2]) or 0, monthly = tonumber(ARGV[a + 3]) or 0,
             total = tonumber(ARGV[a + 4]) or 0, zone = ARGV[a + 5] or '', warn_at = tonumber(ARGV[a + 6]) or 1,
             warn_text = ARGV[a + 6] or '1'}
  if b.key ~= 'sluice:{$budgets}:b:' .. (b.name or '') then
    error('sluice budget: KEYS[' .. (3 + i) .. '] must be sluice:{$budgets}:b:' .. tostring(b.name))
  end
  local h = sl_hash(b.key)
  b.day, b.month, b.day_renew, b.month_renew = periods(b.zone)
  b.rolled_day = h.day ~= b.day
  b.rolled_month = h.month ~= b.month
  b.day_spent = b.rolled_day and 0 or num(h, 'day_spent')
  b.day_reserved = b.rolled_day and 0 or num(h, 'day_reserved')
  b.month_spent = b.rolled_month and 0 or num(h, 'month_spent')
  b.month_reserved = b.rolled_month and 0 or num(h, 'month_reserved')
  b.total_spent, b.total_reserved = num(h, 'total_spent'), num(h, 'total_reserved')
  b.warned = h.warned or ''
  b.h = h
  return b
end

local function write_budget(b, extra)
  local args = {'currency', b.currency, 'unit', '1e-6 ' .. b.currency, 'zone', b.zone == '' and 'UTC' or 'configured',
                'daily_limit', amt(b.daily), 'monthly_limit', amt(b.monthly), 'total_limit', amt(b.total),
                'warn_at', b.warn_text, 'day', b.day, 'day_spent', amt(b.day_spent),
                'day_reserved', amt(b.day_reserved), 'month', b.month, 'month_spent', amt(b.month_spent),
                'month_reserved', amt(b.month_reserved), 'total_spent', amt(b.total_spent),
                'total_reserved', amt(b.total_reserved), 'warned', b.warned}
  for k, v in pairs(extra or {}) do args[#args + 1] = k; args[#args + 1] = v end
  redis.call('HSET', b.key, unpack(args))
end

-- What each limit has left: {period, limit, left, renew_ms} per limit set.
local function limits_of(b)
  local out = {}
  if b.daily > 0 then out[#out + 1] = {'day', b.daily, b.daily - b.day_spent - b.day_reserved, b.day_renew} end
  if b.monthly > 0 then
    out[#out + 1] = {'month', b.monthly, b.monthly - b.month_spent - b.month_reserved, b.month_renew}
  end
  if b.total > 0 then out[#out + 1] = {'total', b.total, b.total - b.total_spent - b.total_reserved, -1} end
  return out
end

-- Moves one reservation (amount reserved in periods day, month of the
-- budget) to spent at actual.
local function charge(b, day, month, amount, actual)
  if b.day == day then
    b.day_reserved = math.max(0, b.day_reserved - amount)
    b.day_spent = b.day_spent + actual
  end
  if b.month == month then
    b.month_reserved = math.max(0, b.month_reserved - amount)
    b.month_spent = b.month_spent + actual
  end
  b.total_reserved = math.max(0, b.total_reserved - amount)
  b.total_spent = b.total_spent + actual
end

-- Settles reservation rid at actual (nil: in full); the budgets in skip
-- (a set) at nothing. Returns 1 when held.
local function settle_one(rid, actual, skip)
  local rec = redis.call('HGET', held_key, rid)
  if not rec then return 0 end
  local amount
  local touched = {}
  for part in string.gmatch(rec, '[^;]+') do
    if not amount then
      amount = tonumber(part)
      if actual == nil then actual = amount end
    else
      local name, day, month = string.match(part, '^([^,]+),([^,]+),([^,]+)$')
      local key = 'sluice:{$budgets}:b:' .. name
      local h = sl_hash(key)
      if h.currency then
        local b = {key = key, currency = h.currency, zone = h.zone, day = h.day, month = h.month,
                   day_spent = num(h, 'day_spent'), day_reserved = num(h, 'day_reserved'),
                   month_spent = num(h, 'month_spent'), month_reserved = num(h, 'month_reserved'),
                   total_spent = num(h, 'total_spent'), total_reserved = num(h, 'total_reserved')}
        charge(b, day, month, amount, (skip and skip[name]) and 0 or actual)
        redis.call('HSET', key, 'day_reserved', amt(b.day_reserved), 'day_spent', amt(b.day_spent),
                   'month_reserved', amt(b.month_reserved), 'month_spent', amt(b.month_spent),
                   'total_reserved', amt(b.total_reserved), 'total_spent', amt(b.total_spent))
        touched[#touched + 1] = key
      end
    end
  end
  redis.call('HDEL', held_key, rid)
  redis.call('ZREM', leases_key, rid)
  return 1, touched
end

-- Reservations whose lease ended: charged in full (they may have been
-- sent, and nobody will say what they cost).
local function expire()
  local ids = redis.call('ZRANGEBYSCORE', leases_key, '-inf', now, 'LIMIT', 0, 64)
  for _, rid in ipairs(ids) do
    local found, touched = settle_one(rid, nil)
    if found == 1 then
      for _, key in ipairs(touched) do redis.call('HINCRBY', key, 'expired', 1) end
    end
  end
end

local op = ARGV[1]
-- One item of a reserve call: amount from the budgets bs (loaded and
-- rolled), all or none. Returns its reply; updates bs in memory.
local function reserve_item(rid, amount, lease_ms, bs)
  -- The same request asked again (its first call timed out, or the
  -- connection dropped, after Redis ran it): it is held already, so the
  -- grant stands and only its lease is renewed. Reserved again, the
  -- amount would be held twice with one record to release it. (HGET, not
  -- HEXISTS: deploy/acl.conf grants the scripts' commands and no more.)
  if redis.call('HGET', held_key, rid) then
    local left = false
    for _, b in ipairs(bs) do
      for _, l in ipairs(limits_of(b)) do
        if not left or l[3] < left then left = l[3] end
      end
    end
    redis.call('ZADD', leases_key, now + lease_ms, rid)
    return {SL_GRANT, left or 0, 0}
  end
  local wait = false
  for _, b in ipairs(bs) do
    for _, l in ipairs(limits_of(b)) do
      if amount > l[3] then
        local reserved = (l[1] == 'day' and b.day_reserved) or (l[1] == 'month' and b.month_reserved)
                         or b.total_reserved
        if amount > l[3] + reserved then
          -- It would not fit were every reservation settled at nothing.
          local renew = l[4]
          if amount > l[2] then renew = -1 end
          b.sheds_add = b.sheds_add + 1
          return {SL_SHED, b.name, l[1], math.max(0, l[3]), renew, l[2]}
        end
        -- It fits once requests in flight cost less than their
        -- reservations: the agent asks again within the max wait.
        if not wait then wait = {SL_DEFER, b.name, l[1], math.max(0, l[3]), l[4], l[2]} end
      end
    end
  end
  if wait then return wait end
  local left, warn = false, 0
  local rec = {tostring(amount)}
  for _, b in ipairs(bs) do
    b.day_reserved = b.day_reserved + amount
    b.month_reserved = b.month_reserved + amount
    b.total_reserved = b.total_reserved + amount
    b.granted_add = b.granted_add + 1
    local mark = b.warned
    for _, l in ipairs(limits_of(b)) do
      local l_left = l[3]
      if not left or l_left < left then left = l_left end
      local tag = l[1] == 'day' and b.day or (l[1] == 'month' and b.month or 'total')
      if l[2] - l_left >= b.warn_at * l[2] and not has_token(mark, tag) then
        warn = (warn == 0 and '' or (warn .. '; ')) .. b.name .. ' ' .. l[1]
        mark = mark == '' and tag or (mark .. ' ' .. tag)
      end
    end
    -- Only the current periods' marks are kept.
    local kept = {}
    for t in string.gmatch(mark, '%S+') do
      if t == b.day or t == b.month or t == 'total' then kept[#kept + 1] = t end
    end
    b.warned = table.concat(kept, ' ')
    b.touched = true
    rec[#rec + 1] = b.name .. ',' .. b.day .. ',' .. b.month
  end
  redis.call('HSET', held_key, rid, table.concat(rec, ';'))
  redis.call('ZADD', leases_key, now + lease_ms, rid)
  return {SL_GRANT, left or 0, warn}
end

if op == 'reserve' then
  -- 'reserve', nb, nb x 7 budget fields, n, n x (rid, amount, lease_ms,
  -- k, k x budget index 1..nb): the items in order, each as if alone.
  expire()
  local nb = tonumber(ARGV[2]) or 0
  local n = tonumber(ARGV[3 + 7 * nb]) or -1
  if nb < 1 or #KEYS ~= 3 + nb or n < 0 then
    return redis.error_reply('ERR sluice budget: reserve takes nb, nb x 7 budget fields, n, n x (rid, amount, '
                             .. 'lease_ms, k, k x index) and 3 + nb KEYS')
  end
  local all = {}
  for i = 1, nb do
    local b = load_budget(i, 3)
    b.sheds_add, b.granted_add = 0, 0
    all[i] = b
  end
  -- Every item checked before any is reserved: an error changes nothing
  -- (reserved one by one, the items before a bad one were held, their
  -- amounts never added to the budgets).
  local items = {}
  local a = 4 + 7 * nb
  for i = 1, n do
    local rid, amount, lease_ms, k = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    if not rid or not amount or amount < 0 or not lease_ms or not k or k < 1 then
      return redis.error_reply('ERR sluice budget: reserve item ' .. i .. ': rid, amount >= 0, lease_ms, k >= 1')
    end
    local bs = {}
    for j = 1, k do
      local b = all[tonumber(ARGV[a + 3 + j]) or 0]
      if not b then
        return redis.error_reply('ERR sluice budget: reserve item ' .. i .. ': a budget index out of 1..' .. nb)
      end
      bs[j] = b
    end
    a = a + 4 + k
    items[i] = {rid, math.floor(amount), lease_ms, bs}
  end
  local out = {}
  for i, it in ipairs(items) do out[i] = reserve_item(it[1], it[2], it[3], it[4]) end
  for _, b in ipairs(all) do
    if b.touched then
      write_budget(b, {granted = num(b.h, 'granted') + b.granted_add, sheds = num(b.h, 'sheds') + b.sheds_add})
    elseif b.sheds_add > 0 then
      redis.call('HINCRBY', b.key, 'sheds', b.sheds_add)
    end
  end
  return out
elseif op == 'settle' then
  expire()
  local n = tonumber(ARGV[2]) or -1
  if n < 0 or #ARGV ~= 2 + 3 * n then
    return redis.error_reply('ERR sluice budget: settle takes n, then n x (rid, actual, skip)')
  end
  for i = 1, n do
    local actual = tonumber(ARGV[1 + 3 * i])
    if not actual or actual < 0 then
      return redis.error_reply("ERR sluice budget: an actual cost must be an integer >= 0, got '"
                               .. tostring(ARGV[1 + 3 * i]) .. "'")
    end
  end
  local out = {}
  for i = 1, n do
    local skip = {}
    for name in string.gmatch(ARGV[2 + 3 * i], '[^,]+') do skip[name] = true end
    out[i] = settle_one(ARGV[3 * i], math.floor(tonumber(ARGV[1 + 3 * i])), skip)
  end
  return out
elseif op == 'status' then
  -- The agents look every 2 s: reservations whose lease ended are
  -- charged here too, so an idle fleet's budgets show them.
  expire()
  local nb = tonumber(ARGV[2]) or 0
  if nb < 1 or #KEYS ~= 3 + nb then
    return redis.error_reply('ERR sluice budget: status takes nb, nb x 7 budget fields and 3 + nb KEYS')
  end
  local out = {}
  for i = 1, nb do
    local b = load_budget(i, 3)
    out[i] = {'name', b.name, 'currency', b.currency, 'day', b.day, 'daily_limit', b.daily,
              'day_spent', b.day_spent, 'day_reserved', b.day_reserved, 'day_renew_ms', b.day_renew,
              'month', b.month, 'monthly_limit', b.monthly, 'month_spent', b.month_spent,
              'month_reserved', b.month_reserved, 'month_renew_ms', b.month_renew,
              'total_limit', b.total, 'total_spent', b.total_spent, 'total_reserved', b.total_reserved,
              'granted', num(b.h, 'granted'), 'sheds', num(b.h, 'sheds'), 'expired', num(b.h, 'expired'),
              'warned', b.warned}
    for k = 2, #out[i], 2 do
      if type(out[i][k]) == 'number' then out[i][k] = amt(out[i][k]) end
    end
  end
  return out
end
return redis.error_reply("ERR sluice budget: the first ARGV must be reserve, settle or status, got '"
                         .. tostring(op) .. "'")
