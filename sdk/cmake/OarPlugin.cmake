# add_oar_plugin(NAME <name> SOURCES <src>... [LINK_LIBRARIES <lib>...] [OUTPUT_DIRECTORY <dir>]
#                [NO_INSTALL])
#
# Builds a device plugin `lib oar_plugin_<name>.so` exactly the way every Oar plugin is built, in-tree
# or out-of-tree: C++20 against the SDK headers only, every symbol hidden except the one entry point
# (enforced by a linker version script), no undefined symbols left for the host to provide.
# The result lands in OUTPUT_DIRECTORY (default: ${OAR_PLUGIN_OUTPUT_DIRECTORY} when set, else the
# current binary folder) and is installed to <prefix>/lib/oar/plugins unless NO_INSTALL is given.
include_guard(GLOBAL)

function(add_oar_plugin)
  cmake_parse_arguments(P "NO_INSTALL" "NAME;OUTPUT_DIRECTORY" "SOURCES;LINK_LIBRARIES" ${ARGN})
  if(NOT P_NAME)
    message(FATAL_ERROR "add_oar_plugin: NAME is required")
  endif()
  if(NOT P_NAME MATCHES "^[a-z][a-z0-9_]*$")
    message(FATAL_ERROR "add_oar_plugin: NAME '${P_NAME}' must match [a-z][a-z0-9_]*")
  endif()
  if(NOT P_SOURCES)
    message(FATAL_ERROR "add_oar_plugin(${P_NAME}): SOURCES is required")
  endif()
  if(NOT P_OUTPUT_DIRECTORY)
    if(DEFINED OAR_PLUGIN_OUTPUT_DIRECTORY)
      set(P_OUTPUT_DIRECTORY ${OAR_PLUGIN_OUTPUT_DIRECTORY})
    else()
      set(P_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    endif()
  endif()
  set(target oar_plugin_${P_NAME})
  add_library(${target} MODULE ${P_SOURCES})
  target_link_libraries(${target} PRIVATE oar::plugin_sdk ${P_LINK_LIBRARIES})
  target_compile_features(${target} PRIVATE cxx_std_20)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "oar_plugin_${P_NAME}"
    LIBRARY_OUTPUT_DIRECTORY ${P_OUTPUT_DIRECTORY}
    CXX_VISIBILITY_PRESET hidden
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    LINK_DEPENDS ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/oar_plugin.map)
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${CMAKE_CURRENT_FUNCTION_LIST_DIR}/oar_plugin.map"
    "LINKER:--no-undefined")
  if(NOT P_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION lib/oar/plugins)
  endif()
endfunction()
