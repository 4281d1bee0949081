# linmeta-replay on a 200 KB line nesting 100000 arrays (any recursive walk of it overflows the
# stack) followed by the public cases: that line is rejected on its own, every case still runs.
#   cmake -DREPLAY=linmeta-replay -DCASES=public.jsonl -DNUM_CASES=N -DWORKDIR=DIR -P replay_deep.cmake
string(REPEAT "[" 100000 open)
string(REPEAT "]" 100000 close)
file(READ "${CASES}" cases)
set(file "${WORKDIR}/replay_deep.jsonl")
file(WRITE "${file}" "${open}${close}\n${cases}")
execute_process(COMMAND "${REPLAY}" check "${file}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
file(REMOVE "${file}")
message("${out}${err}")
if(NOT rc STREQUAL "1")
  message(FATAL_ERROR "exit status ${rc}, expected 1")
endif()
set(want "^[^\n]*replay_deep.jsonl:1: JSON nested deeper than 64 levels \\(column 65\\)\n${NUM_CASES} passed, 1 failed\n$")
if(NOT "${out}" MATCHES "${want}")
  message(FATAL_ERROR "output does not match: ${want}")
endif()
