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

install(DIRECTORY ${PROJECT_SOURCE_DIR}/compiler/include/
    ${PROJECT_SOURCE_DIR}/runtime/include/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT devel
  FILES_MATCHING PATTERN "*.h" PATTERN "*.def")
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
