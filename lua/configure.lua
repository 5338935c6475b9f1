-- configure: writes a deployment's limits so every agent applies the same
-- numbers. ARGV is field/value pairs; absent fields take their defaults.
-- Validates everything first: a bad field is an error and changes nothing.
-- Reply: {"OK", changed} where changed is 1 when a rate or burst moved
-- (which restarts the refund bound, see sl_rate_changed).

local name, err = sl_deployment()
if not name then return redis.error_reply(err) end
if #ARGV % 2 ~= 0 then return redis.error_reply('ERR sluice configure: ARGV must be field value pairs') end

local function positive(v) return v ~= nil and v > 0 end
local function nonneg(v) return v ~= nil and v >= 0 end
-- field -> {parser, check, description}
local FIELDS = {
  rpm = {sl_uint, positive, 'a positive integer'},
  tpm = {sl_uint, nonneg, 'a non-negative integer (0 = no token limit)'},
  burst_requests = {sl_uint, positive, 'a positive integer'},
  burst_tokens = {sl_uint, positive, 'a positive integer'},
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
  refund = {sl_uint, function(v) return v == 0 or v == 1 end, '0 or 1'},
  jitter_ms = {sl_uint, function(v) return v ~= nil and v <= 10000 end, 'an integer in [0, 10000]'},
  test_clock_offset_ms = {sl_int, function(v) return v ~= nil end, 'an integer (tests only)'},
}

local new = {}
for i = 1, #ARGV, 2 do
  local f, raw = ARGV[i], ARGV[i + 1]
  local spec = FIELDS[f]
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

local defaults = {
  tpm = 0, rpd = 0, tpd = 0, max_concurrency = 0, lease_ms = 120000,
  retry_ttl_ms = 10000, retry_min_per_s = 1, retry_percent = 10,
  aimd_decrease = 0.7, aimd_min_scale = 0.1, aimd_increase = 0.05, aimd_interval_ms = 5000,
  refund = 1, jitter_ms = 10,
}
for k, v in pairs(defaults) do
  if new[k] == nil then new[k] = v end
end
if new.burst_requests == nil then new.burst_requests = math.max(1, math.floor(new.rpm / 60)) end
if new.burst_tokens == nil then new.burst_tokens = math.max(1, math.floor(new.tpm / 60)) end

local old = sl_hash(KEYS[1])
local changed = 0
for _, f in ipairs({'rpm', 'tpm', 'burst_requests', 'burst_tokens'}) do
  if tonumber(old[f]) ~= new[f] then changed = 1 end
end

local args = {}
for k, v in pairs(new) do
  args[#args + 1] = k
  args[#args + 1] = tostring(v)
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(args))

if changed == 1 and old.rpm ~= nil then
  -- Convert the outstanding debt from the old rates to the new ones.
  local st = sl_hash(KEYS[2])
  local scale = sl_num(st, 'rate_scale', 1)
  local now = sl_now(new)
  local olddims, newdims = sl_dims(old, st, scale), sl_dims(new, st, scale)
  local old_r = {}
  for i, d in ipairs(newdims) do old_r[i] = olddims[i] and olddims[i].r or d.r end
  sl_rate_changed(st, newdims, now, old_r)
  for _, d in ipairs(newdims) do sl_dim_save(d, st) end
  sl_save_state(st)
end
return {'OK', changed}
