# Builds the first C example of a page (the README, or -DDOC) exactly as written
# against the build tree's library, and runs it: an example in the docs is code,
# and cannot rot. -DSRC (the source tree), -DBIN (a scratch folder), -DCC, -DLIB
# (libferry.so), -DSANITIZE (the build's sanitizers, which the program must be
# built with too), -DCUDA_LIBRARY (a driver for FERRY_CUDA_LIBRARY: the stand-in).
file(REMOVE_RECURSE ${BIN})
file(MAKE_DIRECTORY ${BIN})
if(NOT DOC)
  set(DOC README.md)
endif()
if(CUDA_LIBRARY)
  set(ENV{FERRY_CUDA_LIBRARY} ${CUDA_LIBRARY})
endif()
file(READ ${SRC}/${DOC} text)
string(FIND "${text}" "```c\n" start)
if(start LESS 0)
  message(FATAL_ERROR "${DOC} has no ```c block")
endif()
math(EXPR start "${start} + 5")
string(SUBSTRING "${text}" ${start} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} code)
file(WRITE ${BIN}/readme.c "${code}")
get_filename_component(libdir ${LIB} DIRECTORY)
set(san "")
if(SANITIZE)
  set(san -fsanitize=${SANITIZE})
endif()
execute_process(COMMAND ${CC} -std=c11 -Wall -Wextra -Werror ${san} ${BIN}/readme.c -I${SRC}/include
  ${LIB} -Wl,-rpath,${libdir} -o ${BIN}/readme RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc)
  message(FATAL_ERROR "the example of ${DOC} does not compile:\n${err}")
endif()
execute_process(COMMAND ${BIN}/readme RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
  TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the example of ${DOC} failed (${rc}): ${out}${err}")
endif()
file(REMOVE_RECURSE ${BIN})
