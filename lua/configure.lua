-- configure: writes a deployment's limits so every agent applies the same
-- numbers. ARGV is field/value pairs; absent fields take their defaults.
-- Validates everything first: a bad field is an error and changes nothing.
-- Reply: {"OK", changed} where changed is 1 when a rate or burst moved
-- (the next reserve or settle converts the schedule and restarts the
-- refund bound, see sl_dims_sync).

local name, err = sl_deployment()
if not name then return redis.error_reply(err) end
if #ARGV % 2 ~= 0 then return redis.error_reply('ERR sluice configure: ARGV must be field value pairs') end

local function positive(v) return v ~= nil and v > 0 end
local function nonneg(v) return v ~= nil and v >= 0 end
-- field -> {parser, check, description}
local FIELDS = {
  rpm = {sl_uint, positive, 'a positive integer'},
  tpm = {sl_uint, nonneg, 'a non-negative integer (0 = no combined token limit)'},
  itpm = {sl_uint, nonneg, 'a non-negative integer (0 = no input token limit)'},
  otpm = {sl_uint, nonneg, 'a non-negative integer (0 = no output token limit)'},
  burst_requests = {sl_uint, positive, 'a positive integer'},
  burst_tokens = {sl_uint, positive, 'a positive integer'},
  burst_input = {sl_uint, positive, 'a positive integer'},
  burst_output = {sl_uint, positive, 'a positive integer'},
  rpd = {sl_uint, nonneg, 'a non-negative integer (0 = unlimited)'},
  tpd = {sl_uint, nonneg, 'a non-negative integer (0 = unlimited)'},
  max_concurrency = {sl_uint, nonneg, 'a non-negative integer (0 = no cap)'},
  lease_ms = {sl_uint, positive, 'a positive integer'},
  retry_ttl_ms = {sl_uint, function(v) return v ~= nil and v >= 100 end, 'an integer >= 100'},
  retry_min_per_s = {tonumber, nonneg, 'a number >= 0'},
  retry_percent = {tonumber, function(v) return v ~= nil and v >= 0 and v <= 1000 end, 'a number in [0, 1000]'},
  aimd_decrease = {tonumber, function(v) return v ~= nil and v > 0 and v < 1 end, 'a number in (0, 1)'},
  aimd_min_scale = {tonumber, function(v) return v ~= nil and v > 0 and v <= 1 end, 'a number in (0, 1]'},
  aimd_increase = {tonumber, function(v) return v ~= nil and v > 0 and v <= 1 end, 'a number in (0, 1]'},
  aimd_interval_ms = {sl_uint, positive, 'a positive integer'},
  aimd_min_throttles = {sl_uint, positive, 'a positive integer'},
  aimd_window_ms = {sl_uint, positive, 'a positive integer'},
  -- refund: every token dimension at once (older callers); refund_<dim>
  -- wins where given.
  refund = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  refund_tokens = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  refund_input = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  refund_output = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  adapt_limits = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  adapt_outside = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  jitter_ms = {sl_uint, function(v) return v ~= nil and v <= 10000 end, 'an integer in [0, 10000]'},
  -- 429s in a row double the fleet's pause up to this many ms; 0 = off.
  pause_max_ms = {sl_uint, function(v) return v ~= nil and v <= 3600000 end, 'an integer in [0, 3600000] (0 = off)'},
  -- A request count per window of this many ms (Azure); 0 = a bucket.
  requests_window_ms = {sl_uint, function(v) return v ~= nil and v <= 60000 end, 'an integer in [0, 60000] (0 = off)'},
  tokens_rule = {function(v) return v end, function(v) return v == 'sum' or v == 'max' end,
                 "sum (input + max output: Azure) or max (the larger of them: OpenAI)"},
  -- Bedrock's burndown rate: quota tokens per output token in tpm (1 when
  -- absent; settle.lua).
  output_burndown = {tonumber, function(v) return v ~= nil and v > 0 and v <= 100 end, 'a number in (0, 100]'},
  -- The day of the daily limits: a time zone's offsets, "off0,t1,off1,..."
  -- (ms; sl_day), written by the agent from the tz database.
  day_zone = {function(v) return v end,
              function(v) return #v <= 4096 and string.match(v, '^%-?%d+[-,%d]*$') ~= nil end,
              "'off0,t1,off1,...' (integers, ms)"},
  refund_lag_ms = {sl_uint, function(v) return v ~= nil and v <= 60000 end, 'an integer in [0, 60000]'},
  horizon_ms = {sl_int, function(v) return v ~= nil and v >= -1 and v <= 86400000 end, 'an integer in [-1, 86400000] (-1 = up to the max wait)'},
  test_clock_offset_ms = {sl_int, function(v) return v ~= nil end, 'an integer (tests only)'},
  -- Health (see sl_breaker_on): the breaker is off at ratio 0.
  breaker_failure_ratio = {tonumber, function(v) return v ~= nil and v >= 0 and v <= 1 end, 'a number in [0, 1] (0 = breaker off)'},
  breaker_min_requests = {sl_uint, positive, 'an integer >= 1'},
  breaker_window_ms = {sl_uint, function(v) return v ~= nil and v >= 1000 end, 'an integer >= 1000'},
  breaker_break_ms = {sl_uint, function(v) return v ~= nil and v >= 100 end, 'an integer >= 100'},
  quota_hold_ms = {sl_uint, function(v) return v ~= nil and v >= 1000 end, 'an integer >= 1000'},
  -- Partition safety (see sl_silent): an agent not seen within silent_ms is
  -- silent, its share held back while seen within silent_hold_ms (at least
  -- agent_window_ms, within which it is live); 0 = off.
  silent_ms = {sl_uint, nonneg, 'a non-negative integer (0 = off)'},
  agent_window_ms = {sl_uint, nonneg, 'a non-negative integer (0 = off)'},
  silent_hold_ms = {sl_uint, nonneg, 'a non-negative integer'},
  -- Calibrated estimates (see sl_cal): 1 = every estimate is exact (never
  -- calibrated); the ratio's half-life without news; how far ahead an
  -- item that teaches may be granted while the ratio is learned.
  estimate_exact = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  -- What otpm charges at admission (see sl_out_item): the max output, or
  -- the expected output learned from the settles.
  output_charge = {function(v) return v end, function(v) return v == 'max' or v == 'expected' end,
                   "max (the max output) or expected (learned from recent answers)"},
  estimate_half_life_ms = {sl_uint, positive, 'a positive integer'},
  estimate_learn_horizon_ms = {sl_int, function(v) return v ~= nil and v >= -1 and v <= 86400000 end, 'an integer in [-1, 86400000] (-1 = off)'},
}

FIELDS.default_lane = {function(v) return v end, function(v) return string.match(v, '^[%w._-]+$') ~= nil and #v <= 64 end, 'a lane name'}
FIELDS.tenant_idle_ms = {sl_uint, positive, 'a positive integer'}
FIELDS.lane_step_ms = {sl_uint, positive, 'a positive integer'}

-- lane.<name> = "priority,horizon_ms,headroom" and
-- tenant.<name> = "weight,ceiling_rpm,ceiling_tpm,daily_tokens".
local function parse_lane(raw)
  local f = sl_csv(raw)
  local pr, h, hr = sl_uint(f[1]), sl_int(f[2]), tonumber(f[3])
  if #f ~= 3 or not pr or not h or h < -1 or not hr or hr ~= hr or hr < 0 or hr >= 1 then return nil end
  return {priority = pr, horizon = h, headroom = hr}
end
local function parse_tenant(raw)
  local f = sl_csv(raw)
  local w = tonumber(f[1])
  local cr, ct, dt = sl_uint(f[2]), sl_uint(f[3]), sl_uint(f[4])
  if #f ~= 4 or not w or w ~= w or w <= 0 or w > 1e6 or not cr or not ct or not dt then return nil end
  return {w = w}
end
local lanes = {}
local new = {}
for i = 1, #ARGV, 2 do
  local f, raw = ARGV[i], ARGV[i + 1]
  local spec = FIELDS[f]
  local lane, tenant = string.match(f, '^lane%.([%w._-]+)$'), string.match(f, '^tenant%.([%w._-]+)$')
  if lane and #lane <= 64 then
    local l = parse_lane(raw)
    if not l then
      return redis.error_reply("ERR sluice configure: field '" .. f .. "' must be 'priority,horizon_ms,headroom' (integer >= 0, integer >= -1, number in [0, 1)), got '" .. raw .. "'")
    end
    l.name = lane
    lanes[#lanes + 1] = l
    spec = {function(v) return v end, function() return true end, ''}
  elseif tenant and #tenant <= 64 then
    if not parse_tenant(raw) then
      return redis.error_reply("ERR sluice configure: field '" .. f .. "' must be 'weight,ceiling_rpm,ceiling_tpm,daily_tokens' (a number in (0, 1e6], then integers >= 0), got '" .. raw .. "'")
    end
    spec = {function(v) return v end, function() return true end, ''}
  end
  if not spec then return redis.error_reply("ERR sluice configure: unknown field '" .. f .. "'") end
  local v = spec[1](raw)
  if v ~= nil and v ~= v then v = nil end  -- NaN
  if v == math.huge or v == -math.huge then v = nil end
  if not spec[2](v) then
    return redis.error_reply("ERR sluice configure: field '" .. f .. "' must be " .. spec[3] .. ", got '" .. raw .. "'")
  end
  new[f] = v
end
if new.rpm == nil then return redis.error_reply("ERR sluice configure: field 'rpm' is required") end

if new.refund ~= nil then
  for _, f in ipairs({'refund_tokens', 'refund_input', 'refund_output'}) do
    if new[f] == nil then new[f] = new.refund end
  end
  new.refund = nil
end
-- Defaults (SL_DEFAULTS, common.lua) for what the caller left out.
for k, v in pairs(SL_DEFAULTS) do
  if new[k] == nil then new[k] = v end
end
if new.burst_requests == nil then new.burst_requests = math.max(1, math.floor(new.rpm / 60)) end
if new.burst_tokens == nil then new.burst_tokens = math.max(1, math.floor(new.tpm / 60)) end
if new.burst_input == nil then new.burst_input = math.max(1, math.floor(new.itpm / 60)) end
if new.burst_output == nil then new.burst_output = math.max(1, math.floor(new.otpm / 60)) end

-- The lanes' plan (see sl_plan): priorities ranked, 0 first; horizons in
-- bands of lane_step_ms so that a higher class always sees a slot first;
-- each lane capped at 1 - the headroom of the lanes above it.
if #lanes > 0 then
  if new.default_lane ~= nil then
    local found = false
    for _, l in ipairs(lanes) do if l.name == new.default_lane then found = true end end
    if not found then
      return redis.error_reply("ERR sluice configure: field 'default_lane' names no configured lane: '" .. new.default_lane .. "'")
    end
  end
  local prios, seen = {}, {}
  for _, l in ipairs(lanes) do
    if not seen[l.priority] then seen[l.priority] = true; prios[#prios + 1] = l.priority end
  end
  table.sort(prios)
  local rank = {}
  for k, pr in ipairs(prios) do rank[pr] = k - 1 end
  local m, g = #prios, new.lane_step_ms or 10
  local top = lanes[1]
  for _, l in ipairs(lanes) do
    local k = rank[l.priority]
    local above = 0
    for _, o in ipairs(lanes) do if o.priority < l.priority then above = above + o.headroom end end
    if above >= 1 then
      return redis.error_reply("ERR sluice configure: the headroom of the lanes above lane '" .. l.name .. "' adds up to " .. above .. ": it must stay below 1")
    end
    local ex = 2 * (m - 1 - k) * g
    local band = ex + g
    local inh = l.horizon
    if inh < 0 and k > 0 then inh = band end
    -- The top lane reserves up to its max wait, or the deployment's horizon.
    if inh < 0 and (new.horizon_ms or -1) >= 0 then inh = new.horizon_ms end
    if inh >= 0 and inh < ex then ex = inh end
    if inh >= 0 then band = inh end
    new['plan.' .. l.name] = inh .. ',' .. ex .. ',' .. string.format('%.6f', 1 - above) .. ',' .. band .. ','
                             .. (k == 0 and '1' or '0')
    if l.priority < top.priority then top = l end
  end
  if new.default_lane == nil then new.default_lane = top.name end
elseif new.default_lane ~= nil then
  return redis.error_reply("ERR sluice configure: field 'default_lane' needs lanes")
end

local old = sl_hash(KEYS[1])
local changed = 0
for _, f in ipairs({'rpm', 'tpm', 'itpm', 'otpm', 'burst_requests', 'burst_tokens', 'burst_input', 'burst_output'}) do
  if tonumber(old[f]) ~= new[f] then changed = 1 end
end

local args = {}
for k, v in pairs(new) do
  args[#args + 1] = k
  args[#args + 1] = tostring(v)
end
-- The packed form the other scripts read (see sl_limits): the fields that
-- differ from their defaults, as numbers, and the plan derived from the
-- lanes and tenants (sl_plan_scan over exactly what is written above; its
-- presence marks a deployment with lanes or tenants). Numbers go through
-- the same 14 significant digits as tostring() above, so the packed and
-- the hash fields read alike.
local packed = {v = 1, plan = sl_plan_scan(new)}
for k, v in pairs(new) do
  if k ~= 'test_clock_offset_ms' and not string.find(k, '.', 1, true) and SL_DEFAULTS[k] ~= v then
    packed[k] = v
  end
end
args[#args + 1] = 'packed'
args[#args + 1] = cjson.encode(packed)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(args))

-- The schedule remembers the rates it was built at; the next script that
-- loads it converts the outstanding debt to the new ones (sl_dims_sync).
return {'OK', changed}
