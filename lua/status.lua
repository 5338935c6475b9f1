-- status: a read-only snapshot of one deployment's live budget, as field /
-- value pairs (like HGETALL) so redis-cli shows it readably.
-- ARGV[1]: liveness window for agents in ms (default 3000); at least the
-- fleet's own (agent_window_ms, which agents write as max(3 heartbeats,
-- silent_hold_ms)), so live_agents counts the agents the heartbeat counts
-- live, a silent one whose share is held included.

-- The limits hash as stored (the reply shows its fields as they are).
local name, limits, st, err = sl_load(true)
if not name then return redis.error_reply(err) end
local window = math.max(sl_uint(ARGV[1] or '3000') or 3000, sl_num(limits, 'agent_window_ms', 0))
local now, now_us = sl_now(limits)
local scale = sl_num(st, 'rate_scale', 1)
if scale < 1 then
  -- What sl_aimd_tick would make of it, without writing.
  local interval = sl_num(limits, 'aimd_interval_ms', 5000)
  local steps = math.floor((now - sl_num(st, 'scale_changed_at', now)) / interval)
  if steps >= 1 then scale = math.min(1, scale + steps * sl_num(limits, 'aimd_increase', 0.05)) end
end
local function ms(x) if x > 0 then return sl_ceil(x) end return 0 end
local sum = 0
do
  local slice = sl_num(limits, 'retry_ttl_ms', 10000) / 10
  local cur = math.floor(now / slice)
  local flat = redis.call('HGETALL', KEYS[8])
  for i = 1, #flat, 2 do
    local idx = tonumber(flat[i])
    if idx and idx > cur - 10 then sum = sum + tonumber(flat[i + 1]) end
  end
end
local daily = sl_hash(KEYS[7])
local today_day = sl_day(limits, now)
local today = today_day
local out = {
  'deployment', name,
  'rpm', limits.rpm, 'tpm', limits.tpm or '0', 'itpm', limits.itpm or '0', 'otpm', limits.otpm or '0',
  -- (A field may be absent: a hash written by hand or by an older
  -- configure. A nil here would shift every pair after it.)
  'burst_requests', limits.burst_requests or string.format('%d', math.max(1, math.floor(sl_num(limits, 'rpm', 0) / 60))),
  'burst_tokens', limits.burst_tokens or string.format('%d', math.max(1, math.floor(sl_num(limits, 'tpm', 0) / 60))),
  'burst_input', limits.burst_input or '1', 'burst_output', limits.burst_output or '1',
  'refund_tokens', limits.refund_tokens or '0', 'refund_input', limits.refund_input or '0',
  'refund_output', limits.refund_output or '1',
  'rate_scale', string.format('%.4f', scale),
}
-- Per dimension: the rate the fleet runs at (after an adopted limit,
-- others' use and AIMD), the limit the provider's headers reported when
-- below the configured one (0: none), others' use per minute as estimated
-- from the headers, and the backlog. Dimensions the deployment does not
-- have show 0.
local dims = sl_dims(limits, st, scale, now)
local held, _, silent_n = sl_silent(limits, now)
for _, spec in ipairs(SL_DIMS) do
  local d = sl_dim_of(dims, spec.name)
  local p = spec.per
  out[#out + 1] = 'effective_' .. p
  out[#out + 1] = string.format('%.2f', d and d.r * 60000 or 0)
  out[#out + 1] = 'adopted_' .. p
  out[#out + 1] = (d and d.r0 * 60000 < d.per - 1e-9) and string.format('%.0f', d.r0 * 60000) or '0'
  out[#out + 1] = 'outside_' .. p
  out[#out + 1] = string.format('%.2f', d and sl_num(st, spec.name .. '_outside', 0) or 0)
  out[#out + 1] = 'held_' .. p
  out[#out + 1] = string.format('%.2f', d and sl_held(d, scale) * 60000 or 0)
  out[#out + 1] = spec.name .. '_backlog_ms'
  out[#out + 1] = ms(sl_num(st, spec.name .. '_tat', 0) - now)
end
for _, kv in ipairs({
  {'silent_agents', silent_n}, {'silent_share', string.format('%.4f', held)},
  {'paused_ms', ms(sl_num(st, 'paused_until', 0) - now)},
  {'outstanding_grants', redis.call('ZCARD', KEYS[4])},
  {'max_concurrency', limits.max_concurrency or '0'},
  {'retry_balance', math.floor((sl_retry_reserve(limits) + sum + 1e-9) / 100)},
  {'live_agents', redis.call('ZCOUNT', KEYS[9], '(' .. sl_fmt(now - window), '+inf')},
  {'rpd', limits.rpd or '0'}, {'tpd', limits.tpd or '0'},
  {'today_requests', (sl_num(daily, 'day', -1) == today) and sl_num(daily, 'requests', 0) or 0},
  {'today_tokens', (sl_num(daily, 'day', -1) == today) and sl_num(daily, 'tokens', 0) or 0},
  {'now_us', string.format('%.0f', now_us)}}) do
  out[#out + 1] = kv[1]
  out[#out + 1] = kv[2]
end
for _, f in ipairs({'granted_total', 'shed_total', 'shed_rpm', 'shed_tpm', 'shed_paused',
                    'shed_daily', 'shed_concurrency', 'shed_too_large', 'settled_ok',
                    'settled_throttled', 'settled_failed', 'settled_cancelled', 'expired_total',
                    'throttles_seen', 'pauses', 'decreases', 'retries_allowed', 'retries_refused',
                    'tokens_estimated', 'tokens_actual', 'tokens_refunded', 'tokens_charged',
                    'input_refunded', 'input_charged', 'output_refunded', 'output_charged',
                    'shed_itpm', 'shed_otpm', 'limit_changes', 'local_requests',
                    'tokens_counted', 'input_counted', 'output_counted', 'abandoned_total'}) do
  out[#out + 1] = f
  out[#out + 1] = st[f] or '0'
end
out[#out + 1] = 'deferred_total'
out[#out + 1] = st.deferred_total or '0'
-- Health: the breaker as the next reserve will see it (an open breaker
-- whose break has passed shows half_open), its window, the quota out.
do
  local bstate, bopen_until = sl_breaker_state(limits, st, now)
  local w = sl_breaker_window(limits, st, now)
  for _, kv in ipairs({{'breaker_state', bstate},
                       {'breaker_open_ms', bstate == 'open' and ms(bopen_until - now) or 0},
                       {'breaker_requests', w.requests}, {'breaker_failures', w.failures},
                       {'breaker_opened_total', st.breaker_opened_total or '0'},
                       {'breaker_closed_total', st.breaker_closed_total or '0'},
                       {'breaker_probes_total', st.breaker_probes_total or '0'},
                       {'quota_out_ms', ms(sl_num(st, 'quota_until', 0) - now)},
                       {'quota_events_total', st.quota_events_total or '0'},
                       {'settled_quota', st.settled_quota or '0'},
                       {'shed_breaker', st.shed_breaker or '0'},
                       {'shed_quota', st.shed_quota or '0'}}) do
    out[#out + 1] = kv[1]
    out[#out + 1] = kv[2]
  end
end
-- Calibrated estimates (common.lua, sl_cal): the ratio in force now (1
-- on a deployment whose estimates are exact), the quantile at the last
-- news, the ratios kept, whether it is learning, the news' age.
do
  local r, learning = sl_cal(limits, st, now)
  local exact = sl_num(limits, 'estimate_exact', 0) == 1
  local kept = 0
  if st.estimate_ratios and st.estimate_ratios ~= '' then
    kept = select(2, string.gsub(st.estimate_ratios, ',', '')) + 1
  end
  local at = tonumber(st.estimate_ratio_at)
  for _, kv in ipairs({{'estimate_ratio', string.format('%.4f', exact and 1 or r)},
                       {'estimate_ratio_learned', st.estimate_ratio or '1.0000'},
                       {'estimate_ratios_kept', kept},
                       {'estimate_learning', (learning and not exact) and 1 or 0},
                       {'estimate_age_ms', at and ms(now - at) or -1},
                       {'estimate_samples', st.estimate_samples or '0'},
                       {'estimate_exact', exact and 1 or 0}}) do
    out[#out + 1] = kv[1]
    out[#out + 1] = kv[2]
  end
end
-- Lanes and tenants, sorted by name: lane.<name>.* and tenant.<name>.*.
local plan = sl_plan(limits)
if plan then
  local names = {}
  for ln in pairs(plan.lanes) do if ln ~= '' then names[#names + 1] = ln end end
  table.sort(names)
  for _, ln in ipairs(names) do
    local L = plan.lanes[ln]
    local p = 'lane.' .. ln .. '.'
    for _, kv in ipairs({{'share', string.format('%.4f', L.cap)},
                         {'horizon_ms', L.in_h},
                         {'granted_total', st['l.' .. ln .. '.granted_total'] or '0'},
                         {'deferred_total', st['l.' .. ln .. '.deferred_total'] or '0'},
                         {'shed_total', st['l.' .. ln .. '.shed_total'] or '0'}}) do
      out[#out + 1] = p .. kv[1]
      out[#out + 1] = kv[2]
    end
  end
  names = {}
  local w = 0
  for tn, t in pairs(plan.tenants) do
    names[#names + 1] = tn
    if sl_num(st, 't.' .. tn .. '.seen', -1e18) >= now - plan.idle_ms then w = w + t.w end
  end
  table.sort(names)
  for _, tn in ipairs(names) do
    local T = plan.tenants[tn]
    local p = 'tenant.' .. tn .. '.'
    local active = sl_num(st, 't.' .. tn .. '.seen', -1e18) >= now - plan.idle_ms
    local today = 0
    if sl_num(daily, 'day', -1) == today_day then today = sl_num(daily, 't.' .. tn .. '.tokens', 0) end
    for _, kv in ipairs({{'weight', string.format('%g', T.w)},
                         {'active', active and 1 or 0},
                         {'share', string.format('%.4f', (active and w > 0) and T.w / w or 0)},
                         {'ceiling_rpm', T.crpm}, {'ceiling_tpm', T.ctpm},
                         {'daily_tokens', T.daily}, {'today_tokens', today},
                         {'granted_total', st['t.' .. tn .. '.granted_total'] or '0'},
                         {'tokens_total', st['t.' .. tn .. '.tokens_total'] or '0'},
                         {'excess_total', st['t.' .. tn .. '.excess_total'] or '0'},
                         {'shed_total', st['t.' .. tn .. '.shed_total'] or '0'}}) do
      out[#out + 1] = p .. kv[1]
      out[#out + 1] = kv[2]
    end
  end
end
return out
