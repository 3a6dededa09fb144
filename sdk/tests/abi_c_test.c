/* Uses the ABI from C99: fills each crossing struct the way a C plugin would. */
#include <stdio.h>
#include <string.h>

#include "oar/plugin/plugin.h"

static oar_status_t* fake_kernel(const oar_kernel_call_t* call) {
  (void)call;
  return NULL;
}

int main(void) {
  oar_tensor_desc_t desc;
  oar_kernel_def_t def;
  oar_plugin_api_t api;
  int64_t shape[2] = {2, 3};
  int64_t strides[2] = {3, 1};
  int32_t dtypes[3] = {OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32, OAR_DTYPE_FLOAT32};
  memset(&desc, 0, sizeof desc);
  desc.struct_size = OAR_TENSOR_DESC_STRUCT_SIZE;
  desc.dtype = OAR_DTYPE_FLOAT32;
  desc.rank = 2;
  desc.shape = shape;
  desc.strides = strides;
  memset(&def, 0, sizeof def);
  def.struct_size = OAR_KERNEL_DEF_STRUCT_SIZE;
  def.op = "add";
  def.dtypes = dtypes;
  def.num_dtypes = 3;
  def.fn = fake_kernel;
  memset(&api, 0, sizeof api);
  api.struct_size = OAR_PLUGIN_API_STRUCT_SIZE;
  api.abi_major = OAR_PLUGIN_ABI_MAJOR;
  api.abi_minor = OAR_PLUGIN_ABI_MINOR;
  if (def.fn(NULL) != NULL || api.struct_size != sizeof(oar_plugin_api_t) || desc.rank != 2) {
    printf("unexpected ABI values\n");
    return 1;
  }
  printf("ABI %d.%d usable from C99\n", OAR_PLUGIN_ABI_MAJOR, OAR_PLUGIN_ABI_MINOR);
  return 0;
}
