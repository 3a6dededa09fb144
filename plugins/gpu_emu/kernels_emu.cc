// The shared GPU kernels (plugins/gpu_common/kernels.cu) compiled by the host compiler for the GPU
// emulator: the same source nvcc and hipcc compile, with emu_kernel.h as its kernel language.
#include "plugins/gpu_common/kernels.cu"  // NOLINT(bugprone-suspicious-include): one source, three compilers
