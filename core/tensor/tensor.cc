#include "core/tensor/tensor.h"

#include <algorithm>
#include <limits>
#include <new>
#include <optional>
#include <utility>

#include "core/base/error.h"
#include "core/tensor/autograd_meta.h"
#include "core/tensor/trace.h"

namespace oar {
namespace {

const TensorImpl& Checked(const TensorImpl* impl) {
  OAR_CHECK(impl != nullptr, kFailedPrecondition, "the tensor is undefined (default-constructed)");
  return *impl;
}

// Resolve a single -1 in `shape` against `numel`; throws when impossible.
Dims InferShape(const Dims& requested, int64_t numel, const Dims& from) {
  Dims shape = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      OAR_CHECK_ARG(infer < 0, "view/reshape: shape {} has more than one -1", requested.ToString());
      infer = i;
    } else {
      OAR_CHECK_ARG(shape[i] >= 0, "view/reshape: shape {} has a negative extent", requested.ToString());
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    OAR_CHECK_ARG(known != 0 && numel % known == 0,
                  "view/reshape: cannot infer -1 in {} for a tensor of shape {} ({} elements)",
                  requested.ToString(), from.ToString(), numel);
    shape[infer] = numel / known;
  } else {
    OAR_CHECK_ARG(known == numel, "view/reshape: shape {} has {} elements but the tensor of shape {} has {}",
                  requested.ToString(), known, from.ToString(), numel);
  }
  return shape;
}

// Strides that let `shape` view the same elements as (old_shape, old_strides), or nullopt when the
// elements are not laid out evenly enough. Walk the old dims from the innermost, grouping runs of dims
// that are contiguous with each other ("chunks"); each chunk must be covered exactly by a run of new dims.
std::optional<Dims> ViewStrides(const Dims& old_shape, const Dims& old_strides, const Dims& shape) {
  Dims strides = Dims::Filled(shape.size(), 0);
  if (old_shape.Product() == 0 || old_shape.empty()) return ContiguousStrides(shape);
  int view_d = shape.size() - 1;
  int64_t chunk_base = old_strides.back();
  int64_t tensor_numel = 1;
  int64_t view_numel = 1;
  for (int d = old_shape.size() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    const bool chunk_ends =
        d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      strides[view_d] = view_numel * chunk_base;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

thread_local bool g_grad_mode = true;
thread_local TensorTracer* g_tracer = nullptr;
ViewRecorder g_view_recorder = nullptr;
ReverseFn g_reverse = nullptr;

// Views of a tensor that takes part in autograd are recorded (their VJPs live in core/ops); under capture
// every view is reported to the tracer.
Tensor RecordView(const Tensor& base, Tensor view, ViewOp op, std::span<const int64_t> args) {
  if (g_tracer != nullptr) g_tracer->OnView(base, view, op, args);
  if (g_view_recorder != nullptr && g_grad_mode && base.requires_grad()) g_view_recorder(base, view, op, args);
  return view;
}
Tensor RecordView(const Tensor& base, Tensor view, ViewOp op, std::initializer_list<int64_t> args = {}) {
  return RecordView(base, std::move(view), op, std::span<const int64_t>(args.begin(), args.size()));
}

}  // namespace

TensorTracer* ActiveTensorTracer() { return g_tracer; }
TensorTracer* SetActiveTensorTracer(TensorTracer* tracer) { return std::exchange(g_tracer, tracer); }

bool GradModeEnabled() { return g_grad_mode; }
void SetGradMode(bool enabled) { g_grad_mode = enabled; }
void SetViewRecorder(ViewRecorder recorder) { g_view_recorder = recorder; }
void SetReverseFn(ReverseFn fn) { g_reverse = fn; }

TensorImpl::TensorImpl(std::shared_ptr<Storage> storage, DType dtype, Dims shape, Dims strides, int64_t offset)
    : storage(std::move(storage)), dtype(dtype), shape(shape), strides(strides), offset(offset) {}
TensorImpl::~TensorImpl() = default;

namespace {
// A Storage and the TensorImpl of the first tensor viewing it, in one std::make_shared allocation. The
// TensorImpl is constructed in place by WithNewStorage and destroyed by TensorImpl::Destroy when the last
// Tensor handle goes; the allocation itself lives until the last reference to the Storage (that TensorImpl's
// and those of any views made since) goes.
struct StorageWithImpl {
  Storage storage;
  alignas(TensorImpl) unsigned char impl[sizeof(TensorImpl)];

  StorageWithImpl(Device device, void* data, size_t nbytes, StorageDeleter deleter, void* context)
      : storage(device, data, nbytes, deleter, context) {}
};

// A per-thread cache of the blocks WithNewStorage allocates (a StorageWithImpl with its shared_ptr
// control block: one size). Eager code frees the blocks of dropped results at the rate it allocates new
// ones, so the operator new + delete of every op output become a pop and a push. A block freed on a
// thread goes to that thread's cache; at most kMaxCachedBlocks per thread, returned to the heap when the
// thread exits.
constexpr size_t kCachedBlockBytes = (sizeof(StorageWithImpl) + 64 + 15) / 16 * 16;  // + the control block
constexpr int kMaxCachedBlocks = 64;

struct FreeBlock {
  FreeBlock* next;
};
// Trivially destructible, so usable until the thread's storage goes, after BlockReaper has run too.
struct BlockCache {
  FreeBlock* head = nullptr;
  int count = 0;
  bool reaper = false;  // BlockReaper registered for this thread
  bool closed = false;  // BlockReaper ran (the thread is exiting): the heap only
};
thread_local constinit BlockCache t_blocks;

struct BlockReaper {
  ~BlockReaper() {
    t_blocks.closed = true;
    while (FreeBlock* b = t_blocks.head) {
      t_blocks.head = b->next;
      ::operator delete(b);
    }
    t_blocks.count = 0;
  }
};
thread_local BlockReaper t_reaper;

void* PopBlock() {
  BlockCache& c = t_blocks;
  if (FreeBlock* b = c.head) {
    c.head = b->next;
    --c.count;
    return b;
  }
  return ::operator new(kCachedBlockBytes);
}

void PushBlock(void* p) {
  BlockCache& c = t_blocks;
  if (c.count >= kMaxCachedBlocks || c.closed) {
    ::operator delete(p);
    return;
  }
  if (!c.reaper) {
    c.reaper = true;
    [[maybe_unused]] BlockReaper& r = t_reaper;  // the first use registers its destructor for this thread
  }
  c.head = new (p) FreeBlock{c.head};
  ++c.count;
}

/// std::allocate_shared's allocator for StorageWithImpl: the one-block allocation from the cache.
template <typename T>
struct CachedBlockAllocator {
  using value_type = T;
  CachedBlockAllocator() = default;
  template <typename U>
  CachedBlockAllocator(const CachedBlockAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  static constexpr bool kCached =
      sizeof(T) <= kCachedBlockBytes && alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__ && sizeof(T) >= sizeof(FreeBlock);
  T* allocate(size_t n) {
    if (kCached && n == 1) return static_cast<T*>(PopBlock());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (kCached && n == 1) {
      PushBlock(p);
      return;
    }
    ::operator delete(p);
  }
  template <typename U>
  bool operator==(const CachedBlockAllocator<U>&) const {
    return true;
  }
};
}  // namespace

void TensorImpl::Destroy() {
  if (!co_allocated_) {
    delete this;
    return;
  }
  // The storage reference keeps the allocation holding *this: move it out, destroy *this, then drop it.
  std::shared_ptr<Storage> keep = std::move(storage);
  this->~TensorImpl();
}

Tensor Tensor::WithNewStorage(Device device, void* data, size_t nbytes, StorageDeleter deleter, void* context,
                              DType dtype, const Dims& shape, const Dims& strides) {
  OAR_CHECK_ARG(shape.size() == strides.size(), "Tensor: shape {} and strides {} differ in rank", shape.ToString(),
                strides.ToString());
  OAR_CHECK_ARG(DTypeSize(dtype) != 0, "Tensor: invalid dtype {}", static_cast<int>(dtype));
  auto both = std::allocate_shared<StorageWithImpl>(CachedBlockAllocator<StorageWithImpl>(), device, data, nbytes,
                                                   deleter, context);
  void* place = both->impl;
  Storage* raw = &both->storage;
  std::shared_ptr<Storage> storage(std::move(both), raw);  // the same ownership, aliased
  auto* impl = new (place) TensorImpl(std::move(storage), dtype, shape, strides, 0);
  impl->co_allocated_ = true;
  Tensor t;
  t.impl_ = impl;
  return t;
}

bool Tensor::requires_grad() const { return impl_ && impl_->autograd && impl_->autograd->requires_grad; }

Tensor& Tensor::set_requires_grad(bool value) {
  const TensorImpl& t = Checked(impl_);
  OAR_CHECK_ARG(!value || IsFloating(t.dtype), "set_requires_grad: only floating tensors can require grad, got {}",
                DTypeName(t.dtype));
  OAR_CHECK_ARG(is_leaf(), "set_requires_grad: only leaf tensors can change requires_grad; use detach() first");
  mutable_autograd_meta().requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = Checked(impl_);
  return t.autograd ? t.autograd->grad : Tensor();
}

void Tensor::zero_grad() {
  if (impl_ && impl_->autograd) impl_->autograd->grad = Tensor();
}

bool Tensor::is_leaf() const {
  const TensorImpl& t = Checked(impl_);
  return !t.autograd || t.autograd->grad_fn == nullptr;
}

Tensor Tensor::detach() const {
  const TensorImpl& t = Checked(impl_);
  Tensor detached(t.storage, t.dtype, t.shape, t.strides, t.offset);
  if (g_tracer != nullptr) g_tracer->OnAlias(*this, detached);
  return detached;
}

AutogradMeta* Tensor::autograd_meta() const { return impl_ ? impl_->autograd.get() : nullptr; }

AutogradMeta& Tensor::mutable_autograd_meta() {
  TensorImpl& t = const_cast<TensorImpl&>(Checked(impl_));
  if (!t.autograd) t.autograd = std::make_unique<AutogradMeta>();
  return *t.autograd;
}

Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Dims shape, Dims strides, int64_t offset)
    : impl_(nullptr) {
  OAR_CHECK_ARG(storage != nullptr, "Tensor: storage is null");
  OAR_CHECK_ARG(shape.size() == strides.size(), "Tensor: shape {} and strides {} differ in rank",
                shape.ToString(), strides.ToString());
  OAR_CHECK_ARG(DTypeSize(dtype) != 0, "Tensor: invalid dtype {}", static_cast<int>(dtype));
  impl_ = new TensorImpl(std::move(storage), dtype, shape, strides, offset);
}

void Tensor::ThrowUndefined() {
  Throw(ErrorCode::kFailedPrecondition, "the tensor is undefined (default-constructed)");
}

int64_t Tensor::dim(int64_t d) const { return shape()[NormalizeAxis(d, rank(), "dim")]; }

bool Tensor::is_contiguous() const {
  const TensorImpl& t = Checked(impl_);
  if (t.shape.Product() == 0) return true;  // no elements: any strides describe the same (empty) layout
  int64_t expected = 1;
  for (int i = t.shape.size() - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

Tensor Tensor::view(const Dims& requested) const {
  const TensorImpl& t = Checked(impl_);
  const Dims shape = InferShape(requested, numel(), t.shape);
  const std::optional<Dims> strides = ViewStrides(t.shape, t.strides, shape);
  OAR_CHECK_ARG(strides.has_value(),
                "view: a tensor of shape {} with strides {} cannot be viewed as {} without a copy; use "
                "reshape() or contiguous()",
                t.shape.ToString(), t.strides.ToString(), shape.ToString());
  return RecordView(*this, Tensor(t.storage, t.dtype, shape, *strides, t.offset), ViewOp::kView);
}

Tensor Tensor::permute(std::span<const int64_t> dims) const {
  const TensorImpl& t = Checked(impl_);
  const int rank = t.shape.size();
  OAR_CHECK_ARG(static_cast<int>(dims.size()) == rank, "permute: got {} dims for a tensor of rank {}",
                dims.size(), rank);
  Dims shape, strides;
  bool seen[Dims::kMaxRank] = {};
  for (int64_t d : dims) {
    const int a = NormalizeAxis(d, rank, "permute");
    OAR_CHECK_ARG(!seen[a], "permute: dimension {} appears twice", a);
    seen[a] = true;
    shape.push_back(t.shape[a]);
    strides.push_back(t.strides[a]);
  }
  Tensor view(t.storage, t.dtype, shape, strides, t.offset);
  if (g_tracer == nullptr && !(g_view_recorder != nullptr && g_grad_mode && requires_grad())) return view;
  Dims order;
  for (int64_t d : dims) order.push_back(NormalizeAxis(d, rank, "permute"));
  return RecordView(*this, std::move(view), ViewOp::kPermute, std::span<const int64_t>(order.data(), order.size()));
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  const int rank = this->rank();
  const int a = NormalizeAxis(dim0, rank, "transpose");
  const int b = NormalizeAxis(dim1, rank, "transpose");
  Dims order;
  for (int i = 0; i < rank; ++i) order.push_back(i);
  std::swap(order[a], order[b]);
  return permute(order);
}

Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  const TensorImpl& t = Checked(impl_);
  const int d = NormalizeAxis(dim, t.shape.size(), "slice");
  OAR_CHECK_ARG(step != 0, "slice: step must not be 0");
  const int64_t n = t.shape[d];
  if (step < 0) {
    // Python's rules for a negative step, then the same elements as an ascending view, reversed.
    OAR_CHECK_ARG(step != std::numeric_limits<int64_t>::min(), "slice: step {} is out of range", step);
    OAR_CHECK(g_reverse != nullptr, kUnimplemented, "slice: a negative step (here {}) needs core/ops", step);
    if (start < 0) start = start < -n ? -1 : start + n;
    if (end < 0) end = end < -n ? -1 : end + n;
    start = std::clamp<int64_t>(start, -1, n - 1);
    end = std::clamp<int64_t>(end, -1, n - 1);
    const int64_t count = start > end ? (start - end - 1) / -step + 1 : 0;
    const int64_t lowest = start + (count - 1) * step;
    return g_reverse(count == 0 ? slice(d, 0, 0) : slice(d, lowest, start + 1, -step), d);
  }
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Dims shape = t.shape, strides = t.strides;
  shape[d] = (end - start + step - 1) / step;
  strides[d] = t.strides[d] * step;
  return RecordView(*this, Tensor(t.storage, t.dtype, shape, strides, t.offset + start * t.strides[d]), ViewOp::kSlice,
                    {d, start, end, step});
}

Tensor Tensor::expand(const Dims& target) const {
  const TensorImpl& t = Checked(impl_);
  const int rank = target.size();
  OAR_CHECK_ARG(rank >= t.shape.size(), "expand: cannot expand shape {} to fewer dimensions {}",
                t.shape.ToString(), target.ToString());
  Dims shape = Dims::Filled(rank, 0), strides = Dims::Filled(rank, 0);
  const int lead = rank - t.shape.size();
  for (int i = 0; i < rank; ++i) {
    if (i < lead) {
      OAR_CHECK_ARG(target[i] >= 0, "expand: new leading dimension {} of {} must be >= 0", i,
                    target.ToString());
      shape[i] = target[i];
      continue;
    }
    const int64_t have = t.shape[i - lead];
    const int64_t want = target[i] == -1 ? have : target[i];
    if (have == want) {
      shape[i] = have;
      strides[i] = t.strides[i - lead];
    } else {
      OAR_CHECK_ARG(have == 1, "expand: dimension {} has extent {} and cannot become {} (shape {} -> {})", i,
                    have, want, t.shape.ToString(), target.ToString());
      shape[i] = want;
    }
  }
  return RecordView(*this, Tensor(t.storage, t.dtype, shape, strides, t.offset), ViewOp::kExpand);
}

Tensor Tensor::squeeze(int64_t dim) const {
  const TensorImpl& t = Checked(impl_);
  const int d = NormalizeAxis(dim, t.shape.size(), "squeeze");
  if (t.shape.size() == 0 || t.shape[d] != 1) return *this;
  Dims shape = t.shape, strides = t.strides;
  shape.erase(d);
  strides.erase(d);
  return RecordView(*this, Tensor(t.storage, t.dtype, shape, strides, t.offset), ViewOp::kSqueeze, {d});
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  const TensorImpl& t = Checked(impl_);
  const int rank = t.shape.size();
  OAR_CHECK(dim >= -(rank + 1) && dim <= rank, kOutOfRange,
            "unsqueeze: dim {} is out of range for a tensor of rank {} (expected {} <= dim <= {})", dim,
            rank, -(rank + 1), rank);
  const int d = static_cast<int>(dim < 0 ? dim + rank + 1 : dim);
  Dims shape = t.shape, strides = t.strides;
  const int64_t stride = d < rank ? t.strides[d] * t.shape[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return RecordView(*this, Tensor(t.storage, t.dtype, shape, strides, t.offset), ViewOp::kUnsqueeze, {d});
}

Dims BroadcastShapes(const Dims& a, const Dims& b, const char* op) {
  const int rank = std::max(a.size(), b.size());
  Dims out = Dims::Filled(rank, 1);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.size());
    const int ib = i - (rank - b.size());
    const int64_t x = ia >= 0 ? a[ia] : 1;
    const int64_t y = ib >= 0 ? b[ib] : 1;
    OAR_CHECK_ARG(x == y || x == 1 || y == 1,
                  "{}: shapes {} and {} are not broadcastable (dimension {} has extents {} and {})", op,
                  a.ToString(), b.ToString(), i, x, y);
    out[i] = x == 1 ? y : x;
  }
  return out;
}

}  // namespace oar
