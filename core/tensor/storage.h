// Storage: one allocation on one device, shared by every tensor viewing it.
#ifndef OAR_CORE_TENSOR_STORAGE_H_
#define OAR_CORE_TENSOR_STORAGE_H_

#include <cstddef>

#include "core/tensor/device.h"

namespace oar {

/// Frees `data` when the last tensor viewing it goes away; `context` identifies the owner (the caching
/// allocator, a DLPack producer...).
using StorageDeleter = void (*)(void* context, void* data, size_t nbytes);

class Storage {
 public:
  Storage(Device device, void* data, size_t nbytes, StorageDeleter deleter, void* context)
      : device_(device), data_(data), nbytes_(nbytes), deleter_(deleter), context_(context) {}
  ~Storage() {
    if (deleter_ != nullptr) deleter_(context_, data_, nbytes_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device device() const { return device_; }
  /// Device address of the allocation (not host-dereferenceable unless the device says so).
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

 private:
  Device device_;
  void* data_;
  size_t nbytes_;
  StorageDeleter deleter_;
  void* context_;
};

}  // namespace oar

#endif  // OAR_CORE_TENSOR_STORAGE_H_
