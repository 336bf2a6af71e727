# Configures ferry for one prefix and installs it into another (cmake --install
# --prefix), as a packager or a user's own tree does, then builds and runs a program outside the
# tree against it twice: through find_package(ferry) and through pkg-config.
# Also checks that the shared library exports only ferry_ symbols.
file(REMOVE_RECURSE ${BIN})
set(prefix ${BIN}/prefix)
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC} -B ${BIN}/build -DFERRY_BUILD_TESTS=OFF
  -DCMAKE_INSTALL_PREFIX=${BIN}/configured-prefix -DCMAKE_C_COMPILER=${CC} RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "configure failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN}/build -j2 RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "build failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BIN}/build --prefix ${prefix}
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed")
endif()

# Only the public API is exported.
execute_process(COMMAND nm -D --defined-only ${prefix}/lib/libferry.so OUTPUT_VARIABLE syms)
string(REGEX MATCHALL "\n[0-9a-f]+ [TDB] [^\n]+" lines "\n${syms}")
foreach(l ${lines})
  string(REGEX REPLACE ".* [TDB] " "" s "${l}")
  if(NOT s MATCHES "^ferry_" OR s MATCHES "^ferry__")
    message(FATAL_ERROR "libferry.so exports ${s}, which is not public API")
  endif()
endforeach()
execute_process(COMMAND readelf -d ${prefix}/lib/libferry.so OUTPUT_VARIABLE dyn)
if(NOT dyn MATCHES "SONAME.*libferry\\.so\\.0")
  message(FATAL_ERROR "libferry.so has no versioned SONAME")
endif()

# find_package
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SRC}/tests/install_consumer -B ${BIN}/consumer
  -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CC} RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "find_package(ferry) failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BIN}/consumer RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "building against the package failed")
endif()
foreach(exe consumer consumer_static)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib ${BIN}/consumer/${exe}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "${exe} failed: ${out}")
  endif()
  message(STATUS "${out}")
endforeach()

# pkg-config
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/lib/pkgconfig
  pkg-config --cflags --libs ferry OUTPUT_VARIABLE flags RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config does not know ferry")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(COMMAND ${CC} ${SRC}/tests/install_consumer/main.c ${flags} -o ${BIN}/pc_consumer
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building with pkg-config flags failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${prefix}/lib ${BIN}/pc_consumer
  RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(rc)
  message(FATAL_ERROR "the pkg-config build failed to run: ${out}")
endif()

# pkg-config for libferry.a (the libraries it uses as the system has them)
execute_process(COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${prefix}/lib/pkgconfig
  pkg-config --cflags --libs ferry-static OUTPUT_VARIABLE flags RESULT_VARIABLE rc
  OUTPUT_STRIP_TRAILING_WHITESPACE)
if(rc)
  message(FATAL_ERROR "pkg-config does not know ferry-static")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(COMMAND ${CC} ${SRC}/tests/install_consumer/main.c ${flags} -o ${BIN}/pc_static
  RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building with pkg-config ferry-static flags failed")
endif()
execute_process(COMMAND readelf -d ${BIN}/pc_static OUTPUT_VARIABLE dyn)
if(dyn MATCHES "libferry")
  message(FATAL_ERROR "the ferry-static build needs libferry.so")
endif()
execute_process(COMMAND ${BIN}/pc_static RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(rc)
  message(FATAL_ERROR "the ferry-static build failed to run: ${out}")
endif()
if(EXISTS ${BIN}/configured-prefix)
  message(FATAL_ERROR "the install wrote into the configured prefix, not --prefix")
endif()
file(REMOVE_RECURSE ${BIN})
