#include "core/tensor/storage.h"

#include <algorithm>
#include <utility>

namespace oar {
namespace {

bool SameView(const FormatShadow& s, int32_t format, DType dtype, const Dims& shape, const Dims& strides,
              int64_t offset) {
  return s.format == format && s.dtype == dtype && s.offset == offset && s.shape == shape && s.strides == strides;
}

}  // namespace

std::shared_ptr<Storage> Storage::FindShadow(int32_t format, DType dtype, const Dims& shape, const Dims& strides,
                                             int64_t offset) const {
  std::lock_guard<std::mutex> lock(shadow_mutex_);
  for (const FormatShadow& s : shadows_) {
    if (SameView(s, format, dtype, shape, strides, offset)) return s.storage;
  }
  return nullptr;
}

void Storage::AddShadow(FormatShadow shadow) {
  std::vector<FormatShadow> dropped;  // freed outside the lock
  std::lock_guard<std::mutex> lock(shadow_mutex_);
  if (shared_outside_core_) return;
  auto same = std::find_if(shadows_.begin(), shadows_.end(), [&](const FormatShadow& s) {
    return SameView(s, shadow.format, shadow.dtype, shadow.shape, shadow.strides, shadow.offset);
  });
  if (same != shadows_.end()) {
    dropped.push_back(std::move(*same));
    shadows_.erase(same);
  }
  if (shadows_.size() >= kMaxShadows) {
    dropped.push_back(std::move(shadows_.front()));
    shadows_.erase(shadows_.begin());
  }
  shadows_.push_back(std::move(shadow));
  has_shadows_.store(true, std::memory_order_release);
}

void Storage::DropShadowsSlow() {
  std::vector<FormatShadow> dropped;
  std::lock_guard<std::mutex> lock(shadow_mutex_);
  dropped.swap(shadows_);
  has_shadows_.store(false, std::memory_order_release);
}

void Storage::ShareOutsideCore() {
  std::vector<FormatShadow> dropped;
  std::lock_guard<std::mutex> lock(shadow_mutex_);
  shared_outside_core_ = true;
  dropped.swap(shadows_);
  has_shadows_.store(false, std::memory_order_release);
}

size_t Storage::num_shadows() const {
  std::lock_guard<std::mutex> lock(shadow_mutex_);
  return shadows_.size();
}

}  // namespace oar
