// oneDNN plumbing shared by the host kernels that use it (matmul, conv): the CPU engine, a stream per
// thread, and an LRU cache for primitives, whose creation costs far more than running a small one.
#ifndef OAR_PLUGINS_COMMON_DNNL_UTIL_H_
#define OAR_PLUGINS_COMMON_DNNL_UTIL_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace oar::host {

/// The process's oneDNN CPU engine. Like every static the host kernels use, it is never destroyed: an
/// asynchronous plugin's stream workers may still run kernels while the process exits (the ABI lets a
/// host skip `shutdown`), and a static destroyed under them crashes the exit.
inline dnnl::engine& DnnlEngine() {
  static dnnl::engine& engine = *new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

/// A stream per thread: creating one per call would show up on small problems.
inline dnnl::stream& DnnlStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

/// Bytes of `words`, for cache keys.
inline std::string KeyOf(const std::vector<int64_t>& words) {
  return std::string(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(int64_t));
}

/// A thread-safe LRU of immutable values (primitives and what goes with them) by byte-string key.
/// Values are made outside the lock: two threads may make the same value once each, which is cheaper
/// than serialising every lookup behind a creation.
template <typename V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  /// The value under `key`, made with `make()` (returning std::shared_ptr<V>) when absent.
  template <typename Make>
  std::shared_ptr<const V> FindOrMake(std::string key, Make&& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        order_.splice(order_.begin(), order_, it->second);
        return it->second->second;
      }
    }
    std::shared_ptr<const V> made = make();
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key) == 0) {
      order_.emplace_front(key, made);
      index_.emplace(std::move(key), order_.begin());
      if (order_.size() > capacity_) {
        index_.erase(order_.back().first);
        order_.pop_back();
      }
    }
    return made;
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<const V>>> order_;
  std::unordered_map<std::string, typename decltype(order_)::iterator> index_;
};

}  // namespace oar::host

#endif  // OAR_PLUGINS_COMMON_DNNL_UTIL_H_
