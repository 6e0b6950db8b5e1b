# Runs the `RUN:` line of TEST_FILE through attnc and pipes the output to
# FileCheck with the same file. `RUN: show mha --after dce` runs
# `attnc show mha --after dce`; a bare `RUN:` runs attnc with no arguments.
# A line `EXIT: N` expects exit status N (default 0); `ENV: NAME=VALUE`
# lines set the environment; stderr is checked together with stdout (stdout
# first). `STDOUT: FILE` sends stdout to FILE instead (/dev/full: a stdout
# that cannot be written), and only stderr is checked. `PROGRAM: NAME` runs
# the test program NAME (one of PROGRAMS, NAME=PATH pairs) instead of attnc.
file(STRINGS ${TEST_FILE} run_lines REGEX "^// RUN:")
list(LENGTH run_lines run_count)
if(NOT run_count EQUAL 1)
  message(FATAL_ERROR
    "${TEST_FILE}: expected one `// RUN:` line, found ${run_count}")
endif()
list(GET run_lines 0 run_line)
string(REGEX REPLACE "^// RUN: ?" "" run_args "${run_line}")
separate_arguments(run_args UNIX_COMMAND "${run_args}")
file(STRINGS ${TEST_FILE} exit_lines REGEX "^// EXIT:")
set(expected_exit 0)
if(exit_lines)
  list(GET exit_lines 0 exit_line)
  string(REGEX REPLACE "^// EXIT: *" "" expected_exit "${exit_line}")
  if(NOT expected_exit MATCHES "^[0-9]+$")
    message(FATAL_ERROR
      "${TEST_FILE}: `// EXIT:` needs a number, got '${expected_exit}'")
  endif()
endif()
# Without a CHECK line FileCheck would fail anyway; say why up front.
file(STRINGS ${TEST_FILE} check_lines REGEX "^// CHECK")
if(NOT check_lines)
  message(FATAL_ERROR "${TEST_FILE}: no CHECK lines")
endif()
# `// ENV: NAME=VALUE` lines set environment variables for the run.
file(STRINGS ${TEST_FILE} env_lines REGEX "^// ENV:")
set(run_env)
foreach(env_line IN LISTS env_lines)
  string(REGEX REPLACE "^// ENV: *" "" env_pair "${env_line}")
  list(APPEND run_env "${env_pair}")
endforeach()
set(program ${ATTNC})
file(STRINGS ${TEST_FILE} program_lines REGEX "^// PROGRAM:")
if(program_lines)
  list(GET program_lines 0 program_line)
  string(REGEX REPLACE "^// PROGRAM: *" "" program_name "${program_line}")
  set(program)
  foreach(pair IN LISTS PROGRAMS)
    if(pair MATCHES "^${program_name}=(.+)$")
      set(program ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(NOT program)
    message(FATAL_ERROR "${TEST_FILE}: no test program '${program_name}'")
  endif()
endif()
file(STRINGS ${TEST_FILE} stdout_lines REGEX "^// STDOUT:")
set(stdout_redirect OUTPUT_VARIABLE out)
if(stdout_lines)
  list(GET stdout_lines 0 stdout_line)
  string(REGEX REPLACE "^// STDOUT: *" "" stdout_file "${stdout_line}")
  set(stdout_redirect OUTPUT_FILE ${stdout_file})
  set(out)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env ${run_env} ${program} ${run_args}
  ${stdout_redirect} ERROR_VARIABLE err RESULT_VARIABLE rc)
# rc is a number, or a text such as "Segmentation fault" after a crash.
if(NOT rc STREQUAL expected_exit)
  message(FATAL_ERROR
    "${program} ${run_args} exited ${rc}, expected ${expected_exit}\n${out}${err}")
endif()
string(RANDOM LENGTH 12 suffix)
set(tmp ${CMAKE_CURRENT_BINARY_DIR}/filecheck-${suffix}.txt)
file(WRITE ${tmp} "${out}${err}")
execute_process(COMMAND ${FILECHECK} ${TEST_FILE} --input-file ${tmp}
  --dump-input=fail
  RESULT_VARIABLE fc_rc OUTPUT_VARIABLE fc_out ERROR_VARIABLE fc_err)
file(REMOVE ${tmp})
if(NOT fc_rc EQUAL 0)
  message(FATAL_ERROR "FileCheck failed:\n${fc_out}${fc_err}")
endif()
