// Every Oar Level Zero kernel, as one OpenCL C program: compiled to SPIR-V at build time and embedded
// in the plugin (one module per device), and built from source by the pocl test.
#include "common.cl"
#include "elementwise.cl"
#include "cast.cl"
#include "reduce.cl"
#include "matmul.cl"
#include "indexing.cl"
