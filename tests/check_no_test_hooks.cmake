# unit.no_test_hooks_in_libzcrpc: the shipped library carries no test hook.
#   (a) the full symbol table (nm) of libzcrpc.so has no zcrpc__test* and no
#       *_test_* symbol, and its dynamic table (nm -D) no zcrpc__ symbol;
#   (b) a file that includes src/transport/test_hooks.h without ZCRPC_TESTING
#       does not compile (the header's #error), so a hook cannot slip into a
#       build with testing off.
# cmake -DLIB=<libzcrpc.so> -DNM=<nm> -DCC=<C compiler> -DSRC=<source dir>
#       -DWORK=<scratch dir> -P check_no_test_hooks.cmake
execute_process(COMMAND ${NM} ${LIB} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm ${LIB} failed (${rc})")
endif()
string(REGEX MATCHALL "[^\n]* (zcrpc__test[A-Za-z0-9_]*|[A-Za-z0-9_]*_test_[A-Za-z0-9_]*)\n" bad "${syms}")
if(bad)
  message(FATAL_ERROR "test hook symbols in ${LIB}:\n${bad}")
endif()
execute_process(COMMAND ${NM} -D --defined-only ${LIB} OUTPUT_VARIABLE dsyms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D ${LIB} failed (${rc})")
endif()
string(REGEX MATCHALL "[^\n]* zcrpc__[A-Za-z0-9_]*\n" bad "${dsyms}")
if(bad)
  message(FATAL_ERROR "internal symbols exported by ${LIB}:\n${bad}")
endif()

file(MAKE_DIRECTORY ${WORK})
file(WRITE ${WORK}/uses_hooks.c "#include \"transport/test_hooks.h\"\nint main(void) { zcrpc__test_write_piece(4096); return 0; }\n")
execute_process(COMMAND ${CC} -std=c11 -fsyntax-only -I${SRC}/include -I${SRC}/src
                        ${WORK}/uses_hooks.c
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "test_hooks.h compiled without ZCRPC_TESTING")
endif()
if(NOT err MATCHES "test build only")
  message(FATAL_ERROR "test_hooks.h failed to compile without ZCRPC_TESTING, but not at its #error:\n${err}")
endif()
# The same file compiles with it: the failure above is the guard, not a typo.
execute_process(COMMAND ${CC} -std=c11 -fsyntax-only -DZCRPC_TESTING -I${SRC}/include
                        -I${SRC}/src ${WORK}/uses_hooks.c
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "test_hooks.h does not compile with ZCRPC_TESTING:\n${err}")
endif()
message(STATUS "libzcrpc has no test hook; test_hooks.h refuses a build without ZCRPC_TESTING")
