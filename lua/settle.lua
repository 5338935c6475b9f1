-- settle: closes a batch of grants with what happened, and applies provider
-- feedback fleet-wide.
-- ARGV: n, then n quads (grant_id, actual, outcome, pause_ms), or
-- 'feedback', n, then n quints (grant_id, actual, outcome, pause_ms,
-- seen) where
--   grant_id  from reserve, or "-" for feedback without a grant
--   actual    usage the provider reported: -1 unknown (keep the estimate),
--             n (combined tokens), input+output, or input+output+cache_read
--             (the part of the input read from the prompt cache)
--   outcome   ok | throttled | failed | cancelled | quota
--   pause_ms  -1, or a pause the provider asked for (Retry-After, or
--             remaining=0 with a reset), from now
--   seen      what the response's rate-limit headers said, "-" for
--             nothing: "r=L/R,t=L/R,i=L/R,o=L/R" with the limit L per
--             minute and the remaining R of requests, tokens, input and
--             output tokens (either may be empty; dimensions may be left out)
-- Reply: {now_us, paused_ms, rate_scale, pause_shift_ms, result_1, ...,
-- result_n} and, in the feedback form, rates after them, where pause_shift_ms is the running total by which
-- pauses have shifted the schedule (agents shift held callers by its
-- growth), a result is one of
--   settled   the grant was closed
--   unknown   no such grant (already settled, or expired and reclaimed)
--   feedback  a "-" item: only its pause/throttle was applied
-- and rates is, per dimension of the deployment, {name, limit per minute
-- in force (the configured one, or the lower one its headers reported),
-- effective per minute, others' use per minute, the part of the rate held
-- back for silent agents per minute (sl_silent)} flattened. A last ARGV
-- '@timed' appends the call's own time in µs (sl_timed in common.lua).
--
-- Charge rules (docs/providers.md). A grant charged each dimension its
-- estimate; the settle corrects a dimension to what the provider counts
-- only where the deployment says the provider does (refund_<dim> = 1:
-- Anthropic's output tokens, corrected to the actual output at the end of
-- the request), bounded so nothing is over-offered (sl_dim_refund). Where
-- the provider charged the estimate at admission for good (Azure's and
-- OpenAI's tokens, Anthropic's input) usage below the estimate gives back
-- nothing; usage above what was charged is charged (the provider counted
-- more than the estimate: a longer prompt than estimated). The daily
-- counters and the usage figures follow the actual usage in every case. A
-- cancelled grant whose slot has not started was never sent: it gives
-- back its request and its tokens in every dimension.
--
-- Evidence, not one 429 (docs/providers.md, "What sluice learns"):
--  * a reported limit below the configured one is adopted fleet-wide
--    (<dim>_adopted), and dropped when the headers report the configured
--    one again;
--  * a reported remaining below what the fleet's own sends leave means
--    someone else uses the key: the rate others use is estimated from the
--    provider's bucket (its refill less the fleet's sends less the change
--    of remaining) and taken off the effective rate (<dim>_outside), and
--    given back as the evidence goes;
--  * a 429 only pauses (per Retry-After); the rate is cut by aimd_decrease
--    only when aimd_min_throttles 429s whose headers explain nothing
--    arrive within aimd_window_ms.
-- Health (see common.lua): with the breaker on, ok and failed feed its
-- window while it is closed and open it when the failure ratio is reached;
-- while it is half-open only the probe's settle decides (ok closes, failed
-- opens again). quota (a hard-quota error) takes the deployment out until
-- now + pause_ms, or now + quota_hold_ms when pause_ms is -1; it is not a
-- rate pause and never moves the schedule.

local name, limits, st, err = sl_load()
if not name then return redis.error_reply(err) end

local OUTCOMES = {ok = true, throttled = true, failed = true, cancelled = true, quota = true}
local ext = ARGV[1] == 'feedback'
local base, stride = 1, 4
if ext then base, stride = 2, 5 end
local n = sl_uint(ARGV[base])
if n == nil or n < 1 or #ARGV ~= base + stride * n then
  return redis.error_reply('ERR sluice settle: ARGV must be n followed by n (grant_id, actual, outcome, pause_ms) quads, or feedback, n and n (grant_id, actual, outcome, pause_ms, seen) quints')
end
-- "r=600/541,t=150000/" -> {[1] = {600, 541}, [2] = {150000, nil}}, by SL_DIMS index.
local LETTER = {}
for i, spec in ipairs(SL_DIMS) do LETTER[spec.letter] = i end
local function parse_seen(v)
  local seen = {}
  if v == '-' or v == '' then return seen end
  for part in string.gmatch(v .. ',', '([^,]*),') do
    local l, lim, rem = string.match(part, '^(%a)=(%d*)/(%d*)$')
    local i = l and LETTER[l]
    if not i or #lim > 15 or #rem > 15 then return nil end
    seen[i] = {tonumber(lim), tonumber(rem)}
  end
  return seen
end
local items = {}
for i = 1, n do
  local b = base + stride * (i - 1)
  local id, outcome, pause = ARGV[b + 1], ARGV[b + 3], sl_int(ARGV[b + 4])
  local usage = sl_usage(ARGV[b + 2])
  if id ~= '-' and not sl_uint(id) then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": bad grant id '" .. id .. "'")
  end
  if usage == nil then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": actual must be -1, a non-negative integer, input+output or input+output+cache_read (cache_read <= input), got '" .. ARGV[b + 2] .. "'")
  end
  if not OUTCOMES[outcome] then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": outcome must be ok, throttled, failed, cancelled or quota, got '" .. outcome .. "'")
  end
  if pause == nil or pause < -1 then
    return redis.error_reply("ERR sluice settle: item " .. i .. ": pause_ms must be an integer >= -1, got '" .. ARGV[b + 4] .. "'")
  end
  local seen = {}
  if ext then
    seen = parse_seen(ARGV[b + 5])
    if not seen then
      return redis.error_reply("ERR sluice settle: item " .. i .. ": seen must be - or letter=limit/remaining pairs (letters r t i o), comma-separated, got '" .. ARGV[b + 5] .. "'")
    end
  end
  items[i] = {id, usage, outcome, pause, seen}
end

local now, now_us = sl_now(limits)
local counts = {expired_total = sl_reclaim(now, limits)}
local dims, scale = sl_schedule(limits, st, now)
local req = dims[1]
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
  if not daily or sl_num(daily, 'day', -1) ~= sl_day(limits, reserved_ms) then return end
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

-- ---- evidence from the headers (docs/providers.md) -------------------------
-- The provider's bucket of a dimension, seen through the remaining R that
-- a response reports just after admitting a grant (slot s, the fleet's own
-- units granted up to and including it U): between two such observations
-- it refilled at the limit's rate r0, lost the fleet's sends (U2 - U1) and
-- whatever others sent on the same key:
--     others = r0 (s2 - s1) - (U2 - U1) - (R2 - R1)
-- as long as the bucket was not full (a full bucket wastes refill) and did
-- not run dry (so only while R stays below cap - cost, cap the largest
-- R + cost seen, never above the provider's capacity; near it, the
-- estimate decays). Others' rate is smoothed over observations at least
-- OBS_SPAN_MS apart (the remaining counts are whole units, so a short span
-- is all noise; a change beyond the noise is taken at once, smaller ones
-- are smoothed) and taken off the effective rate. The fleet may send a
-- whole burst B at once, so the provider's bucket must keep B: a remaining
-- below it is a deficit, repaid over DEFICIT_MS so that the bucket refills
-- before the next 429 tells. Dimensions the provider corrects
-- at the end of a request (refund on) are not observed: their remaining
-- depends on other requests' outcomes, which the fleet does not know yet.
local OBS_SPAN_MS, OBS_GAIN, DEFICIT_MS = 1000, 0.3, 5000
-- Held grants follow others' rate in steps of OBS_RT_STEP of the limit, by
-- at most 1 / OBS_RT_FLOOR at once (see observe).
local OBS_RT_STEP, OBS_RT_FLOOR = 0.05, 0.5
local adapt_limits = sl_num(limits, 'adapt_limits', 1) == 1
local adapt_outside = sl_num(limits, 'adapt_outside', 1) == 1
local retime_dims, retime_to = {}, {}
local retarget = false
-- Calibration from the headers (docs/redis-keys.md, "Calibrated
-- estimates"): a settle without usage of a grant that teaches sets
-- obs_cal to its record's sums of the raw input estimates and their
-- charged input granted up to it (fields 14 and 15), which observe keeps
-- with its base (<dim>_hobs) and hdr_calibrate reads a span's ratio from
-- (hdr_news, learned with the usage's at the end).
local obs_cal, hdr_news, hdr_low = nil, {}, nil
local HDR_SPREAD = 1.1
-- The one dimension read for it: the input tokens where the deployment
-- has them, else the combined tokens (as Azure adds input and max output;
-- not OpenAI's larger of the two, tokens_rule max).
local hdr_dim = limits.tokens_rule ~= 'max' and 'tokens' or nil
for _, d in ipairs(dims) do
  if d.name == 'input' then hdr_dim = 'input' end
end
-- The part of a span's reading of others' use (units) that the
-- estimate's ratio explains, taken as one more ratio. Without usage the
-- provider's count of the fleet's prompts shows only in the remaining
-- counts, where it reads as others' use: followed that way alone, the
-- ratio was never learned, every grant went out at the first guess and
-- the excess was caught up after the fact (cjk-no-usage: windows up to
-- 1.23x). The span's raw input (draw) and its charge (din) are exact
-- (the records' sums); the ratio that makes the provider's count of that
-- input the reading is k = (din + units) / draw.
--
-- A neighbour's excess does not scale with the prompts the fleet sent,
-- a ratio's does: readings of a ratio agree (3.14..3.28 for prompts
-- counting 3.2x), a neighbour's do not (1.5..2.6 for a paced 30 % one).
-- So, while the ratio is learned:
--  * the first reading is on probation (cal_hdr_first, "k:h0:i0:room:x"):
--    its k is in force for the grants that follow, but it is others' use
--    as before (the lump rule) and nothing is charged for it;
--  * the second, if within HDR_SPREAD of it, accepts both: the larger k
--    is charged for both spans, for the teaching sends before the first
--    base (at most the room the provider's bucket was short of its depth
--    then) and for the grants made since this one (in flight or held at
--    the first guess: they settle after the window they go out in), as a
--    usage would have been; what the lump rule made of the first reading
--    is undone (observe: 'accept'); later readings charge only the
--    difference for the part charged ahead (cal_hdr_upto, "raw:in:k");
--  * a second that disagrees takes the first's place on probation, once
--    (cal_hdr_tries: the first span may be noise);
--  * a reading beyond HDR_SPREAD of those kept, or a second disagreement
--    in a row, is not a ratio: the ratio goes, the header reading is off
--    for a half-life (cal_hdr_off_at), and the excess is others' use,
--    with what the ratio in force charged the span's grants added back
--    (charged at it, a neighbour's span read small and others' use was
--    learned over ten seconds: windows 1.05x).
-- Taken at once, a neighbour's lump in the first span became a ratio of
-- 7 that no later reading corrected (a full bucket reads nothing), and
-- the fleet sent 57 % of the limit (test_header_calibration); and a
-- neighbour there from the start was charged as the fleet's shortfall,
-- leaving its schedule that far behind the provider's bucket for good.
--
-- Learned: a reading above the noise is others' use, as with usage (a
-- neighbour that came, a lump); one within it keeps the ratio fresh; one
-- below it (the provider counts less than the fleet charges: a neighbour
-- read while learning has left, cheaper prompts) lowers it at once
-- (hdr_low: the ratios kept are cut to it). Returns the units the ratio
-- does not explain, and for observe 'accept' with the x before the first
-- reading, or 'off' with the rate of the last reading taken for the
-- ratio (the span before, for the lump rule).
-- The reading on probation (cal_hdr_first).
local function hdr_probe(k, h0, i0, room, x)
  sl_set(st, 'cal_hdr_first', string.format('%.6g:%d:%d:%.9g:%.9g', k, h0, i0, room, x))
  hdr_news[#hdr_news + 1] = k
end
-- The header ratio goes; with give_up, not read again for a half-life.
local function hdr_drop(give_up)
  for _, key in ipairs({'estimate_ratios', 'estimate_ratio', 'estimate_ratio_at'}) do sl_set(st, key, '') end
  if give_up then
    sl_set(st, 'cal_hdr_off_at', sl_fmt(now))
    bump('estimate_header_off')
  end
end
-- The fleet's own shortfall, charged as a usage above the charge is.
local function hdr_charge(d, short)
  if short <= 0 then return end
  sl_dim_charge(d, short, now)
  bump(d.name .. '_charged', math.floor(short + 0.5))
end
local function hdr_calibrate(d, units, span, draw, din, noise, h0, i0, room, x)
  if draw < math.max(20, 0.1 * d.r0 * span) then return units end
  local off = tonumber(st.cal_hdr_off_at)
  if off and now - off < sl_num(limits, 'estimate_half_life_ms', 600000) then return units end
  local r, learning = sl_cal(limits, st, now)
  local k = (din + units) / draw
  if k < SL_CAL_MIN then k = SL_CAL_MIN elseif k > SL_CAL_MAX then k = SL_CAL_MAX end
  if learning and ((st.cal_hdr_first or '') ~= '' or (st.estimate_ratios or '') == '') and #hdr_news == 0 then
    local first = st.cal_hdr_first
    local k1, f0, g0, room1, x0 = string.match(first or '', '^([^:]+):([^:]+):([^:]+):([^:]+):(.+)$')
    k1, f0, g0, room1, x0 = tonumber(k1), tonumber(f0), tonumber(g0), tonumber(room1), tonumber(x0)
    sl_set(st, 'cal_hdr_rate', string.format('%.9g', units / span))
    if not k1 then
      hdr_probe(k, h0, i0, room, x)
      return units
    end
    sl_set(st, 'cal_hdr_first', '')
    if math.max(k, k1) > HDR_SPREAD * math.min(k, k1) then
      -- The first reading went the lump rule's way: this one follows it
      -- (with what k1 charged the span's grants added back). One
      -- disagreement may be the first span's noise: a shallow bucket full
      -- for part of it read 0.94 where the provider counts 0.8 (real
      -- time, `sluice mock`'s 2 000-token bucket), and going off then
      -- left one run in three at 85.6 % of the floor. So this reading is
      -- the next on probation (cal_hdr_tries), and only a second
      -- disagreement in a row is a neighbour.
      local retry = sl_num(st, 'cal_hdr_tries', 0) < 1
      hdr_drop(not retry)
      if retry then
        -- For others' use it is a first lump again (observe: 'retry'),
        -- not the second span of a rate: read so, a ratio of 3.2 on its
        -- second try was also a neighbour taking nine tenths of the rate,
        -- and the fleet sent nothing for two minutes (cjk-no-usage seed
        -- 39: 70.5 % of the floor).
        sl_set(st, 'cal_hdr_tries', 1)
        hdr_probe(k, h0, i0, room, x)
        return units + math.max(0, din - draw), 'retry'
      end
      sl_set(st, 'cal_hdr_tries', '')
      return units + math.max(0, din - draw)
    end
    sl_set(st, 'cal_hdr_tries', '')
    local kk = math.max(k, k1)
    hdr_news[#hdr_news + 1] = k
    -- Both spans (from the first base), the sends before it, the grants
    -- made since this one.
    local cr, ci = sl_num(st, 'cal_raw_cum', 0), sl_num(st, 'cal_in_cum', 0)
    local short = math.max(0, kk * (h0 + draw - f0) - (i0 + din - g0))
    short = short + math.max(0, math.min(kk * f0 - g0, room1))
    short = short + math.max(0, kk * (cr - h0 - draw) - (ci - i0 - din))
    sl_set(st, 'cal_hdr_upto', string.format('%d:%d:%.6g', cr, ci, kk))
    hdr_charge(d, short)
    return units - (k * draw - din), 'accept', x0
  end
  if learning then
    local lo, hi = k, k
    for v in string.gmatch(st.estimate_ratios or '', '[^,]+') do
      v = tonumber(v)
      if v then lo, hi = math.min(lo, v), math.max(hi, v) end
    end
    for _, v in ipairs(hdr_news) do lo, hi = math.min(lo, v), math.max(hi, v) end
    if hi > HDR_SPREAD * lo then
      hdr_drop(true)
      hdr_news, hdr_low = {}, nil
      return units + math.max(0, din - draw), 'off', tonumber(st.cal_hdr_rate)
    end
    sl_set(st, 'cal_hdr_rate', string.format('%.9g', units / span))
  end
  if not learning and units > noise then return units end
  hdr_news[#hdr_news + 1] = k
  local explained = k * draw - din
  if not learning then
    if units < -noise and k < r and (not hdr_low or k < hdr_low) then hdr_low = k end
    return units - explained
  end
  local short = explained
  local ur, ui, uk = string.match(st.cal_hdr_upto or '', '^([^:]+):([^:]+):(.+)$')
  ur, ui, uk = tonumber(ur), tonumber(ui), tonumber(uk)
  if ur and ur > h0 then
    local hr, hi = math.min(ur, h0 + draw), math.min(ui, i0 + din)
    short = short - math.max(0, uk * (hr - h0) - (hi - i0))
  end
  hdr_charge(d, short)
  return units - explained
end
local function observe(d, seen, slot, u_after, cost, throttled, order)
  local lim, rem = seen[1], seen[2]
  local f = d.name
  -- order: the units of the first dimension granted before this grant
  -- (its record's; for feedback without a grant, all granted so far). A
  -- response to a grant made before the one whose headers changed the
  -- limit was sent before it too: its limit is older news (taken, it
  -- would flap the limit back and forth, each flap a stretch).
  if adapt_limits and lim and lim > 0 and order >= sl_num(st, f .. '_lim_order', 0) then
    local adopted = sl_num(st, f .. '_adopted', 0)
    local want = 0
    if lim < d.per then want = lim end
    if want ~= adopted then
      if want > 0 then sl_set(st, f .. '_adopted', want) else sl_set(st, f .. '_adopted', '') end
      sl_set(st, f .. '_lim_order', order)
      -- The schedule converts to the new limit, and the slots already
      -- granted at the old one are re-timed with it (sl_rate_changed):
      -- a lower limit holds from the moment it is read, not after the
      -- backlog granted before it.
      retime_dims[d.name] = true
      -- The provider's bucket is another one now: learn it again.
      sl_set(st, f .. '_cap', '')
      sl_set(st, f .. '_caplb', '')
      sl_set(st, f .. '_obs', '')
      bump('limit_changes')
      retarget = true
      return
    end
  end
  -- Its remaining is older news too: the old bucket's. Taken as the new
  -- one's depth (<dim>_cap), it read the new bucket as never full, its
  -- wasted refill as others' use, and the fleet ran at a quarter of a
  -- limit lowered by 40 % with nobody beside it.
  if order < sl_num(st, f .. '_lim_order', 0) then return end
  -- Token counts rounded to the nearest thousand (Anthropic's: "rounded to
  -- the nearest thousand"; its request counts are exact) are off by up
  -- to 500 each (qz: the error of two). A token dimension is taken as
  -- rounded until a reading that is not a whole thousand shows its counts
  -- exact (<dim>_hdr_exact).
  local qz = 0
  if rem and d.i > 1 and not st[f .. '_hdr_exact'] then
    if rem % 1000 ~= 0 then
      sl_set(st, f .. '_hdr_exact', 1)
    elseif rem >= 1000 then
      qz = 1000
    end
  end
  -- A dimension corrected at the end: the largest remaining seen is how
  -- deep the provider's bucket is at least (rounded, up to 500 less),
  -- which bounds what its give-backs may fill (sl_dim_refund).
  if d.refund and rem and not throttled then
    local lb = rem - qz / 2
    if lb > sl_num(st, f .. '_caplb', 0) then sl_set(st, f .. '_caplb', lb) end
  end
  -- slot: nil when the grant was re-timed by stretches no longer known.
  if not adapt_outside or d.refund or not rem or throttled or not slot then return end
  local cap = math.max(sl_num(st, f .. '_cap', 0), rem + cost)
  if cap > sl_num(st, f .. '_cap', 0) then sl_set(st, f .. '_cap', cap) end
  local s0, u0, r0 = string.match(st[f .. '_obs'] or '', '^([^:]+):([^:]+):(.+)$')
  s0, u0, r0 = tonumber(s0), tonumber(u0), tonumber(r0)
  -- A span holds at least 20 units of the fleet's own sends (and a
  -- second), so that one unit more or less, which the whole-unit counts
  -- always have, is small against what others take.
  local min_span = math.max(OBS_SPAN_MS, 20 / d.r0)
  -- Rounded counts: long enough that two roundings are the noise of 5 %
  -- of the limit (others' use above a tenth of it shows beyond both).
  if qz > 0 then min_span = math.max(min_span, qz / (0.05 * d.r0)) end
  if s0 and slot < s0 then return end                  -- older than the base: another agent's late news
  -- While agents are silent (cut off from Redis, or back from an outage
  -- and not yet handed over), and until the local tails handed over have
  -- been sent (obs_after, heartbeat busy), their local sends are in the
  -- provider's counts and not in the fleet's: a span then tells nothing
  -- of others' use (taken for it, the sends of a Redis stop or a cut read
  -- as a neighbour). The estimate stays; the first reading after is the
  -- next base.
  if sl_held(d, scale) > 0 or slot < sl_num(st, 'obs_after', 0) then
    sl_set(st, f .. '_obs', '')
    return
  end
  if s0 and slot - s0 < min_span then return end       -- too close to the base to tell
  sl_set(st, f .. '_obs', sl_fmt(slot) .. ':' .. u_after .. ':' .. rem)
  -- The calibrated input's sums at the base and now (hdr_calibrate).
  local h0, i0 = string.match(st[f .. '_hobs'] or '', '^([^:]+):(.+)$')
  h0, i0 = tonumber(h0), tonumber(i0)
  local hc = obs_cal and d.name == hdr_dim and obs_cal
  sl_set(st, f .. '_hobs', hc and (hc[1] .. ':' .. hc[2]) or '')
  if not s0 then return end
  -- A span across a pause of the fleet tells nothing the fleet owes:
  -- its schedule gave up that time (the pause shifted it), so what others
  -- took meanwhile was never the fleet's. Read as a lump, a greedy
  -- neighbour's minute behind a pause became a minute of debt. The
  -- reading is only the next base.
  if sl_num(st, 'pause_from', 0) > s0 then
    sl_set(st, f .. '_rise', '')
    sl_dim_charge(d, sl_num(st, f .. '_lump', 0), now)
    sl_set(st, f .. '_lump', '')
    return
  end
  -- Rounded counts widen the full mark and the noise by qz: read as
  -- exact, a full input bucket 1 000 short of its cap looked like a
  -- neighbour taking 386 000 a minute, and the re-timings that followed
  -- held back the output's give-backs (anthropic-current-24: 91.9..96.1 %
  -- of the floor, 99.4..99.9 % read with qz).
  local full = cap - cost - math.max(1, 0.1 * d.burst) - qz  -- at or above: the bucket may have wasted refill
  local x = sl_num(st, f .. '_outside_ms', 0)
  -- The last span's reading when it was a lump (<dim>_rise), or 0 when it
  -- took nothing; this span's, for the next.
  local was, rise = tonumber(st[f .. '_rise']), nil
  -- The last lump's part above the bound, owed unless this span shows it
  -- was a rate's start (<dim>_lump).
  local owed = sl_num(st, f .. '_lump', 0)
  local lump = 0
  if rem < full and r0 < full then
    local span = slot - s0
    local units = d.r0 * span - (u_after - u0) - (rem - r0)
    -- Not evidence: two units (the counts are whole, a send may be on
    -- either side of an observation) or 5 % of the limit over the span.
    local noise = 2 + 0.05 * d.r0 * span + qz
    -- The ratio reads the span as it is (its noise is the counts' and the
    -- sends' timing, small against the prompts' cost; zeroed, a ratio 3 %
    -- low stayed as it was); others' use what the ratio leaves of it.
    if hc and h0 and qz == 0 then
      local how, v
      units, how, v = hdr_calibrate(d, units, span, hc[1] - h0, hc[2] - i0, noise, h0, i0, cap - r0, x)
      if how == 'off' and v then
        was = v
      elseif how == 'retry' then
        was = nil
      elseif how == 'accept' then
        -- The first reading was the ratio's: no lump owed, no rate begun,
        -- others' use as it was before it.
        owed, was, x = 0, nil, v or x
      end
    end
    if math.abs(units) < noise then units = 0 end
    -- Others' rate is the readings smoothed (OBS_GAIN a reading), so
    -- that a paced neighbour's requests, one or two a span, read as the
    -- rate they make and not as its lower readings. A reading far above
    -- the rate known (twice it, and a tenth of the limit) is a lump (a
    -- one-off burst): only the bound enters the rate, and beyond it the
    -- lump is owed once (<dim>_lump: the schedule moves by it a span
    -- later); a lump in the next span too is a rate (a neighbour that
    -- started), the lower of the two. Read as a rate, a 40-request burst
    -- over one span became 7 000 tokens a second, and callers asking just
    -- then were shed with a five-minute hint.
    local rate = units / span
    local bound = 2 * x + 0.1 * d.r0
    if rate > bound and was and was > 0 then
      -- A neighbour that started: its first span was the rate's, not a
      -- debt. Charged, it was repaid at the schedule's end, behind a
      -- minute of held grants: a gap of seconds after the neighbour had
      -- left (azure-neighbour-leaves).
      x = math.min(was, rate)
      owed = 0
    elseif rate > bound then
      lump = (rate - bound) * span
      rise = rate
      x = x + OBS_GAIN * (bound - x)
    else
      x = x + OBS_GAIN * (rate - x)
    end
    -- Two spans in a row with nothing taken: others stopped (a paced
    -- neighbour of any size takes something in every span of a second
    -- or more), the rate is nothing at once.
    if units == 0 and was == 0 then x = 0 end
    if units == 0 then rise = 0 end
  else
    -- A (nearly) full bucket hides others' use (its refill may be
    -- wasted): they took at most what the fleet left of the refill, and
    -- what was read fades, slowly: the fleet sends a little more, and
    -- drawn below full the bucket shows them again if they are there.
    -- Faded fast (by half a reading), a paced neighbour hidden while the
    -- fleet sent below its share was read as gone, and the held grants
    -- compressed for it went out 1.06x its rate.
    local left = d.r0 - (u_after - u0) / (slot - s0)
    if left < x then x = math.max(0, left) end
    x = x * (1 - OBS_GAIN / 6)
  end
  -- A bucket read full (wasting refill) owes nothing: the schedule's
  -- part beyond the sends granted (debt it charged, the stretches of
  -- others' rate that the held grants, following in steps, never took)
  -- is room the provider has. Kept, it became a gap after the held sends,
  -- and a class told to ask again at the schedule's end slept through it
  -- (azure-neighbour-leaves: 4.7 s of nothing, 93.5 % of the rate after
  -- the neighbour left). It is given back by a compression as far as the
  -- held sends conform (at the end of this script), at most every 5 s
  -- (forgive_at). Only full: a deep bucket a burst below its cap may
  -- still be owed what the last seconds over-sent, and the 10 s windows
  -- of a neighbour's rows went to 1.13..1.24x when that was forgiven.
  -- Only with others' use read as nothing: a full bucket hides a
  -- neighbour still there (its estimate fades), and the held sends
  -- compressed at that rate put a paced neighbour's windows at 1.055x.
  -- Once a settle: every dimension's schedule goes back by the one
  -- compression, so a second dimension read full counts nothing more.
  if not counts.schedule_forgiven and rem >= full and x == 0 and d.tat > math.max(d.cg, now) + d.burst / d.r
     and now - sl_num(st, 'forgive_at', 0) >= 5 * OBS_SPAN_MS then
    bump('schedule_forgiven')
  end
  sl_set(st, f .. '_rise', rise and string.format('%.9g', rise) or '')
  -- A lump owed once (a one-off burst): charged a span late, once the
  -- next span did not show it going on.
  sl_dim_charge(d, owed, now)
  sl_set(st, f .. '_lump', lump > 0 and string.format('%.9g', lump) or '')
  if x < 0 then x = 0 end
  -- The fleet sends up to its burst at once when its own bucket is full:
  -- the provider's must hold that much, or the next burst meets a 429.
  -- Below it, the deficit is repaid (by sending less than the refill). A
  -- provider's bucket no deeper than the fleet's burst is at its floor
  -- whenever the fleet runs at its rate, which says nothing: the level to
  -- keep is what the fleet alone leaves there, cap - B, at most a burst.
  local keep = math.min(d.burst + cost, cap - d.burst)
  local deficit = math.max(0, keep - rem - math.max(1, 0.1 * d.burst))
  sl_set(st, f .. '_outside_ms', string.format('%.9g', x))
  sl_set(st, f .. '_deficit', string.format('%.1f', deficit))
  -- The grants already made are re-timed too (sl_rate_changed): granted
  -- ahead at the rate before others were seen, a queue of callers sent
  -- it for as long as the queue lasted (a 40 % neighbour: 1.33x the rate
  -- for a minute, then 20 s of nothing to repay it), and kept a rate
  -- others no longer took as long after they left. They follow others'
  -- rate (x, smoothed; not the deficit's repayment, which swings with
  -- each of the fleet's sends) from the one they were last re-timed for
  -- (<dim>_outside_rt) once it moved by OBS_RT_STEP of the limit or ended,
  -- by at most 1 / OBS_RT_FLOOR at once: a neighbour that takes all of it
  -- is waited out by the 429s' pauses, not by holding every caller ten
  -- times as long. A compression that cannot be made yet (sl_compress)
  -- is asked again with the next reading.
  local xs = x < 0.01 * d.r0 and 0 or x
  local xr = sl_num(st, f .. '_outside_rt', 0)
  if retime_dims[d.name] ~= true and (math.abs(xs - xr) >= OBS_RT_STEP * d.r0 or (xs == 0 and xr > 0)) then
    local lo = OBS_RT_FLOOR * d.r0
    retime_dims[d.name] = math.max(lo, d.r0 - xr) / math.max(lo, d.r0 - xs)
    retime_to[d.name] = {xr, xs}
    retarget = true
  end
  local per_min = (x + deficit / DEFICIT_MS) * 60000
  if per_min < 0.001 * d.r0 * 60000 then per_min = 0 end
  local old = sl_num(st, f .. '_outside', 0)
  -- Small moves are noise: the schedule is converted only for a change of
  -- at least 2 % of the limit (or back to nothing).
  if math.abs(per_min - old) >= 0.02 * d.r0 * 60000 or (per_min == 0 and old ~= 0) then
    sl_set(st, f .. '_outside', string.format('%.3f', per_min))
    retarget = true
  end
end

-- 429s without evidence in the headers: the times of the recent ones
-- (throttle_window, "t1,t2,..."), at most aimd_min_throttles of them.
local function throttle_count()
  local window = sl_num(limits, 'aimd_window_ms', 10000)
  local need = sl_num(limits, 'aimd_min_throttles', 3)
  local kept = {}
  for t in string.gmatch(st.throttle_window or '', '[^,]+') do
    if tonumber(t) and tonumber(t) > now - window then kept[#kept + 1] = t end
  end
  kept[#kept + 1] = sl_fmt(now)
  while #kept > need do table.remove(kept, 1) end
  sl_set(st, 'throttle_window', table.concat(kept, ','))
  return #kept >= need
end

local refund_lag = sl_num(limits, 'refund_lag_ms', 250)
local tmax = limits.tokens_rule == 'max'
local burn, out_charge_expected = sl_out_rule(limits)
local out = {now_us, 0, '1', 0}
local deposits, done = 0, {}
local cal_news = {}  -- the provider's prompt count / the raw input estimate, per settled grant (sl_cal_learn)
local out_news = {}  -- actual / max output, per settled grant (sl_out_item)
local lane_news = {}  -- the same by lane, of grants that name one (reserve.lua, item_out_r)
-- Answers teach the share of max output they use where the grant charges
-- it as expected (output_charge expected) or burns it down (Bedrock).
local out_expected = burn or out_charge_expected
local decreased = false
-- The fleet's own units of one send were short by `units` of what the
-- provider counted: a span of its remaining counts holding that send
-- would read the difference as others' use. Beyond the noise of the
-- shortest span, the estimate of others' use starts a new base.
local function obs_restart(d, units)
  if units >= 2 + 0.05 * d.r0 * OBS_SPAN_MS then sl_set(st, d.name .. '_obs', '') end
end
local function dim_settle(d, est, actual, slot, give)
  -- One dimension of a settled grant sent at slot: est was charged; actual
  -- is what the provider counts (nil: unknown). The provider gave back the
  -- unused part after the send and at most refund_lag_ms before now (or
  -- never took it: give, Anthropic's cache reads). <dim>_counted adds up
  -- what the provider counted, for reconciliation with its ledger.
  if not actual then return end
  if d.name ~= 'requests' then bump(d.name .. '_counted', actual) end
  local diff = est - actual
  local given = 0
  if diff > 0 and (d.refund or give) then
    -- Output counted as generated (output_charge expected): the provider
    -- never took what the grant charged above the answer, so what its
    -- bucket still holds of it is bounded from the send on, not from the
    -- answer's end: a full bucket wasted the refill the fleet held back
    -- meanwhile. From the end, the first answers' give-backs (charged
    -- at the max, then at twice the largest) were spent again on a
    -- bucket that had wasted them: the bucket three max_tokens deep ran
    -- dry by 12 s (anthropic-short-24 seed 10: a 429 and its pause,
    -- windows up to 1.048x on seeds 1..10; from the send: none, within
    -- 1.012x).
    local since = math.max(slot, now - refund_lag)
    if d.name == 'output' and out_charge_expected then since = slot end
    given = sl_dim_refund(d, diff, now, d.q, st, scale, nil, since)
    -- How far the bound's queue is read (out_ahead's bounds start there).
    if not d.popped or since > d.popped then d.popped = math.min(now, since) end
  elseif diff < 0 then
    sl_dim_charge(d, -diff, now)
    if d.name ~= 'requests' then bump(d.name .. '_charged', -diff) end
    -- The provider counted more than the fleet's own units say (an
    -- estimate below its count: the ratio not learned yet, or one above
    -- it).
    obs_restart(d, -diff)
  end
  if given > 0 then bump(d.name .. '_refunded', math.floor(given + 0.5)) end
end
-- A ratio learned from usage that rose (the first answers of a language
-- the estimate undercounts) is charged at once for the grants still out
-- that were charged at the ratio before it, as each one's usage would
-- charge it when it settles: there it came after their agents had
-- reserved the slots that follow (one agent's queue, ten seconds of
-- slots at once), so the first window held the debt of the sends in
-- flight (cjk-estimate seed 16: 1.060x). Each record keeps what was
-- charged so (field 17: ahead, input units), which its settle adds to
-- its charge; its own usage then charges only what is left (and where
-- the deployment refunds, gives back what it did not use). Only a rise
-- beyond CAL_AHEAD_RISE (1.1): the ratio's own noise (a few per cent as the
-- 90th percentile moves) charged so at that percentile charged the
-- grants out above what most of them counted, where nothing is given
-- back (azure-neighbour-leaves, seeds 11..20: the rate after the
-- neighbour left 0.5 points lower at a 2 % threshold). The header
-- reading charges the same ahead its own way (hdr_calibrate,
-- cal_hdr_upto).
local function cal_ahead(was)
  local r = sl_cal(limits, st, now)
  if r <= was * 1.1 then return end  -- CAL_AHEAD_RISE
  local flat = redis.call('HGETALL', KEYS[3])
  local din, dtok, settled, most, recs = 0, 0, {}, 0, {}
  -- (The grants this call settled are still there: their usage charged
  -- them.)
  for _, id in ipairs(done) do settled[id] = true end
  for i = 1, #flat, 2 do
    local f, _, _, cost, _, max_out = sl_record(flat[i + 1])
    local raw = tonumber(f[11])
    if raw and raw > 0 and cost[3] and not settled[flat[i]] then
      local ahead = tonumber(f[17]) or 0
      local cur = cost[3] + ahead
      local want = math.ceil(raw * r - 1e-9)
      if want > cur then
        local top = want - cur
        din = din + top
        if top > most then most = top end
        dtok = dtok + (tmax and math.max(0, math.max(want, max_out) - math.max(cur, max_out)) or top)
        for k = #f + 1, 16 do f[k] = '' end
        f[17] = string.format('%d', ahead + top)
        recs[#recs + 1] = flat[i]
        recs[#recs + 1] = table.concat(f, ',')
      end
    end
  end
  for i = 1, #recs, 2000 do redis.call('HSET', KEYS[3], unpack(recs, i, math.min(i + 1999, #recs))) end
  for _, d in ipairs(dims) do
    local a = (d.name == 'input' and din) or (d.name == 'tokens' and dtok) or 0
    if a > 0 then
      -- The grants held ahead were timed for the old ratio: charged only
      -- at the schedule's tail, they went out as they were, the new
      -- ratio's cost at the old one's spacing (a switch to Japanese with
      -- a minute queued: 10 s windows of 1.9x). They are stretched by
      -- what they now cost over the span they hold (the agents re-time
      -- their callers, as for a lower limit), and the schedule moves on
      -- by it once.
      local span = d.cg - now
      if span > 0 and retime_dims[d.name] ~= true then
        local k = 1 + a / d.r / span
        if k > (tonumber(retime_dims[d.name]) or 1) then retime_dims[d.name] = k end
        retarget = true
        d.tat = math.max(d.tat, now) + a / d.r
      else
        sl_dim_charge(d, a, now)
      end
      bump(d.name .. '_charged', a)
      -- The provider counted it at admission (as where a usage charges
      -- it, dim_settle): judged by the largest part of one send.
      obs_restart(d, most)
    end
  end
  if din > 0 then bump('estimate_ahead', din) end
end

-- The share of the max output charged fell (output_charge expected: the
-- first answer known after grants charged at the max, then each of the
-- first four narrowing the margin, sl_out_charge_r): the grants still out
-- that were charged above the new share give the excess back now, as
-- their settles would when they end, each bounded as a settle's is from
-- its send (dim_settle), or as a cancel's for one not yet due (its cost
-- leaves the bound of the sends before it). Until then the excess held
-- the schedule a response time more. Each record keeps what it is
-- charged now (field 12, as reserve writes it), which its settle
-- corrects. A lane's grants follow their lane's share (its own once it
-- has four fresh answers, else the deployment's). Only a fall beyond a
-- tenth, the deployment's or a lane's with news (once learned, the
-- ratio's noise: reading every grant out at each settle would cost more
-- than it gives back); not Bedrock's burndown.
local function out_ahead(was, lanes_was)
  local k = sl_out_charge_r(limits, st, now, 'output')
  -- A lane's grants: its own share once it has four fresh answers, else
  -- the deployment's (reserve.lua, item_out_r).
  local by_lane = {}
  local function lane_k(ln)
    local r = by_lane[ln]
    if not r then
      r = sl_out_charge_r(limits, st, now, 'l.' .. ln .. '.output', k)
      by_lane[ln] = r
    end
    return r
  end
  local d, fell = nil, k * 1.1 < was
  for _, x in ipairs(dims) do
    if x.name == 'output' and x.refund then d = x end
  end
  for ln, w in pairs(lanes_was) do
    if lane_k(ln) * 1.1 < w then fell = true end
  end
  if not d or not fell then return end
  local flat = redis.call('HGETALL', KEYS[3])
  local settled, todo, recs, total, from = {}, {}, {}, 0, nil
  for _, id in ipairs(done) do settled[id] = true end
  for i = 1, #flat, 2 do
    local f, _, slot, cost, before, max_out = sl_record(flat[i + 1])
    if not settled[flat[i]] and slot and (f[8] or '') ~= '' and string.byte(f[12] or '') ~= 116 then
      local want = sl_out_item((f[16] or '') == '' and k or lane_k(f[16]), max_out)
      if want < cost[4] then
        todo[#todo + 1] = {slot, flat[i], f, cost[4], want, before[4]}
        if not from or slot < from then from = slot end
      end
    end
  end
  if d.popped and from and from < d.popped then from = d.popped end
  -- The sends not yet due first (their costs leave the bounds of the
  -- sends before them, read from the earliest of these), then the others
  -- in the order of their sends: each bound's queue is read from its send
  -- on, and what one reads is gone for the next (sl_dim_refund). Ties by
  -- grant id, as sl_held_sends.
  table.sort(todo, function(a, b)
    local fa, fb = a[1] > now, b[1] > now
    if fa ~= fb then return fa end
    if a[1] ~= b[1] then return a[1] < b[1] end
    return tonumber(a[2]) < tonumber(b[2])
  end)
  for _, t in ipairs(todo) do
    local given
    if t[1] > now then
      given = sl_dim_refund(d, t[4] - t[5], now, d.q, st, scale, t[6], from)
    else
      local since = math.max(t[1], from)
      given = sl_dim_refund(d, t[4] - t[5], now, d.q, st, scale, nil, since)
      from = since
    end
    if given > 0 then
      local f = t[3]
      for j = #f + 1, 12 do f[j] = '' end
      f[12] = string.format('%d', math.ceil(t[4] - given - 1e-9))
      recs[#recs + 1] = t[2]
      recs[#recs + 1] = table.concat(f, ',')
      total = total + given
    end
  end
  for i = 1, #recs, 2000 do redis.call('HSET', KEYS[3], unpack(recs, i, math.min(i + 1999, #recs))) end
  if total > 0 then
    bump('output_refunded', math.floor(total + 0.5))
    bump('output_ahead', math.floor(total + 0.5))
  end
end

for i = 1, n do
  local id, usage, outcome, pause, seen = items[i][1], items[i][2], items[i][3], items[i][4], items[i][5]
  local result = 'feedback'
  local rec = nil
  local explained = false  -- the headers say how full the provider's bucket is
  for _, d in ipairs(dims) do
    if seen[d.i] and seen[d.i][2] then explained = true end
  end
  if id ~= '-' then
    rec = redis.call('HGET', KEYS[3], id)
    result = rec and 'settled' or 'unknown'
  end
  if rec then
    done[#done + 1] = id
    local f, c, slot, cost, before, max_out = sl_record(rec)
    local reserved = tonumber(f[3])
    local tenant = f[6]
    if tenant == '' then tenant = nil end
    -- The parts of the estimate are known when the grant was asked as
    -- i+o (f[8] set); a combined c charged c to input and output alike.
    local known = f[8] ~= nil and f[8] ~= ''
    if tmax and known then cost[2] = math.max(cost[3], max_out) end
    -- What the input was charged ahead when the ratio rose (cal_ahead):
    -- part of its charge here. The units granted (observe's, below) stay
    -- those of the grant, and a span of the provider's remaining counts
    -- holding this send starts anew, as where its usage charges it.
    local ahead = tonumber(f[17])
    local granted = cost
    if ahead and ahead > 0 and cost[3] then
      cost = {cost[1], cost[2], cost[3] + ahead, cost[4]}
      if not tmax then
        cost[2] = cost[2] + ahead
      elseif known then
        cost[2] = math.max(cost[3], max_out)
      end
      for _, d in ipairs(dims) do
        if d.name == 'input' or d.name == 'tokens' then obs_restart(d, ahead) end
      end
    end
    bump('settled_' .. outcome)
    if outcome == 'ok' then deposits = deposits + 1 end
    if outcome == 'cancelled' then
      if slot > now then
        for _, d in ipairs(dims) do
          local given = sl_dim_refund(d, cost[d.i], now, d.q, st, scale, before[d.i])
          if d.name ~= 'requests' then bump(d.name .. '_refunded', math.floor(given + 0.5)) end
        end
        daily_adjust(reserved, -1, -c, tenant)
      end
    elseif outcome ~= 'throttled' and usage[1] then
      -- What each dimension's provider counts (docs/providers.md): the
      -- combined tokens, with refund on, the actual usage; otherwise what
      -- was charged at admission: the prompt as the provider counted it
      -- and the max output the estimate reserved, added (Azure) or the
      -- larger of them (tokens_rule max: OpenAI). A combined estimate
      -- whose parts are unknown is compared with the usage as a whole
      -- (never its max output counted again). The input tokens less
      -- those read from the prompt cache (Anthropic does not count them).
      -- The output tokens as generated.
      local total, inp, outp, cr = usage[1], usage[2], usage[3], usage[4] or 0
      local split = inp ~= nil
      for _, d in ipairs(dims) do
        if d.name == 'tokens' then
          local counted = total
          if d.refund then
            counted = total
          elseif split and known then
            -- An answer longer than the max output estimated (a request
            -- without max_tokens, estimated at the default): the provider
            -- counted at least what it generated.
            counted = tmax and math.max(inp, max_out, outp or 0) or inp + math.max(max_out, outp or 0)
          elseif split and tmax then
            counted = math.max(inp, outp)
          end
          -- Bedrock's burndown: the provider counts input + output x
          -- burndown at the end of the request, up or down from what it
          -- reserved.
          if split and burn and burn ~= 1 then counted = inp + burn * outp end
          dim_settle(d, cost[2], counted, slot)
        elseif d.name == 'input' and split then
          -- Counted at admission as the estimate (or the prompt, when
          -- longer), less the cache reads, which the provider never
          -- charged: those are given back whatever refund_input says.
          local counted = math.max(cost[3], inp) - cr
          if d.refund then counted = inp - cr end
          dim_settle(d, cost[3], counted, slot, cr > 0)
        elseif d.name == 'output' and split then
          dim_settle(d, cost[4], outp, slot)
        end
      end
      -- Calibration (common.lua, sl_cal): a grant that teaches kept its
      -- raw input estimate (field 11); the provider's prompt count over it
      -- is one more ratio.
      local raw = tonumber(f[11])
      if split and raw and raw > 0 then cal_news[#cal_news + 1] = inp / raw end
      -- What share of its max output an answer used (sl_out_item).
      if out_expected and split and known and outcome == 'ok' and max_out > 0 then
        out_news[#out_news + 1] = outp / max_out
        -- Its lane's too, where the grant names one (field 16).
        local ln = f[16]
        if ln and ln ~= '' then
          local l = lane_news[ln]
          if not l then l = {}; lane_news[ln] = l end
          l[#l + 1] = outp / max_out
        end
      end
      daily_adjust(reserved, 0, total - c, tenant)
      bump('tokens_estimated', c)
      bump('tokens_actual', total)
    end
    -- Where its agent sent it: re-timed by the stretches since the grant.
    local sent = (outcome == 'ok' or outcome == 'throttled') and next(seen) and sl_retimed_slot(st, slot, before)
    if outcome == 'ok' then
      local rc, ic = tonumber(f[14]), tonumber(f[15])
      if not usage[1] and rc and ic then obs_cal = {rc, ic} end
      for _, d in ipairs(dims) do
        if seen[d.i] then observe(d, seen[d.i], sent, before[d.i] + granted[d.i], granted[d.i], false, before[1]) end
      end
      obs_cal = nil
    elseif outcome == 'throttled' then
      for _, d in ipairs(dims) do
        if seen[d.i] then observe(d, seen[d.i], sent, before[d.i], granted[d.i], true, before[1]) end
      end
    end
    if outcome == 'throttled' and reserved > last_decrease and not decreased and not explained
       and throttle_count() then
      -- Several 429s the headers do not explain, on grants the governor
      -- believed were within quota (reserved after the last decrease): the
      -- provider is tighter than configured and says nothing about it.
      local floor = sl_num(limits, 'aimd_min_scale', 0.1)
      local ns = scale * sl_num(limits, 'aimd_decrease', 0.7)
      if ns < floor then ns = floor end
      -- The scale as stored (4 decimals), so that the schedule is built at
      -- exactly the rate the next call reads back.
      ns = tonumber(string.format('%.4f', ns))
      if ns < scale then
        scale = ns
        sl_set(st, 'rate_scale', string.format('%.4f', scale))
        sl_set(st, 'scale_changed_at', sl_fmt(now))
        retarget = true
        bump('decreases')
      end
      last_decrease = now
      sl_set(st, 'last_decrease_at', sl_fmt(now))
      sl_set(st, 'throttle_window', '')
      decreased = true
    end
  elseif id == '-' and outcome ~= 'quota' then
    -- Feedback without a grant (a local grant, an ungoverned call): its
    -- limits still tell, its remaining cannot be placed in the schedule.
    for _, d in ipairs(dims) do
      if seen[d.i] and seen[d.i][1] then observe(d, {seen[d.i][1], nil}, now, 0, 0, true, dims[1].granted) end
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
    -- 429s in a row: one that arrives after the fleet's last pause ended
    -- (a send made after it) while the pause before was recent doubles
    -- it, up to pause_max_ms; after a quiet spell as long as that pause
    -- (at least a second) the count starts again. A neighbour that takes
    -- every token as it refills leaves nothing, and a pause of what the
    -- 429 says (Azure: 200 ms) probes it five times a second; a stray 429
    -- pauses only as it says.
    local ends, cap = sl_num(st, 'streak_at', 0), sl_num(limits, 'pause_max_ms', 20000)
    if outcome == 'throttled' and now >= ends and cap > 0 then
      local k = sl_num(st, 'streak', 0) + 1
      if now > ends + math.max(sl_num(st, 'streak_pause', 0), 1000) then k = 1 end
      sl_set(st, 'streak', k)
      local grown = pause * math.pow(2, math.min(k - 1, 20))
      pause = math.max(pause, math.min(grown, cap))
      sl_set(st, 'streak_at', sl_fmt(now + pause))
      sl_set(st, 'streak_pause', sl_fmt(pause))
      if k > 1 then bump('pause_doublings') end
    end
    local until_ms = now + pause
    local pbase = math.max(now, paused_until)
    if until_ms > pbase then
      -- The outstanding schedule moves behind the pause instead of piling
      -- up at its end: every TAT and the last slot shift by the same amount,
      -- agents shift the callers they hold by it (pause_shift_ms is the
      -- running total they follow), and refunds wait until after it.
      local shift = until_ms - pbase
      if paused_until <= now then
        bump('pauses')
        sl_set(st, 'pause_from', sl_fmt(now))
      end
      paused_until = until_ms
      sl_set(st, 'paused_until', sl_fmt(paused_until))
      local ra = sl_num(st, 'refund_after', 0)
      for _, d in ipairs(dims) do
        if d.tat > now then d.tat = d.tat + shift end
        if d.cg > now then d.cg = d.cg + shift end
        if d.tat > ra then ra = d.tat end
      end
      local ls = sl_num(st, 'last_slot', 0)
      if ls > now then sl_set(st, 'last_slot', sl_fmt(ls + shift)) end
      sl_set(st, 'refund_after', sl_fmt(ra))
      sl_set(st, 'pause_shift_ms', sl_fmt(sl_num(st, 'pause_shift_ms', 0) + shift))
      -- The grants not yet due are held by their agents by the shift too:
      -- their leases (slot + lease_ms) move with them, or pauses adding
      -- up to the lease reclaim them before they are sent (their settles
      -- then unknown, the concurrency cap free while they run).
      local lz = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. sl_fmt(now + sl_num(limits, 'lease_ms', 120000)),
                            '+inf', 'WITHSCORES')
      for i = 1, #lz, 2000 do
        local args = {}
        for j = i, math.min(i + 1999, #lz), 2 do
          args[#args + 1] = string.format('%d', math.ceil(tonumber(lz[j + 1]) + shift))
          args[#args + 1] = lz[j]
        end
        redis.call('ZADD', KEYS[4], unpack(args))
      end
    end
  end
  out[#out + 1] = result
end

local usage_news = #cal_news
for _, k in ipairs(hdr_news) do cal_news[#cal_news + 1] = k end
if hdr_low then
  local kept = {}
  for v in string.gmatch(st.estimate_ratios or '', '[^,]+') do
    kept[#kept + 1] = string.format('%.4f', math.min(tonumber(v) or hdr_low, hdr_low))
  end
  sl_set(st, 'estimate_ratios', table.concat(kept, ','))
end
if #cal_news > 0 then
  local was = sl_cal(limits, st, now)
  sl_cal_learn(limits, st, now, cal_news)
  bump('estimate_samples', #cal_news)
  if usage_news > 0 then cal_ahead(was) end
end
if #out_news > 0 then
  local q = burn and SL_OUT_BURN_Q or nil
  local was = not burn and out_charge_expected and sl_out_charge_r(limits, st, now, 'output')
  -- (Each lane's share before its news, as out_ahead takes it now.)
  local lanes_was = {}
  for ln in pairs(was and lane_news or lanes_was) do
    lanes_was[ln] = sl_out_charge_r(limits, st, now, 'l.' .. ln .. '.output', was)
  end
  sl_ratio_learn(limits, st, now, out_news, 'output', SL_OUT_MIN, 1, q)
  for ln, news in pairs(lane_news) do sl_ratio_learn(limits, st, now, news, 'l.' .. ln .. '.output', SL_OUT_MIN, 1, q) end
  if was then out_ahead(was, lanes_was) end
end

if retarget then
  -- A limit adopted or dropped, others' use or the AIMD scale changed:
  -- rebuild the dimensions at their limits in force and convert the debt.
  local nd = sl_dims(limits, st, scale, now)
  for k, d in ipairs(nd) do
    local o = dims[k]
    d.tat, d.granted, d.cg, d.chi = o.tat, o.granted, o.cg, o.chi
  end
  dims = nd
  local _, K = sl_dims_sync(st, dims, now, retime_dims)
  -- Others' rate the held grants are timed for now (observe): all the way
  -- to the reading for a stretch or when nothing is held, as far as the
  -- compression went for one.
  for _, d0 in ipairs(dims) do
    local v, k = retime_to[d0.name], retime_dims[d0.name]
    if v and type(k) == 'number' then
      local xr, xs = v[1], v[2]
      if d0.tat <= now or (k > 1 and K > 1) then
        xr = xs
      elseif k < 1 and K < 1 then
        local lo = OBS_RT_FLOOR * d0.r0
        xr = math.max(xs, d0.r0 - math.max(lo, d0.r0 - xr) / K)
      end
      sl_set(st, d0.name .. '_outside_rt', xr > 0 and string.format('%.9g', xr) or '')
    end
  end
end

if #done > 0 then
  redis.call('HDEL', KEYS[3], unpack(done))
  redis.call('ZREM', KEYS[4], unpack(done))
end
-- A full bucket's reading (observe): the schedule ends where the held
-- sends end, compressed as far as they conform, and the agents' held
-- sends and asks move with it (the thinned compression of a dropped
-- agent's grants, heartbeat.lua). The counter is the flag: this file
-- has no room for another top-level local (Lua 5.1's 200, common.lua's
-- included).
if counts.schedule_forgiven then
  sl_set(st, 'forgive_at', sl_fmt(now))
  sl_rate_changed(st, dims, now, nil, nil, nil, 0.01)
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
out[4] = sl_shift_field(st)
if not ext then return sl_timed(out) end
local rates = {}
for _, d in ipairs(dims) do
  rates[#rates + 1] = d.name
  rates[#rates + 1] = string.format('%.2f', d.r0 * 60000)
  rates[#rates + 1] = string.format('%.2f', d.r * 60000)
  rates[#rates + 1] = string.format('%.2f', sl_num(st, d.name .. '_outside', 0))
  rates[#rates + 1] = string.format('%.2f', sl_held(d, scale) * 60000)
end
-- The calibrated estimates (sl_cal), as one more five: the ratio in force,
-- the quantile learned, the ratios kept, learning (1) or not (0). A
-- reader of the dimensions' fives passes over a name it does not know.
do
  local r, learning = sl_cal(limits, st, now)
  local kept = 0
  if st.estimate_ratios and st.estimate_ratios ~= '' then
    kept = select(2, string.gsub(st.estimate_ratios, ',', '')) + 1
  end
  rates[#rates + 1] = 'estimate'
  rates[#rates + 1] = string.format('%.4f', r)
  rates[#rates + 1] = st.estimate_ratio or '1.0000'
  rates[#rates + 1] = tostring(kept)
  rates[#rates + 1] = learning and '1' or '0'
end
out[#out + 1] = rates
return sl_timed(out)
