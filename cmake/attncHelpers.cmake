# attnc_add_definitions(<exe> SOURCES <src>... REGISTER <function>): an
# executable that is the attnc CLI (list, show, check, emit, compile, tune,
# bench) over a project's own definitions. The sources define
# `void <function>(attn::dsl::Registry &)` at global scope, which registers
# them; the
# program's main is generated. Works with the installed package
# (find_package(attnc)) and inside attnc's own tree (add_subdirectory).
# A cache entry: the function is called from other directories.
set(ATTNC_HELPERS_DIR ${CMAKE_CURRENT_LIST_DIR} CACHE INTERNAL
  "cmake/ of attnc, for attnc_add_definitions")

function(attnc_add_definitions exe)
  cmake_parse_arguments(ARG "" "REGISTER" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "attnc_add_definitions(${exe}): no SOURCES")
  endif()
  if(NOT ARG_REGISTER MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "attnc_add_definitions(${exe}): REGISTER must name "
      "a C++ function at global scope, `void f(attn::dsl::Registry &)`; "
      "got '${ARG_REGISTER}'")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attnc_add_definitions(${exe}): unexpected "
      "arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  set(ATTNC_REGISTER ${ARG_REGISTER})
  set(main ${CMAKE_CURRENT_BINARY_DIR}/${exe}_main.cpp)
  configure_file(${ATTNC_HELPERS_DIR}/AttncCliMain.cpp.in ${main} @ONLY)
  add_executable(${exe} ${main} ${ARG_SOURCES})
  target_link_libraries(${exe} PRIVATE attnc::main)
endfunction()
