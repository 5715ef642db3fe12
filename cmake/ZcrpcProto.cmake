# zcrpc_protoc_c(TARGET <target> PROTOS <file.proto>... [IMPORT_DIR <dir>])
#
# Runs protoc-c on each .proto at build time and adds the generated
# <stem>.pb-c.c/.h to <target>. Output goes to the build tree only
# (${CMAKE_CURRENT_BINARY_DIR}/pb-c), keeping each file's path relative to
# IMPORT_DIR (default: the directory of the first proto), so
# "foo/bar.proto" gives "#include \"foo/bar.pb-c.h\"". That directory is
# added to <target>'s include path (PUBLIC) and libprotobuf-c is linked.
# Imports are tracked through protoc-c's --dependency_out.
#
# zcrpc_add_proto(TARGET <target> FILES <file.proto>... [IMPORT_DIR <dir>])
#
# The same, plus typed zcrpc stubs: protoc-c also writes a descriptor set
# that zcrpc-gen turns into <stem>.zcrpc.c/.h (typed sync and async calls,
# server registration). Output in ${CMAKE_CURRENT_BINARY_DIR}/zcrpc-gen.
# The <target> must link zcrpc (zcrpc::zcrpc).
include_guard(GLOBAL)
set(_ZCRPC_PROTO_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

if(NOT TARGET PkgConfig::PROTOBUFC)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PROTOBUFC REQUIRED IMPORTED_TARGET libprotobuf-c)
endif()
# protoc-c, never protoc-gen-c: under that name the binary runs in plugin mode.
find_program(ZCRPC_PROTOC_C NAMES protoc-c)
function(_zcrpc_need_protoc_c)
  if(NOT ZCRPC_PROTOC_C)
    message(FATAL_ERROR "protoc-c not found (Debian: protobuf-c-compiler)")
  endif()
endfunction()

function(zcrpc_protoc_c)
  cmake_parse_arguments(A "" "TARGET;IMPORT_DIR" "PROTOS" ${ARGN})
  _zcrpc_need_protoc_c()
  if(NOT A_TARGET OR NOT A_PROTOS)
    message(FATAL_ERROR "zcrpc_protoc_c: TARGET and PROTOS are required")
  endif()
  if(NOT A_IMPORT_DIR)
    list(GET A_PROTOS 0 first)
    get_filename_component(first ${first} ABSOLUTE) # a bare name has no folder
    get_filename_component(A_IMPORT_DIR ${first} DIRECTORY)
  endif()
  get_filename_component(import_dir ${A_IMPORT_DIR} ABSOLUTE)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/pb-c)
  file(MAKE_DIRECTORY ${out})
  foreach(p IN LISTS A_PROTOS)
    get_filename_component(abs ${p} ABSOLUTE)
    file(RELATIVE_PATH rel ${import_dir} ${abs})
    string(REGEX REPLACE "\\.proto$" "" stem ${rel})
    get_filename_component(stem_dir ${out}/${stem} DIRECTORY)
    file(MAKE_DIRECTORY ${stem_dir})
    add_custom_command(
      OUTPUT ${out}/${stem}.pb-c.c ${out}/${stem}.pb-c.h
      COMMAND ${ZCRPC_PROTOC_C} --c_out=${out} -I${import_dir}
              --dependency_out=${out}/${stem}.d ${abs}
      DEPENDS ${abs} ${ZCRPC_PROTOC_C}
      DEPFILE ${out}/${stem}.d
      COMMENT "protoc-c ${rel}"
      VERBATIM)
    target_sources(${A_TARGET} PRIVATE ${out}/${stem}.pb-c.c ${out}/${stem}.pb-c.h)
  endforeach()
  target_include_directories(${A_TARGET} PUBLIC $<BUILD_INTERFACE:${out}>)
  target_link_libraries(${A_TARGET} PUBLIC PkgConfig::PROTOBUFC)
endfunction()

function(zcrpc_add_proto)
  cmake_parse_arguments(A "" "TARGET;IMPORT_DIR" "FILES" ${ARGN})
  _zcrpc_need_protoc_c()
  if(NOT A_TARGET OR NOT A_FILES)
    message(FATAL_ERROR "zcrpc_add_proto: TARGET and FILES are required")
  endif()
  if(NOT A_IMPORT_DIR)
    list(GET A_FILES 0 first)
    get_filename_component(first ${first} ABSOLUTE) # a bare name has no folder
    get_filename_component(A_IMPORT_DIR ${first} DIRECTORY)
  endif()
  if(TARGET zcrpc-gen)                     # in zcrpc's own tree
    set(gen $<TARGET_FILE:zcrpc-gen>)
    set(gen_dep zcrpc-gen)
  else()                                   # from an installed package
    find_program(ZCRPC_GEN_EXECUTABLE zcrpc-gen REQUIRED
                 HINTS ${_ZCRPC_PROTO_CMAKE_DIR}/../../../bin)
    set(gen ${ZCRPC_GEN_EXECUTABLE})
    set(gen_dep ${ZCRPC_GEN_EXECUTABLE})
  endif()
  get_filename_component(import_dir ${A_IMPORT_DIR} ABSOLUTE)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/zcrpc-gen)
  file(MAKE_DIRECTORY ${out})
  foreach(p IN LISTS A_FILES)
    get_filename_component(abs ${p} ABSOLUTE)
    file(RELATIVE_PATH rel ${import_dir} ${abs})
    string(REGEX REPLACE "\\.proto$" "" stem ${rel})
    get_filename_component(stem_dir ${out}/${stem} DIRECTORY)
    file(MAKE_DIRECTORY ${stem_dir})
    add_custom_command(
      OUTPUT ${out}/${stem}.pb-c.c ${out}/${stem}.pb-c.h
             ${out}/${stem}.zcrpc.c ${out}/${stem}.zcrpc.h
      COMMAND ${ZCRPC_PROTOC_C} --c_out=${out} -I${import_dir}
              --include_imports --include_source_info -o ${out}/${stem}.desc
              --dependency_out=${out}/${stem}.d ${abs}
      COMMAND ${gen} ${out}/${stem}.desc ${rel} ${out}
      DEPENDS ${abs} ${ZCRPC_PROTOC_C} ${gen_dep}
      DEPFILE ${out}/${stem}.d
      COMMENT "protoc-c + zcrpc-gen ${rel}"
      VERBATIM)
    target_sources(${A_TARGET} PRIVATE
      ${out}/${stem}.pb-c.c ${out}/${stem}.pb-c.h
      ${out}/${stem}.zcrpc.c ${out}/${stem}.zcrpc.h)
  endforeach()
  target_include_directories(${A_TARGET} PUBLIC $<BUILD_INTERFACE:${out}>)
  target_link_libraries(${A_TARGET} PUBLIC PkgConfig::PROTOBUFC)
endfunction()
