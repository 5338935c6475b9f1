-- tests/sim/sim_preamble.lua: the scripts' simulated clock. Prepended, in
-- simulation builds only, before lua/common.lua (tests/sim/CMakeLists.txt
-- embeds its own copy of the scripts with it; production's embedded
-- scripts never contain it, and tests/sim/test_sim_scripts.c checks that).
-- No line of lua/ changes: this local `redis` shadows the global one for
-- everything after it, and answers TIME from the simulator's clock:
--   sluice:sim:now_us  the virtual time (µs) the call reached Redis, set by
--                      the simulator (tests/sim/simredis.c) before each call
--   sluice:sim:cmd_us  the modelled time of one Redis command in a script
-- TIME returns now_us plus cmd_us for each command the script ran so far,
-- so the clock a script reads (sl_now) is the call's arrival plus what it
-- did before, and the @timed cost figure (sl_timed) is cmd_us times the
-- commands of its body: modelled, and the same on every run.
local SL_SIM = true
local redis = (function(real)
  local now_us, cmd_us, ncmd = nil, 0, 0
  local function call(cmd, ...)
    if cmd == 'TIME' then
      if not now_us then
        local v = real.call('MGET', 'sluice:sim:now_us', 'sluice:sim:cmd_us')
        now_us = tonumber(v[1]) or 0
        cmd_us = tonumber(v[2]) or 0
      end
      local us = now_us + ncmd * cmd_us
      local s = math.floor(us / 1000000)
      return {string.format('%d', s), string.format('%d', us - s * 1000000)}
    end
    ncmd = ncmd + 1
    return real.call(cmd, ...)
  end
  return setmetatable({call = call, sim = SL_SIM}, {__index = real})
end)(redis)
