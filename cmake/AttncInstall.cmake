# `cmake --install`: headers, static libraries, the attnc CLI and a CMake
# package (attncConfig.cmake) whose namespaced targets a project uses with
# find_package(attnc CONFIG): attnc::compiler, attnc::runtime, attnc::main,
# attnc::examples; and attnc_add_definitions() for a CLI over its own
# definitions (cmake/attncHelpers.cmake).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTNC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attnc)

# The public names; the static libraries' own dependencies (the embedded
# templates and device library, LLVM, NVRTC) travel with them.
set_target_properties(attnc_compiler PROPERTIES EXPORT_NAME compiler)
set_target_properties(attnc_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(attnc_main PROPERTIES EXPORT_NAME main)
set_target_properties(attnc_examples PROPERTIES EXPORT_NAME examples)
set_target_properties(attnc_device_library PROPERTIES
  EXPORT_NAME device_library)
set_target_properties(attnc_templates PROPERTIES EXPORT_NAME templates)
set_target_properties(attnc_llvm PROPERTIES EXPORT_NAME llvm)
set_target_properties(attnc_nvrtc PROPERTIES EXPORT_NAME nvrtc)

install(TARGETS attnc_compiler attnc_runtime attnc_main attnc_examples
    attnc_device_library attnc_templates attnc_llvm attnc_nvrtc
  EXPORT attncTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The CLI needs no run path: the runtime loads libnvrtc itself, first from
# the folders the build found it in (runtime/CMakeLists.txt).
set_target_properties(attnc PROPERTIES SKIP_BUILD_RPATH ON)
install(TARGETS attnc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT devel)

# The public headers (docs/architecture.md, "Public headers"): what a
# project that defines variants and calls the runtime includes. None of them
# reaches an LLVM or DLPack header (the "install: public headers" test
# compiles each alone against the installed prefix); every other header
# stays private to this tree and is not installed.
set(ATTNC_PUBLIC_HEADERS
  compiler/include/attn/Error.h
  compiler/include/attn/GpuArch.h
  compiler/include/attn/ir/Types.h
  compiler/include/attn/ir/Nodes.def
  compiler/include/attn/dsl/Definition.h
  compiler/include/attn/dsl/Library.h
  compiler/include/attn/dsl/Names.h
  compiler/include/attn/dsl/Problem.h
  compiler/include/attn/dsl/Registry.h
  compiler/include/attn/dsl/Symbol.h
  compiler/include/attn/codegen/KernelSource.h
  compiler/include/attn/codegen/LinearConfig.h
  runtime/include/attn/runtime/Attention.h
  runtime/include/attn/runtime/BlockMask.h
  runtime/include/attn/runtime/Bundle.h
  runtime/include/attn/runtime/Errors.h
  runtime/include/attn/runtime/EventTiming.h
  runtime/include/attn/runtime/KernelCache.h
  runtime/include/attn/runtime/LinearAttention.h
  runtime/include/attn/runtime/Paged.h)
foreach(header ${ATTNC_PUBLIC_HEADERS})
  string(REGEX REPLACE "^[a-z]+/include/" "" relative ${header})
  get_filename_component(folder ${relative} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header}
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${folder} COMPONENT devel)
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/tools/attnc/AttncMain.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnc-main COMPONENT devel)
install(FILES ${PROJECT_SOURCE_DIR}/dsl_examples/Examples.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnc-examples COMPONENT devel)

install(EXPORT attncTargets NAMESPACE attnc::
  DESTINATION ${ATTNC_CMAKE_DIR} COMPONENT devel)
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/attncConfig.cmake.in
  ${PROJECT_BINARY_DIR}/attncConfig.cmake
  INSTALL_DESTINATION ${ATTNC_CMAKE_DIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/attncConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attncConfig.cmake
    ${PROJECT_BINARY_DIR}/attncConfigVersion.cmake
    ${PROJECT_SOURCE_DIR}/cmake/attncHelpers.cmake
    ${PROJECT_SOURCE_DIR}/cmake/AttncCliMain.cpp.in
  DESTINATION ${ATTNC_CMAKE_DIR} COMPONENT devel)
