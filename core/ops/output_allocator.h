// How ops::Run allocates the output tensors it hands to kernels. The default is runtime::Empty; the
// conformance suite installs an allocator that surrounds every output with guard bytes, so a kernel
// that writes out of bounds is caught naming its op, dtype and shape.
#ifndef OAR_CORE_OPS_OUTPUT_ALLOCATOR_H_
#define OAR_CORE_OPS_OUTPUT_ALLOCATOR_H_

#include <functional>

#include "core/tensor/tensor.h"

namespace oar::ops {

/// Returns a contiguous tensor of `shape` and `dtype` on `device` (contents uninitialised).
using OutputAllocator = std::function<Tensor(const Dims& shape, DType dtype, Device device)>;

/// Installs `allocator` for the ops::Run calls of the current thread until destruction, then restores
/// the previous one. Nestable (strictly: the innermost is destroyed first); not shared between threads.
class ScopedOutputAllocator {
 public:
  explicit ScopedOutputAllocator(OutputAllocator allocator);
  ~ScopedOutputAllocator();
  ScopedOutputAllocator(const ScopedOutputAllocator&) = delete;
  ScopedOutputAllocator& operator=(const ScopedOutputAllocator&) = delete;

 private:
  OutputAllocator allocator_;
  const OutputAllocator* previous_;
};

/// An output through the current thread's allocator (runtime::Empty when none is installed).
Tensor AllocateOutput(const Dims& shape, DType dtype, Device device);

}  // namespace oar::ops

#endif  // OAR_CORE_OPS_OUTPUT_ALLOCATOR_H_
