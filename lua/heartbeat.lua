-- heartbeat: an agent says it is alive for this deployment; the number of
-- live agents is what each agent divides the rate by when Redis becomes
-- unreachable (its fallback share).
-- ARGV: agent_id, window_ms (an agent is live if seen within it), and
-- optionally "leave" to deregister at shutdown.
-- Reply: the number of live agents (including this one unless leaving).

local name, err = sl_deployment()
if not name then return redis.error_reply(err) end
local id, window = ARGV[1], sl_uint(ARGV[2] or '')
if not id or id == '' or #id > 256 then return redis.error_reply('ERR sluice heartbeat: agent id must be 1..256 bytes') end
if not window or window < 1 then return redis.error_reply('ERR sluice heartbeat: window_ms must be a positive integer') end
local now = sl_now(sl_hash(KEYS[1]))
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[9], id)
else
  redis.call('ZADD', KEYS[9], sl_fmt(now), id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', '(' .. sl_fmt(now - window))
redis.call('PEXPIRE', KEYS[9], window * 10)
return redis.call('ZCARD', KEYS[9])
