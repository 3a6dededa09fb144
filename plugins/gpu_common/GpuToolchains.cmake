# GPU toolchains for the cuda and hip plugins. Each option defaults to ON when its toolchain is found
# and to OFF otherwise; forcing one ON without the toolchain is a configure error that says what is
# missing.
#
#   OAR_WITH_CUDA           cuda plugin: nvcc + the CUDA toolkit (cudart, cuBLAS, NVRTC; NCCL when found)
#   OAR_CUDA_ARCHITECTURES  SASS targets for the shared kernels (default 80;90; "native" needs a GPU)
#   OAR_WITH_HIP            hip plugin: hipcc + HIP's CMake package (libamdhip64, hiprtc; RCCL and
#                           hipBLAS when found)
#   OAR_HIP_ARCHITECTURES   --offload-arch targets (default gfx90a; add gfx906 for Hygon DCU Z100-class
#                           or MI50, gfx942 with a newer clang)
#
# The kernels are compiled for HIP by hipcc in a custom command rather than with enable_language(HIP):
# CMake's HIP language fails on Debian's packaging (hip-lang's config lives under
# lib/x86_64-linux-gnu/cmake), while hipcc -x hip works everywhere hipcc does.
include_guard(GLOBAL)
include(CheckLanguage)

# The toolkit's standard location counts even when it is not on PATH (CUDA comes preinstalled there on
# our machines, not from apt); CUDACXX or CMAKE_CUDA_COMPILER still override it.
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
endif()
check_language(CUDA)
find_package(CUDAToolkit QUIET)
if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
  set(_oar_cuda_found ON)
else()
  set(_oar_cuda_found OFF)
endif()
option(OAR_WITH_CUDA "Build the cuda plugin (needs nvcc and the CUDA toolkit)" ${_oar_cuda_found})
set(OAR_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures of the shared GPU kernels")

find_program(OAR_HIPCC hipcc)
find_package(hip CONFIG QUIET)
if(OAR_HIPCC AND TARGET hip::amdhip64)
  set(_oar_hip_found ON)
else()
  set(_oar_hip_found OFF)
endif()
option(OAR_WITH_HIP "Build the hip plugin (needs hipcc and libamdhip64-dev)" ${_oar_hip_found})
set(OAR_HIP_ARCHITECTURES "gfx90a" CACHE STRING "AMD GPU targets (--offload-arch) of the shared GPU kernels")

if(OAR_WITH_CUDA)
  if(NOT _oar_cuda_found)
    message(FATAL_ERROR "OAR_WITH_CUDA is ON but nvcc or the CUDA toolkit was not found "
                        "(CMAKE_CUDA_COMPILER='${CMAKE_CUDA_COMPILER}', CUDAToolkit_FOUND='${CUDAToolkit_FOUND}')")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${OAR_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  message(STATUS "cuda plugin: CUDA ${CUDAToolkit_VERSION}, architectures ${OAR_CUDA_ARCHITECTURES}")
else()
  message(STATUS "cuda plugin: off (OAR_WITH_CUDA=OFF; nvcc/CUDA toolkit found: ${_oar_cuda_found})")
endif()
if(OAR_WITH_HIP)
  if(NOT _oar_hip_found)
    message(FATAL_ERROR "OAR_WITH_HIP is ON but hipcc ('${OAR_HIPCC}') or HIP's CMake package (hip::amdhip64) was "
                        "not found: install hipcc and libamdhip64-dev (ci/install-deps.sh --hip)")
  endif()
  message(STATUS "hip plugin: HIP ${hip_VERSION}, hipcc ${OAR_HIPCC}, architectures ${OAR_HIP_ARCHITECTURES}")
else()
  message(STATUS "hip plugin: off (OAR_WITH_HIP=OFF; hipcc/HIP found: ${_oar_hip_found})")
endif()

# What both plugins are made of (plugins/gpu_common).
set(OAR_GPU_COMMON_DIR ${CMAKE_CURRENT_LIST_DIR})
set(OAR_GPU_HOST_SOURCES
  ${OAR_GPU_COMMON_DIR}/blas.cc
  ${OAR_GPU_COMMON_DIR}/ccl.cc
  ${OAR_GPU_COMMON_DIR}/kernel_table.cc
  ${OAR_GPU_COMMON_DIR}/plugin.cc
  ${OAR_GPU_COMMON_DIR}/rtc.cc
  ${OAR_GPU_COMMON_DIR}/runtime.cc)
set(OAR_GPU_KERNEL_SOURCE ${OAR_GPU_COMMON_DIR}/kernels.cu)
set(OAR_GPU_KERNEL_HEADERS
  ${OAR_GPU_COMMON_DIR}/kernels.h
  ${OAR_GPU_COMMON_DIR}/vendor.h
  ${OAR_GPU_COMMON_DIR}/kernels/dispatch.cuh
  ${OAR_GPU_COMMON_DIR}/kernels/indexing.cuh
  ${OAR_GPU_COMMON_DIR}/kernels/numeric.cuh)

# oar_add_gpu_plugin_test(VENDOR <cuda|hip> API <vendor's device-count call>): the shared ABI-level test
# program, built for one vendor's plugin.
function(oar_add_gpu_plugin_test vendor api)
  set(name oar_${vendor}_plugin_test)
  oar_add_gtest(${name} SOURCES ${OAR_GPU_COMMON_DIR}/gpu_plugin_test.cc LIBS oar::plugin_sdk ${CMAKE_DL_LIBS}
                PREFIX ${vendor})
  if(TARGET ${name})
    add_dependencies(${name} oar_plugin_${vendor})
    target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
    target_compile_definitions(${name} PRIVATE OAR_GPU_PLUGIN_PATH="$<TARGET_FILE:oar_plugin_${vendor}>"
                               OAR_GPU_PLUGIN_NAME="${vendor}" OAR_GPU_COUNT_API="${api}"
                               OAR_VERSION_STRING="${PROJECT_VERSION}")
  endif()
endfunction()
