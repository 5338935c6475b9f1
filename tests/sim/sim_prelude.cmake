# Script mode: OUT = PREAMBLE followed by COMMON, byte for byte (the
# simulated core's prelude: tests/sim/sim_preamble.lua before lua/common.lua).
#   cmake -DPREAMBLE=... -DCOMMON=... -DOUT=... -P sim_prelude.cmake
file(READ "${PREAMBLE}" pre_text)
file(READ "${COMMON}" common_text)
file(WRITE "${OUT}.tmp" "${pre_text}")
file(APPEND "${OUT}.tmp" "${common_text}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
