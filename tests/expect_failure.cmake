# Runs CMD with ARGS (a ;-list); passes when it exits non-zero and its output matches REGEX.
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "expected a non-zero exit from: ${CMD} ${ARGS}\n${out}${err}")
endif()
string(REGEX MATCH "${REGEX}" found "${out}${err}")
if(NOT found)
  message(FATAL_ERROR "exit ${rc}, but the output does not match '${REGEX}':\n${out}${err}")
endif()
