# Test helpers shared by every folder.

# oar_test_compile_options(TARGET): a test program's own sources compile at -O1 in optimised builds. They hold
# assertions and set-up; the code under test is in the libraries, built as configured. Measured on two test
# sources: -O1 compiles 15-26 % faster than -O2 -g1 (CI time). Not -O0 (38-42 % faster to compile): tests
# that compute a reference in their own code ran 3-6x slower (Conv.MatchesReferenceForEveryCaseAndDType
# 2.2 s at -O1, 13.9 s at -O0). Line-level debug info stays (-g1 from the preset).
function(oar_test_compile_options target)
  if(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
    target_compile_options(${target} PRIVATE -O1)
  endif()
endfunction()

# oar_add_gtest(NAME SOURCES ... LIBS ... [PREFIX p] [NO_DISCOVER]): one GoogleTest program whose tests
# CTest lists one by one, as "p.Suite.Test" with a PREFIX (NO_DISCOVER: the caller adds the ctest
# entries, e.g. to run the whole program in several environments).
# A test that calls GTEST_SKIP() is reported by CTest as skipped, never as passed.
function(oar_add_gtest name)
  if(NOT OAR_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "NO_DISCOVER" "PREFIX" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  # Tests of the core and above use a main that drains the runtime's devices before returning
  # (core/runtime/gtest_main.cc); plugins and the SDK stay below the runtime and use GoogleTest's.
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  if(folder MATCHES "^(plugins|sdk)(/|$)")
    set(main GTest::gtest_main)
  else()
    set(main oar_gtest_main)
  endif()
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest ${main} oar_warnings)
  oar_test_compile_options(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(NOT T_NO_DISCOVER)  # NO_DISCOVER: the caller adds the program's ctest entries itself
    set(prefix)
    if(T_PREFIX)
      set(prefix TEST_PREFIX "${T_PREFIX}.")
    endif()
    # LABELS: the program's name, so that a subset of programs can be run (ctest -L; ci/sanitizers.sh).
    gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST ${prefix}
                         PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]" TIMEOUT 300 LABELS ${name})
  endif()
endfunction()
