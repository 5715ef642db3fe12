# Runs one libFuzzer target for ctest (see CMakeLists.txt here).
#   cmake -DMODE=replay|fuzz|runs -DFUZZER=BIN -DSEEDS=DIR -DWORK=DIR
#         [-DSECONDS=N] [-DRUNS=N] [-DDICT=FILE] -P run_fuzz.cmake
# replay: runs every file in SEEDS once (no mutation).
# fuzz:   fuzzes for SECONDS from SEEDS; new inputs and crash artifacts go to
#         a fresh WORK directory, never into SEEDS.
# runs:   the same for RUNS executions (the long run of docs/fuzzing.md).
# Fails on any crash, sanitizer report, timeout or missing seed, and prints
# how many inputs ran.
foreach(v MODE FUZZER SEEDS WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzz.cmake: -D${v}= is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(GLOB seeds LIST_DIRECTORIES false ${SEEDS}/*)
list(LENGTH seeds nseeds)
if(nseeds EQUAL 0)
  message(FATAL_ERROR "no seed inputs in ${SEEDS}")
endif()

# -timeout: one input is a few microseconds; 30 s only catches a real hang,
# not a machine stalled by parallel builds (5 s once tripped on a trivial
# input at load 17 on 2 cores).
set(common -timeout=30 -rss_limit_mb=2048 -max_len=4096
    -artifact_prefix=${WORK}/artifacts/ -print_final_stats=1)
if(MODE STREQUAL "replay")
  # Files as arguments: libFuzzer runs each one once and exits.
  set(cmd ${FUZZER} ${common} ${seeds})
elseif(MODE STREQUAL "fuzz" OR MODE STREQUAL "runs")
  if(MODE STREQUAL "runs")
    if(NOT RUNS)
      message(FATAL_ERROR "run_fuzz.cmake: MODE=runs needs -DRUNS=")
    endif()
    set(cmd ${FUZZER} ${common} -runs=${RUNS})
  else()
    if(NOT SECONDS)
      set(SECONDS 60)
    endif()
    set(cmd ${FUZZER} ${common} -max_total_time=${SECONDS})
  endif()
  if(DICT)
    list(APPEND cmd -dict=${DICT})
  endif()
  list(APPEND cmd ${WORK}/corpus ${SEEDS})
else()
  message(FATAL_ERROR "run_fuzz.cmake: MODE must be replay, fuzz or runs")
endif()

string(REPLACE ";" " " shown "${cmd}")
message(STATUS "running: ${shown}")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out
                ECHO_OUTPUT_VARIABLE ECHO_ERROR_VARIABLE)

set(execs "?")
set(rate "?")
if(out MATCHES "stat::number_of_executed_units: ([0-9]+)")
  set(execs ${CMAKE_MATCH_1})
endif()
if(out MATCHES "stat::average_exec_per_sec: +([0-9]+)")
  set(rate ${CMAKE_MATCH_1})
endif()
# The last status line libFuzzer printed: edges covered, features, corpus.
set(cov "?")
string(REGEX MATCHALL "cov: [0-9]+ ft: [0-9]+ corp: [0-9]+/[0-9]+[a-zA-Z]*" covs "${out}")
if(covs)
  list(GET covs -1 cov)
endif()
file(GLOB artifacts ${WORK}/artifacts/*)
if(NOT rc EQUAL 0 OR artifacts
   OR out MATCHES "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:")
  message(FATAL_ERROR "${MODE}: the fuzzer failed (exit ${rc}) after ${execs} inputs; "
          "artifacts: ${artifacts}")
endif()
if(MODE STREQUAL "replay")
  # Every seed must have run.
  string(REGEX MATCHALL "Executed [^\n]+ in [0-9]+ ms" ran "${out}")
  list(LENGTH ran nran)
  if(NOT nran EQUAL nseeds)
    message(FATAL_ERROR "replay: ${nran} of ${nseeds} seeds ran")
  endif()
  message(STATUS "replay: all ${nseeds} seeds ran cleanly")
elseif(MODE STREQUAL "runs")
  message(STATUS "runs: ${execs} executions (${rate} exec/s), ${nseeds} seeds, "
          "${cov}, no crash")
else()
  message(STATUS "fuzz: ${execs} executions in ${SECONDS} s (${rate} exec/s), "
          "${nseeds} seeds, ${cov}, no crash")
endif()
