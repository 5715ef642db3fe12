# zcrpc_protoc_c(TARGET <target> FILES <file.proto>... [IMPORT_DIR <dir>]
#                [IMPORT_DIRS <dir>...] [DEPENDS <target>...])
#
# Runs protoc-c on each .proto at build time and adds the generated
# <stem>.pb-c.c/.h to <target>. Output goes to the build tree only
# (${CMAKE_CURRENT_BINARY_DIR}/pb-c), keeping each file's path relative to
# IMPORT_DIR (default: the directory of the first proto), so
# "foo/bar.proto" gives "#include \"foo/bar.pb-c.h\"". That directory is
# added to <target>'s include path (PUBLIC) and libprotobuf-c is linked.
# Changes to imported files are tracked through protoc-c's --dependency_out.
# (PROTOS, the keyword of earlier versions, is still taken, with a
# deprecation warning.)
#
# zcrpc_add_proto(TARGET <target> FILES <file.proto>... [IMPORT_DIR <dir>]
#                 [IMPORT_DIRS <dir>...] [DEPENDS <target>...])
#
# The same, plus typed zcrpc stubs: protoc-c also writes a descriptor set
# that zcrpc-gen turns into <stem>.zcrpc.c/.h (typed sync and async calls,
# server registration). Output in ${CMAKE_CURRENT_BINARY_DIR}/zcrpc-gen.
# The stubs call the protobuf-c glue: <target> links zcrpc::pb (PUBLIC),
# which brings zcrpc::zcrpc and libprotobuf-c (zcrpc's own tests set
# ZCRPC_PROTO_PB_TARGET to the glue's internal static build instead).
#
# Imports, as protoc users expect: an imported file is looked up in
# IMPORT_DIR, then IMPORT_DIRS, then the import directories of the DEPENDS
# targets, then protoc-c's own include directory (google/protobuf/*.proto,
# protobuf-c/protobuf-c.proto); all of them are passed to protoc-c. An
# import that is in FILES is generated there; one that a DEPENDS target
# generated (made by zcrpc_protoc_c or zcrpc_add_proto) comes from that
# target, which <target> links; any other import (and what it imports in
# turn) gets its protoc-c code (no stubs: list it in FILES for those)
# generated into <target> too. Files with (pb_c_file).no_generate
# (protobuf-c.proto) are skipped, as protoc-c skips them. An import found
# nowhere stops the configure step, naming the file and the directories.
# Imports are read at configure time; changing a .proto re-runs it.
#
# libprotobuf-c is looked up here but needed only by these functions: a
# project using only the raw API (zcrpc::zcrpc) configures without it.
include_guard(GLOBAL)
set(_ZCRPC_PROTO_CMAKE_DIR ${CMAKE_CURRENT_LIST_DIR})

if(NOT TARGET PkgConfig::PROTOBUFC)
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PROTOBUFC QUIET IMPORTED_TARGET GLOBAL libprotobuf-c)
endif()
function(_zcrpc_need_protobuf_c fn)
  if(NOT TARGET PkgConfig::PROTOBUFC)
    message(FATAL_ERROR "${fn}: libprotobuf-c not found by pkg-config (Debian: libprotobuf-c-dev)")
  endif()
endfunction()
# protoc-c, never protoc-gen-c: under that name the binary runs in plugin mode.
find_program(ZCRPC_PROTOC_C NAMES protoc-c)
function(_zcrpc_need_protoc_c)
  if(NOT ZCRPC_PROTOC_C)
    message(FATAL_ERROR "protoc-c not found (Debian: protobuf-c-compiler)")
  endif()
endfunction()

# protoc-c's own include directory: <prefix>/include beside <prefix>/bin,
# where libprotoc finds google/protobuf/descriptor.proto without -I.
function(_zcrpc_protoc_include out)
  set(dir "")
  get_filename_component(real ${ZCRPC_PROTOC_C} REALPATH)
  foreach(exe ${ZCRPC_PROTOC_C} ${real})
    get_filename_component(bin ${exe} DIRECTORY)
    get_filename_component(inc ${bin}/../include ABSOLUTE)
    if(NOT dir AND EXISTS ${inc}/google/protobuf/descriptor.proto)
      set(dir ${inc})
    endif()
  endforeach()
  set(${out} ${dir} PARENT_SCOPE)
endfunction()

# The names a .proto imports ("import [public|weak] \"x.proto\";"), comments
# left out; and whether it sets (pb_c_file).no_generate.
function(_zcrpc_proto_scan file out_imports out_nogen)
  file(READ ${file} text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" " " text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  string(REPLACE ";" "\n" text "${text}")
  string(REGEX MATCHALL
         "(^|\n)[ \t\r]*import[ \t\r\n]+(public[ \t\r\n]+|weak[ \t\r\n]+)?\"[^\"\n]+\""
         hits "${text}")
  set(names "")
  foreach(h IN LISTS hits)
    string(REGEX REPLACE ".*\"([^\"]+)\"$" "\\1" n "${h}")
    list(APPEND names ${n})
  endforeach()
  set(nogen FALSE)
  if(text MATCHES "\\(pb_c_file\\)[ \t\r\n]*\\.[ \t\r\n]*no_generate[ \t\r\n]*=[ \t\r\n]*true")
    set(nogen TRUE)
  endif()
  set(${out_imports} ${names} PARENT_SCOPE)
  set(${out_nogen} ${nogen} PARENT_SCOPE)
endfunction()

# One protoc-c (+ zcrpc-gen when gen is set) command for <rel> into <out>.
function(_zcrpc_proto_command fn target out abs rel iflags gen gen_dep)
  string(REGEX REPLACE "\\.proto$" "" stem ${rel})
  get_filename_component(stem_dir ${out}/${stem} DIRECTORY)
  file(MAKE_DIRECTORY ${stem_dir})
  # One rule per output and directory: a second target generating the same
  # file here would race with the first (and link its symbols twice).
  get_property(owner DIRECTORY PROPERTY "_zcrpc_proto_owner:${out}/${stem}")
  if(owner)
    message(FATAL_ERROR "${fn}(${target}): ${rel} is generated into ${out} for target "
            "${owner} already; generate each file in one target and give the others "
            "DEPENDS ${owner}")
  endif()
  set_property(DIRECTORY PROPERTY "_zcrpc_proto_owner:${out}/${stem}" ${target})
  set(outputs ${out}/${stem}.pb-c.c ${out}/${stem}.pb-c.h)
  if(gen)
    list(APPEND outputs ${out}/${stem}.zcrpc.c ${out}/${stem}.zcrpc.h)
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND ${ZCRPC_PROTOC_C} --c_out=${out} ${iflags}
              --include_imports --include_source_info -o ${out}/${stem}.desc
              --dependency_out=${out}/${stem}.d ${abs}
      COMMAND ${gen} ${out}/${stem}.desc ${rel} ${out}
      DEPENDS ${abs} ${ZCRPC_PROTOC_C} ${gen_dep}
      DEPFILE ${out}/${stem}.d
      COMMENT "protoc-c + zcrpc-gen ${rel}"
      VERBATIM)
  else()
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND ${ZCRPC_PROTOC_C} --c_out=${out} ${iflags}
              --dependency_out=${out}/${stem}.d ${abs}
      DEPENDS ${abs} ${ZCRPC_PROTOC_C}
      DEPFILE ${out}/${stem}.d
      COMMENT "protoc-c ${rel}"
      VERBATIM)
  endif()
  target_sources(${target} PRIVATE ${outputs})
endfunction()

# The imports of the files <rels> (found at <abss>) that <target> must
# generate itself: not in <rels>, not in <provided>, not no_generate.
function(_zcrpc_proto_imports fn rels abss dirs provided out_rels out_abss)
  set(queue ${abss})
  set(queue_rels ${rels})
  set(seen ${rels} ${provided})
  set(extra_rels "")
  set(extra_abss "")
  while(queue)
    list(POP_FRONT queue abs)
    list(POP_FRONT queue_rels rel)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${abs})
    _zcrpc_proto_scan(${abs} imports nogen)
    foreach(n IN LISTS imports)
      if(n IN_LIST seen)
        continue()
      endif()
      list(APPEND seen ${n})
      set(found "")
      foreach(d IN LISTS dirs)
        if(NOT found AND EXISTS ${d}/${n})
          set(found ${d}/${n})
        endif()
      endforeach()
      if(NOT found)
        string(REPLACE ";" ", " where "${dirs}")
        message(FATAL_ERROR "${fn}: ${rel} imports ${n}, which is in none of the import "
                "directories (${where}); add its directory to IMPORT_DIRS, list it in "
                "FILES, or give the target that generates it as DEPENDS")
      endif()
      _zcrpc_proto_scan(${found} sub sub_nogen)
      if(sub_nogen)
        continue()    # protobuf-c.proto: protoc-c writes nothing for it
      endif()
      list(APPEND extra_rels ${n})
      list(APPEND extra_abss ${found})
      list(APPEND queue ${found})
      list(APPEND queue_rels ${n})
    endforeach()
  endwhile()
  set(${out_rels} ${extra_rels} PARENT_SCOPE)
  set(${out_abss} ${extra_abss} PARENT_SCOPE)
endfunction()

# zcrpc_protoc_c (stubs FALSE) and zcrpc_add_proto (stubs TRUE).
function(_zcrpc_proto fn stubs)
  cmake_parse_arguments(A "" "TARGET;IMPORT_DIR" "FILES;PROTOS;IMPORT_DIRS;DEPENDS" ${ARGN})
  _zcrpc_need_protoc_c()
  _zcrpc_need_protobuf_c(${fn})
  if(A_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${fn}: unknown arguments ${A_UNPARSED_ARGUMENTS}")
  endif()
  if(A_PROTOS)
    if(stubs)
      message(FATAL_ERROR "${fn}: the keyword is FILES, not PROTOS")
    endif()
    message(DEPRECATION "${fn}: PROTOS is now called FILES, as in zcrpc_add_proto")
    list(APPEND A_FILES ${A_PROTOS})
  endif()
  if(NOT A_TARGET OR NOT A_FILES)
    message(FATAL_ERROR "${fn}: TARGET and FILES are required")
  endif()
  if(NOT A_IMPORT_DIR)
    list(GET A_FILES 0 first)
    get_filename_component(first ${first} ABSOLUTE) # a bare name has no folder
    get_filename_component(A_IMPORT_DIR ${first} DIRECTORY)
  endif()
  get_filename_component(import_dir ${A_IMPORT_DIR} ABSOLUTE)
  set(dirs ${import_dir})
  foreach(d IN LISTS A_IMPORT_DIRS)
    get_filename_component(d ${d} ABSOLUTE)
    list(APPEND dirs ${d})
  endforeach()
  # What an earlier call generated into the same target is there already.
  get_target_property(provided ${A_TARGET} ZCRPC_PROTO_PROVIDES)
  if(NOT provided)
    set(provided "")
  endif()
  foreach(dep IN LISTS A_DEPENDS)
    if(NOT TARGET ${dep})
      message(FATAL_ERROR "${fn}: DEPENDS ${dep} is not a target (define it first)")
    endif()
    get_target_property(p ${dep} ZCRPC_PROTO_PROVIDES)
    get_target_property(pd ${dep} ZCRPC_PROTO_IMPORT_DIRS)
    if(NOT p)
      message(FATAL_ERROR "${fn}: DEPENDS ${dep} was not made by zcrpc_protoc_c or "
              "zcrpc_add_proto")
    endif()
    list(APPEND provided ${p})
    list(APPEND dirs ${pd})
    target_link_libraries(${A_TARGET} PUBLIC ${dep})
  endforeach()
  list(REMOVE_DUPLICATES dirs)
  set(iflags "")
  foreach(d IN LISTS dirs)
    list(APPEND iflags -I${d})
  endforeach()
  _zcrpc_protoc_include(protoc_inc)
  set(search ${dirs} ${protoc_inc})

  set(gen "")
  set(gen_dep "")
  if(stubs)
    set(out ${CMAKE_CURRENT_BINARY_DIR}/zcrpc-gen)
    if(TARGET zcrpc-gen)                     # in zcrpc's own tree
      set(gen $<TARGET_FILE:zcrpc-gen>)
      set(gen_dep zcrpc-gen)
    else()                                   # from an installed package
      find_program(ZCRPC_GEN_EXECUTABLE zcrpc-gen REQUIRED
                   HINTS ${_ZCRPC_PROTO_CMAKE_DIR}/../../../bin)
      set(gen ${ZCRPC_GEN_EXECUTABLE})
      set(gen_dep ${ZCRPC_GEN_EXECUTABLE})
    endif()
  else()
    set(out ${CMAKE_CURRENT_BINARY_DIR}/pb-c)
  endif()
  file(MAKE_DIRECTORY ${out})

  set(rels "")
  set(abss "")
  foreach(p IN LISTS A_FILES)
    get_filename_component(abs ${p} ABSOLUTE)
    file(RELATIVE_PATH rel ${import_dir} ${abs})
    if(rel MATCHES "^\\.\\./")
      message(FATAL_ERROR "${fn}: ${p} is not under IMPORT_DIR ${import_dir}")
    endif()
    list(APPEND rels ${rel})
    list(APPEND abss ${abs})
    _zcrpc_proto_command(${fn} ${A_TARGET} ${out} ${abs} ${rel} "${iflags}" "${gen}"
                         "${gen_dep}")
  endforeach()
  _zcrpc_proto_imports(${fn} "${rels}" "${abss}" "${search}" "${provided}" xrels xabss)
  foreach(rel abs IN ZIP_LISTS xrels xabss)
    _zcrpc_proto_command(${fn} ${A_TARGET} ${out} ${abs} ${rel} "${iflags}" "" "")
  endforeach()
  target_include_directories(${A_TARGET} PUBLIC $<BUILD_INTERFACE:${out}>)
  target_link_libraries(${A_TARGET} PUBLIC PkgConfig::PROTOBUFC)
  if(stubs)
    if(NOT ZCRPC_PROTO_PB_TARGET)
      set(ZCRPC_PROTO_PB_TARGET zcrpc::pb)
    endif()
    target_link_libraries(${A_TARGET} PUBLIC ${ZCRPC_PROTO_PB_TARGET})
  endif()
  # What a target that names this one in DEPENDS gets from it.
  list(APPEND provided ${rels} ${xrels})
  list(REMOVE_DUPLICATES provided)
  set_property(TARGET ${A_TARGET} PROPERTY ZCRPC_PROTO_PROVIDES ${provided})
  set_property(TARGET ${A_TARGET} APPEND PROPERTY ZCRPC_PROTO_IMPORT_DIRS ${dirs})
endfunction()

function(zcrpc_protoc_c)
  _zcrpc_proto(zcrpc_protoc_c FALSE ${ARGN})
endfunction()

function(zcrpc_add_proto)
  _zcrpc_proto(zcrpc_add_proto TRUE ${ARGN})
endfunction()
