// DLPack import (core/tensor/dlpack.cc) of a DLTensor described by the input. Accepted imports address
// only memory that fits the address space (checked here in 128-bit arithmetic) and release the producer
// exactly once; refusals leave ownership with the caller and say why.
//
// Input layout (little-endian; missing bytes read as 0): device_type u8, dtype code u8, dtype bits u8,
// lanes u8, ndim i8, has_strides u8, byte_offset u64, then ndim shape i64 and (has_strides & 1) ndim
// stride i64.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/base/error.h"
#include "core/tensor/dlpack.h"
#include "fuzz/fuzz_util.h"

namespace {

struct Reader {
  const uint8_t* data;
  size_t size;
  template <typename T>
  T Take() {
    T v{};
    const size_t n = std::min(sizeof(T), size);
    std::memcpy(&v, data, n);
    data += n;
    size -= n;
    return v;
  }
};

alignas(64) std::byte g_buffer[4096];
int g_deleted = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{data, size};
  DLManagedTensor m{};
  int64_t shape[16] = {}, strides[16] = {};
  m.dl_tensor.data = g_buffer;
  m.dl_tensor.device = {static_cast<DLDeviceType>(in.Take<uint8_t>() % 16), 0};
  m.dl_tensor.dtype = {in.Take<uint8_t>(), in.Take<uint8_t>(), static_cast<uint16_t>(in.Take<uint8_t>() % 3)};
  m.dl_tensor.ndim = in.Take<int8_t>() % 12;  // a few beyond the maximum rank, and negative ones
  const bool has_strides = (in.Take<uint8_t>() & 1) != 0;
  m.dl_tensor.byte_offset = in.Take<uint64_t>();
  const int rank = std::max(0, m.dl_tensor.ndim);
  for (int i = 0; i < rank && i < 16; ++i) shape[i] = in.Take<int64_t>();
  for (int i = 0; has_strides && i < rank && i < 16; ++i) strides[i] = in.Take<int64_t>();
  m.dl_tensor.shape = shape;
  m.dl_tensor.strides = has_strides ? strides : nullptr;
  m.deleter = [](DLManagedTensor*) { ++g_deleted; };
  g_deleted = 0;
  try {
    oar::Tensor t = oar::FromDLPack(&m);
    // Independent oracle: element count and the last byte addressed, in 128 bits.
    __int128 numel = 1, last = 0;
    for (int i = 0; i < rank; ++i) {
      if (shape[i] < 0) oar::fuzz::Fail("a negative extent was accepted");
      numel *= shape[i];
      if (numel > INT64_MAX) oar::fuzz::Fail("an element count beyond 2^63 was accepted");
    }
    if (numel > 0) {
      for (int i = 0; i < rank; ++i) {
        const __int128 stride = has_strides ? strides[i] : 1;
        last += (static_cast<__int128>(shape[i]) - 1) * stride;
        if (last > INT64_MAX) oar::fuzz::Fail("a view beyond 2^63 elements was accepted");
      }
      const __int128 end = static_cast<__int128>(reinterpret_cast<uintptr_t>(g_buffer)) +
                           static_cast<__int128>(m.dl_tensor.byte_offset) +
                           (last + 1) * static_cast<__int128>(t.element_size());
      if (end > INTPTR_MAX) oar::fuzz::Fail("a view beyond the address space was accepted");
    }
    if (t.numel() != static_cast<int64_t>(numel)) oar::fuzz::Fail("numel() disagrees with the shape");
    (void)t.data_ptr();
    (void)t.is_contiguous();
    if (g_deleted != 0) oar::fuzz::Fail("the producer was released while the tensor lives");
    t = oar::Tensor();
    if (g_deleted != 1) oar::fuzz::Fail("the producer was not released exactly once");
  } catch (const oar::Error& e) {
    if (g_deleted != 0) oar::fuzz::Fail("a refused import released the producer");
    oar::fuzz::CheckMessage(e.what(), 1024);
  }
  return 0;
}
