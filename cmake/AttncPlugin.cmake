# attnc_add_plugin(NAME SOURCES src...): a shared library of C++ definitions
# that attnc_plugin_load (C) and attnc.load_plugin (Python) load. The
# sources define attnc_plugin::registerDefinitions (attnc/plugin.h); the
# library links its own copy of the compiler frontend (hidden, as LLVM
# Support is) and exports one function, which hands the definitions over as
# traced IR graphs. Needs the attnc_compiler target (this project, or one
# that adds it with add_subdirectory).
# A cache entry: the function is called from other directories.
set(ATTNC_PLUGIN_DIR ${CMAKE_CURRENT_LIST_DIR} CACHE INTERNAL
  "cmake/ of attnc, for attnc_add_plugin")

function(attnc_add_plugin name)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "attnc_add_plugin(${name}): no SOURCES")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES}
    ${ATTNC_PLUGIN_DIR}/AttncPluginEntry.cpp)
  target_link_libraries(${name} PRIVATE attnc_compiler)
  target_include_directories(${name} PRIVATE
    ${ATTNC_PLUGIN_DIR}/../capi/include)
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${ATTNC_PLUGIN_DIR}/AttncPlugin.exports)
  target_link_options(${name} PRIVATE
    "LINKER:--exclude-libs,ALL"
    "LINKER:--version-script=${ATTNC_PLUGIN_DIR}/AttncPlugin.exports"
    "LINKER:--no-undefined")
endfunction()
