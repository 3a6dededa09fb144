// Tensor: a strided view (shape, strides, offset, dtype) of a Storage on one device.
//
// Metadata-only views (view, permute, transpose, slice, expand, squeeze, unsqueeze) are implemented here
// and never move data. Methods that run kernels (contiguous, reshape, to, clone, item, ToVector,
// ToString, arithmetic operators) are declared here for convenience and defined in core/ops, which every
// user of the core links (oar::core).
//
// Thread-safety: a Tensor is a shared handle; concurrent reads are safe, concurrent writes to the same
// elements are the caller's problem (as with any array library).
#ifndef OAR_CORE_TENSOR_TENSOR_H_
#define OAR_CORE_TENSOR_TENSOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/device.h"
#include "core/tensor/dims.h"
#include "core/tensor/dtype.h"
#include "core/tensor/storage.h"

namespace oar {

class TensorImpl;
struct AutogradMeta;

class Tensor {
 public:
  /// An undefined tensor (defined() == false).
  Tensor() noexcept : impl_(nullptr) {}
  /// A view of `storage`: elements at storage + (offset + sum(index_i * strides_i)) * element size.
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Dims shape, Dims strides, int64_t offset);
  /// A tensor (offset 0) viewing a new Storage(device, data, nbytes, deleter, context), the Storage and the
  /// tensor's metadata in one heap allocation (what every op's output is: runtime::Empty).
  static Tensor WithNewStorage(Device device, void* data, size_t nbytes, StorageDeleter deleter, void* context,
                               DType dtype, const Dims& shape, const Dims& strides);

  // A Tensor counts references to its TensorImpl itself (an intrusive count: no separate control block).
  Tensor(const Tensor& other) noexcept;
  Tensor(Tensor&& other) noexcept : impl_(other.impl_) { other.impl_ = nullptr; }
  Tensor& operator=(const Tensor& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  ~Tensor();

  // The accessors are inline (they are on every op's path); each throws kFailedPrecondition on an
  // undefined tensor.
  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  Device device() const;
  const Dims& shape() const;
  const Dims& strides() const;
  /// Offset of the first element in the storage, in elements.
  int64_t offset() const;
  int rank() const { return shape().size(); }
  /// Extent of dimension `d` (negative counts from the end).
  int64_t dim(int64_t d) const;
  int64_t numel() const { return shape().Product(); }
  size_t element_size() const { return DTypeSize(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  /// Row-major dense (size-1 dimensions may have any stride; a tensor without elements always is).
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const;
  /// Device address of the first element.
  void* data_ptr() const;

  // ---- metadata-only views ------------------------------------------------------------------------
  /// Same elements with a new shape (one entry may be -1). Throws when the strides cannot express it;
  /// reshape() copies instead.
  Tensor view(const Dims& shape) const;
  Tensor permute(std::span<const int64_t> dims) const;
  Tensor permute(std::initializer_list<int64_t> dims) const {
    return permute(std::span<const int64_t>(dims.begin(), dims.size()));
  }
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  /// Elements start, start+step, ... < end along `dim` (Python slice semantics for start/end). A
  /// negative step walks down: start, start+step, ... > end, with start and end clamped to [-1, n-1]
  /// after adding n to negative ones (so `slice(d, -1, INT64_MIN, -1)` reverses dimension d). Strides
  /// are never negative, so a negative step returns a copy (made by core/ops), not a view.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  /// Broadcast to `shape` (size-1 or new leading dims get stride 0; -1 keeps a dimension).
  Tensor expand(const Dims& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;

  // ---- defined in core/ops (they run kernels) -----------------------------------------------------
  Tensor contiguous() const;
  Tensor reshape(const Dims& shape) const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor clone() const;
  /// Copy `src` (broadcastable, same dtype) into this tensor's elements (which may be a view).
  Tensor& copy_(const Tensor& src);
  /// The single element as T (converted from the tensor's dtype); throws unless numel() == 1.
  template <typename T>
  T item() const;
  /// All elements in row-major order, converted to T.
  template <typename T>
  std::vector<T> ToVector() const;
  /// Multi-line human-readable dump (device, dtype, shape, values; long tensors are abbreviated).
  std::string ToString() const;

  // ---- autograd (state here; the engine is core/autograd) ----------------------------------------
  bool requires_grad() const;
  /// Mark a leaf as requiring grad (floating dtypes only). Returns *this.
  Tensor& set_requires_grad(bool value);
  /// The accumulated gradient of a leaf (undefined before the first backward).
  Tensor grad() const;
  /// Drop the accumulated gradient.
  void zero_grad();
  /// True for tensors not produced by a recorded op.
  bool is_leaf() const;
  /// The same storage and view, without autograd history (never requires grad).
  Tensor detach() const;
  /// Defined in core/autograd: reverse-mode gradients of this scalar (or with `gradient` for
  /// non-scalars) accumulated into every leaf's grad().
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;
  /// Internal: the autograd state (null when none was ever needed).
  AutogradMeta* autograd_meta() const;
  AutogradMeta& mutable_autograd_meta();

  /// Identity of the underlying implementation object (for tests and caches).
  const TensorImpl* impl() const { return impl_; }

 private:
  /// The implementation, or a thrown kFailedPrecondition when undefined.
  const TensorImpl& checked() const {
    if (impl_ == nullptr) [[unlikely]] ThrowUndefined();
    return *impl_;
  }
  [[noreturn]] static void ThrowUndefined();

  TensorImpl* impl_;  // null, or one reference counted in impl_->refs_ (every constructor sets it)
};

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, DType dtype, Dims shape, Dims strides, int64_t offset);
  ~TensorImpl();

  std::shared_ptr<Storage> storage;
  DType dtype;
  Dims shape;
  Dims strides;
  int64_t offset;
  std::unique_ptr<AutogradMeta> autograd;  // null unless the tensor takes part in autograd

 private:
  friend class Tensor;
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;
  void Retain() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) Destroy();
  }
  /// The last reference went: delete, or (co-allocated with its storage) destroy in place and drop the
  /// storage reference that keeps the shared allocation alive.
  void Destroy();

  std::atomic<int32_t> refs_{1};
  bool co_allocated_ = false;  // lives inside its storage's allocation (Tensor::WithNewStorage)
};

inline Tensor::Tensor(const Tensor& other) noexcept : impl_(other.impl_) {
  if (impl_ != nullptr) impl_->Retain();
}
// Both assignments take the new reference before dropping the old one, as std::shared_ptr does: the old
// TensorImpl may own `other` (a tensor assigned its own gradient).
inline Tensor& Tensor::operator=(const Tensor& other) noexcept {
  TensorImpl* old = impl_;
  impl_ = other.impl_;
  if (impl_ != nullptr) impl_->Retain();
  if (old != nullptr) old->Release();
  return *this;
}
inline Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this == &other) return *this;
  TensorImpl* old = impl_;
  impl_ = other.impl_;
  other.impl_ = nullptr;
  if (old != nullptr) old->Release();
  return *this;
}
inline Tensor::~Tensor() {
  if (impl_ != nullptr) impl_->Release();
}

inline DType Tensor::dtype() const { return checked().dtype; }
inline Device Tensor::device() const { return checked().storage->device(); }
inline const Dims& Tensor::shape() const { return checked().shape; }
inline const Dims& Tensor::strides() const { return checked().strides; }
inline int64_t Tensor::offset() const { return checked().offset; }
inline const std::shared_ptr<Storage>& Tensor::storage() const { return checked().storage; }
inline void* Tensor::data_ptr() const {
  const TensorImpl& t = checked();
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(DTypeSize(t.dtype));
}

/// Reverses `x` along `dim` into a new tensor (differentiably): what a negative-step slice needs on top
/// of a view. core/ops installs it; without it such a slice throws kUnimplemented.
using ReverseFn = Tensor (*)(const Tensor& x, int dim);
void SetReverseFn(ReverseFn fn);

/// Broadcast two shapes (NumPy rules); throws naming `op` and both shapes when incompatible.
Dims BroadcastShapes(const Dims& a, const Dims& b, const char* op);

}  // namespace oar

#endif  // OAR_CORE_TENSOR_TENSOR_H_
