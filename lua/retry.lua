-- retry: may this deployment's fleet retry now? Finagle's RetryBudget:
-- every successful request deposits `retry_percent` units (settle), every
-- allowed retry withdraws 100, deposits and withdrawals expire after
-- retry_ttl_ms (a window of 10 slices), and a floor of
-- retry_min_per_s x ttl_s retries is always available. So within any ttl
-- window: retries <= min_per_s x ttl_s + percent% x successes.
-- ARGV[1]: "withdraw" (default; takes one retry if allowed) or "peek".
-- Reply: {allowed, balance, retry_after_ms}: allowed is 1 or 0, balance the
-- whole retries left after this call, retry_after_ms (when refused) the
-- time until the oldest slice leaves the window.

local name, limits, st, err = sl_load()
if not name then return redis.error_reply(err) end
local mode = ARGV[1] or 'withdraw'
if mode ~= 'withdraw' and mode ~= 'peek' then
  return redis.error_reply("ERR sluice retry: mode must be withdraw or peek, got '" .. mode .. "'")
end

local now = sl_now(limits)
local sum, cur = sl_retry_window(limits, now)
local reserve = sl_retry_reserve(limits)
local balance = reserve + sum
local allowed = balance >= 100 - 1e-9
if allowed and mode == 'withdraw' then
  redis.call('HINCRBYFLOAT', KEYS[8], cur, -100)
  redis.call('PEXPIRE', KEYS[8], sl_num(limits, 'retry_ttl_ms', 10000) * 2)
  balance = balance - 100
  redis.call('HINCRBY', KEYS[2], 'retries_allowed', 1)
elseif not allowed and mode == 'withdraw' then
  redis.call('HINCRBY', KEYS[2], 'retries_refused', 1)
end
local slice = sl_num(limits, 'retry_ttl_ms', 10000) / 10
local retry_after = 0
if not allowed then retry_after = math.max(1, sl_ceil((cur + 1) * slice - now)) end
return {allowed and 1 or 0, math.floor((balance + 1e-9) / 100), retry_after}
