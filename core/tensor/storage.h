// Storage: one allocation on one device, shared by every tensor viewing it.
#ifndef OAR_CORE_TENSOR_STORAGE_H_
#define OAR_CORE_TENSOR_STORAGE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor/device.h"
#include "core/tensor/dims.h"
#include "core/tensor/dtype.h"

namespace oar {

/// Frees `data` when the last tensor viewing it goes away; `context` identifies the owner (the caching
/// allocator, a DLPack producer...).
using StorageDeleter = void (*)(void* context, void* data, size_t nbytes);

class Storage;

/// A copy of some elements of a storage kept by its device in a private physical format (an Ascend-style
/// NC1HWC0 or FRACTAL_NZ layout): `view` names which elements (dtype, shape, strides, offset into the
/// owning storage), `storage` holds them in `format`. The owning storage stays the truth in the plain
/// layout; a shadow only saves converting the same elements again. See docs/design/formats.md.
struct FormatShadow {
  int32_t format = 0;
  DType dtype = DType::kFloat32;
  Dims shape, strides;
  int64_t offset = 0;
  std::shared_ptr<Storage> storage;
};

class Storage {
 public:
  Storage(Device device, void* data, size_t nbytes, StorageDeleter deleter, void* context)
      : device_(device), data_(data), nbytes_(nbytes), deleter_(deleter), context_(context) {}
  ~Storage() {
    shadows_.clear();
    if (deleter_ != nullptr) deleter_(context_, data_, nbytes_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  /// Device address of the allocation (not host-dereferenceable unless the device says so).
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  /// Who frees the bytes, and its context (the caching allocator's block, a DLPack producer, ...).
  StorageDeleter deleter() const { return deleter_; }
  void* context() const { return context_; }

  // ---- private-format shadows (thread-safe) ---------------------------------------------------------
  /// The shadow of exactly this view in `format`, or null.
  std::shared_ptr<Storage> FindShadow(int32_t format, DType dtype, const Dims& shape, const Dims& strides,
                                      int64_t offset) const;
  /// Remember `shadow` (replacing one of the same view and format); at most kMaxShadows are kept, the
  /// oldest goes first. Ignored once the storage is shared with code outside the core (see below).
  void AddShadow(FormatShadow shadow);
  /// Forget every shadow: the core calls this before anything writes to the storage (every kernel
  /// output), so the common case — no shadows — is one atomic load.
  void DropShadows() {
    if (has_shadows_.load(std::memory_order_acquire)) DropShadowsSlow();
  }
  /// The storage's bytes are now written by code the core does not see (a DLPack consumer): shadows are
  /// dropped and never kept again.
  void ShareOutsideCore();
  size_t num_shadows() const;

  static constexpr size_t kMaxShadows = 2;

 private:
  Device device_;
  void* data_;
  size_t nbytes_;
  StorageDeleter deleter_;
  void* context_;
  mutable std::mutex shadow_mutex_;
  std::vector<FormatShadow> shadows_;
  bool shared_outside_core_ = false;
  std::atomic<bool> has_shadows_{false};

  void DropShadowsSlow();
};

}  // namespace oar

#endif  // OAR_CORE_TENSOR_STORAGE_H_
