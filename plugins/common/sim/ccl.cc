#include "plugins/common/sim/ccl.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <type_traits>

#include "oar/plugin/cpp/dtype.hpp"
#include "oar/plugin/cpp/status.hpp"
#include "plugins/common/sim/simulator.h"

namespace oar::sim {
namespace {

using sdk::BFloat16;
using sdk::Guard;
using sdk::Half;

// ===================================================================================================
// Collective descriptions and the arithmetic
// ===================================================================================================

enum class CollectiveType { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };

const char* TypeName(CollectiveType t) {
  switch (t) {
    case CollectiveType::kAllReduce:
      return "all_reduce";
    case CollectiveType::kBroadcast:
      return "broadcast";
    case CollectiveType::kReduce:
      return "reduce";
    case CollectiveType::kAllGather:
      return "all_gather";
    case CollectiveType::kReduceScatter:
      return "reduce_scatter";
    case CollectiveType::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

struct CollectiveDesc {
  CollectiveType type;
  size_t count;  // per the ABI's meaning for this collective
  int32_t dtype;
  int32_t op;    // reduce op (reductions only)
  int32_t root;  // broadcast / reduce only

  bool operator==(const CollectiveDesc&) const = default;
  std::string ToString() const {
    return std::string(TypeName(type)) + "(count " + std::to_string(count) + ", " + std::string(sdk::DTypeName(dtype)) +
           ", op " + std::to_string(op) + ", root " + std::to_string(root) + ")";
  }
};

/// One rank's part of a collective: shadow addresses of its buffers.
struct Contribution {
  const char* send = nullptr;
  char* recv = nullptr;
  CollectiveDesc desc;
};

template <typename T>
using AccOf = std::conditional_t<std::is_integral_v<T>, int64_t, float>;

template <typename T>
AccOf<T> Load(const char* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  if constexpr (std::is_integral_v<T>) {
    return static_cast<int64_t>(v);
  } else {
    return static_cast<float>(v);
  }
}

template <typename T>
void Store(char* p, size_t i, AccOf<T> a) {
  const T v = T(a);  // int64 -> int32 narrows modulo 2^32; float -> half rounds to nearest even
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

template <typename Acc>
Acc Combine(Acc a, Acc b, int32_t op) {
  if constexpr (std::is_integral_v<Acc>) {
    const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);  // wrap, never overflow UB
    switch (op) {
      case OAR_REDUCE_PROD:
        return static_cast<Acc>(ua * ub);
      case OAR_REDUCE_MAX:
        return std::max(a, b);
      case OAR_REDUCE_MIN:
        return std::min(a, b);
      default:
        return static_cast<Acc>(ua + ub);  // SUM, AVG
    }
  } else {
    switch (op) {
      case OAR_REDUCE_PROD:
        return a * b;
      case OAR_REDUCE_MAX:
        return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
      case OAR_REDUCE_MIN:
        return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
      default:
        return a + b;
    }
  }
}

/// out[i] = op over r of srcs[r][offset + i], for i < count (out is a separate buffer).
template <typename T>
void ReduceElements(const std::vector<const char*>& srcs, size_t offset, size_t count, int32_t op, char* out) {
  const auto n = static_cast<int64_t>(srcs.size());
  for (size_t i = 0; i < count; ++i) {
    AccOf<T> acc = Load<T>(srcs[0], offset + i);
    for (size_t r = 1; r < srcs.size(); ++r) acc = Combine(acc, Load<T>(srcs[r], offset + i), op);
    if (op == OAR_REDUCE_AVG) acc = static_cast<AccOf<T>>(acc / static_cast<AccOf<T>>(n));
    Store<T>(out, i, acc);
  }
}

void Reduce(int32_t dtype, const std::vector<const char*>& srcs, size_t offset, size_t count, int32_t op, char* out) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT32:
      return ReduceElements<float>(srcs, offset, count, op, out);
    case OAR_DTYPE_FLOAT16:
      return ReduceElements<Half>(srcs, offset, count, op, out);
    case OAR_DTYPE_BFLOAT16:
      return ReduceElements<BFloat16>(srcs, offset, count, op, out);
    case OAR_DTYPE_INT32:
      return ReduceElements<int32_t>(srcs, offset, count, op, out);
    case OAR_DTYPE_INT64:
      return ReduceElements<int64_t>(srcs, offset, count, op, out);
    default:
      Throw(OAR_STATUS_UNIMPLEMENTED, "collectives do not support " + std::string(sdk::DTypeName(dtype)));
  }
}

/// Compute a collective for every rank at once. Every output is computed into a temporary first, so
/// in-place use (send == recv) and any aliasing between ranks are safe.
void Execute(const std::vector<Contribution>& parts) {
  const CollectiveDesc& d = parts[0].desc;
  const size_t n = parts.size();
  const size_t esize = sdk::DTypeSize(d.dtype);
  const size_t bytes = d.count * esize;
  std::vector<const char*> sends(n);
  for (size_t r = 0; r < n; ++r) sends[r] = parts[r].send;
  switch (d.type) {
    case CollectiveType::kAllReduce: {
      std::vector<char> result(bytes);
      Reduce(d.dtype, sends, 0, d.count, d.op, result.data());
      for (const Contribution& p : parts) std::memcpy(p.recv, result.data(), bytes);
      return;
    }
    case CollectiveType::kReduce: {
      std::vector<char> result(bytes);
      Reduce(d.dtype, sends, 0, d.count, d.op, result.data());
      std::memcpy(parts[static_cast<size_t>(d.root)].recv, result.data(), bytes);
      return;
    }
    case CollectiveType::kBroadcast: {
      const std::vector<char> data(parts[static_cast<size_t>(d.root)].send,
                                   parts[static_cast<size_t>(d.root)].send + bytes);
      for (const Contribution& p : parts) std::memcpy(p.recv, data.data(), bytes);
      return;
    }
    case CollectiveType::kAllGather: {
      std::vector<char> gathered(n * bytes);
      for (size_t r = 0; r < n; ++r) std::memcpy(gathered.data() + r * bytes, sends[r], bytes);
      for (const Contribution& p : parts) std::memcpy(p.recv, gathered.data(), gathered.size());
      return;
    }
    case CollectiveType::kReduceScatter: {
      std::vector<std::vector<char>> results(n, std::vector<char>(bytes));
      for (size_t r = 0; r < n; ++r) Reduce(d.dtype, sends, r * d.count, d.count, d.op, results[r].data());
      for (size_t r = 0; r < n; ++r) std::memcpy(parts[r].recv, results[r].data(), bytes);
      return;
    }
    case CollectiveType::kAllToAll: {
      std::vector<std::vector<char>> results(n, std::vector<char>(n * bytes));
      for (size_t r = 0; r < n; ++r) {
        for (size_t s = 0; s < n; ++s) std::memcpy(results[r].data() + s * bytes, sends[s] + r * bytes, bytes);
      }
      for (size_t r = 0; r < n; ++r) std::memcpy(parts[r].recv, results[r].data(), n * bytes);
      return;
    }
  }
}

// ===================================================================================================
// Communicators
// ===================================================================================================

struct Rendezvous {
  std::vector<std::optional<Contribution>> parts;
  int arrived = 0;
  bool done = false;
  std::optional<SimError> result;
};

/// State shared by the ranks of one communicator.
struct Group {
  explicit Group(int32_t n) : nranks(n), devices(static_cast<size_t>(n), -1) {}
  const int32_t nranks;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int32_t> devices;  // per rank; -1 until it joins
  int32_t joined = 0;
  std::map<uint64_t, std::shared_ptr<Rendezvous>> pending;                       // by collective sequence number
  std::map<uint64_t, std::map<Stream*, int32_t>> seq_streams;                    // streams used per sequence number
  std::map<std::pair<int32_t, int32_t>, std::deque<std::vector<char>>> mailbox;  // (src, dst) -> messages
  std::optional<SimError> broken;

  std::string MissingRanks() const {
    std::string s;
    for (int32_t r = 0; r < nranks; ++r) {
      if (devices[static_cast<size_t>(r)] < 0) s += (s.empty() ? "" : ", ") + std::to_string(r);
    }
    return s;
  }
};

struct ShmGroup;

/// One rank's handle.
struct Comm {
  std::shared_ptr<Group> group;
  int32_t rank;
  int32_t device;
  uint64_t next_seq = 0;  // used by the one host thread that drives this rank
  std::shared_ptr<ShmGroup> shm = nullptr;  // across processes (initialised with a store)
};

std::mutex g_mu;
std::map<std::string, std::weak_ptr<Group>> g_groups;  // by unique id bytes
std::set<Comm*> g_comms;

std::string IdKey(const oar_ccl_unique_id_t& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes), OAR_CCL_UNIQUE_ID_BYTES);
}

Comm* GetComm(oar_ccl_comm_t handle) {
  auto* comm = reinterpret_cast<Comm*>(handle);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_comms.count(comm) == 0) Throw(OAR_STATUS_INVALID_ARGUMENT, "unknown or destroyed communicator handle");
  return comm;
}

std::chrono::milliseconds Timeout() {
  return std::chrono::milliseconds(static_cast<int64_t>(Simulator::Get().options().ccl_timeout_ms));
}

std::string RankName(const Comm& c) {
  return "rank " + std::to_string(c.rank) + " of " + std::to_string(c.group->nranks) + " on " +
         Simulator::Get().spec().name + ":" + std::to_string(c.device);
}

/// Wait until every rank has joined, or undo this rank's join and fail.
void WaitForRanks(Comm* comm) {
  Group& g = *comm->group;
  std::unique_lock<std::mutex> lock(g.mu);
  if (g.cv.wait_for(lock, Timeout(), [&] { return g.joined == g.nranks; })) return;
  const std::string missing = g.MissingRanks();
  g.devices[static_cast<size_t>(comm->rank)] = -1;
  --g.joined;
  lock.unlock();
  {
    std::lock_guard<std::mutex> glock(g_mu);
    g_comms.erase(comm);
  }
  const std::string name = RankName(*comm);
  delete comm;
  Throw(OAR_STATUS_DEADLINE_EXCEEDED, "comm_init_rank: " + name + " timed out waiting for rank(s) " + missing +
                                          " (all ranks must call comm_init_rank in this process; timeout "
                                          "OAR_SIM_CCL_TIMEOUT_MS)");
}

// ===================================================================================================
// Across processes: a shared-memory segment per communicator
// ===================================================================================================
// A communicator initialised with a store may span processes. Rank 0 creates a POSIX shared-memory segment
// (named after the unique id) and sets its name in the store; the other ranks get it and map the segment.
// A collective runs in rounds, each moving a chunk of at most kShmSlotBytes per rank: every rank copies its
// part of the chunk (and, in the first round, its call's description) into its slot, meets the others at a
// barrier, then computes its own output from every rank's slot with the single-process arithmetic (Reduce:
// rank order, so the results are bitwise those of the in-process path). The slots alternate between two
// sets by round parity, so the next round's writes never touch what a slower rank may still be reading, and
// one barrier per round suffices. The barrier is a count and a generation word in the segment, waited on
// with a (shared, not process-private) futex in short slices; a rank that waits longer than the timeout
// marks the segment broken with a message naming itself and the ranks that never arrived, and every rank
// then fails with that message, so nothing hangs when a peer process dies.

constexpr size_t kShmSlotBytes = size_t{4} << 20;
constexpr uint64_t kShmMagic = 0x6f61722d63636c31;  // "oar-ccl1"
static_assert(std::atomic<uint32_t>::is_always_lock_free && sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct ShmRank {
  std::atomic<uint32_t> joined;
  std::atomic<uint64_t> rounds;  // barriers this rank has reached
  CollectiveDesc desc[2];        // of the collective whose first round it reached last, by round parity
};

struct ShmHeader {
  uint64_t magic;
  uint32_t nranks;
  uint64_t slot_bytes;
  std::atomic<uint32_t> joined;
  std::atomic<uint32_t> count;       // arrivals at the current barrier
  std::atomic<uint32_t> generation;  // barriers completed (the futex word)
  std::atomic<uint32_t> broken;      // 0 fine; 1 being written; 2 message complete
  char message[512];
};

size_t ShmRanksOffset() { return (sizeof(ShmHeader) + 63) / 64 * 64; }
size_t ShmDataOffset(int32_t n) {
  return (ShmRanksOffset() + sizeof(ShmRank) * static_cast<size_t>(n) + 4095) / 4096 * 4096;
}
// send/recv: one channel per ordered pair of ranks, a ring of kP2PSlots chunks (a send waits only when the
// ring is full: messages up to kP2PSlots * kP2PSlotBytes are eager, as the in-process mailbox is).
constexpr size_t kP2PSlots = 2, kP2PSlotBytes = size_t{1} << 20;
struct ShmChannel {
  std::atomic<uint32_t> head;  // chunks written
  std::atomic<uint32_t> tail;  // chunks read
  uint64_t message_bytes[kP2PSlots];
};
size_t ShmChannelsOffset(int32_t n) { return ShmDataOffset(n) + 2 * static_cast<size_t>(n) * kShmSlotBytes; }
size_t ShmChannelStride() { return 4096 + kP2PSlots * kP2PSlotBytes; }
size_t ShmBytes(int32_t n) {
  return ShmChannelsOffset(n) + static_cast<size_t>(n) * static_cast<size_t>(n) * ShmChannelStride();
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

/// One rank's mapping of the segment.
struct ShmGroup {
  ShmHeader* header = nullptr;
  size_t bytes = 0;
  int32_t nranks = 0, rank = 0;
  std::string name;
  std::mutex mu;        // one collective of this rank at a time
  std::mutex send_mu, recv_mu;  // one send, one recv of this rank at a time
  uint64_t rounds = 0;  // barriers this rank has passed

  ~ShmGroup() {
    if (header != nullptr) munmap(header, bytes);
  }
  ShmRank& Rank(int32_t r) { return reinterpret_cast<ShmRank*>(reinterpret_cast<char*>(header) + ShmRanksOffset())[r]; }
  char* Slot(uint64_t round, int32_t r) {
    return reinterpret_cast<char*>(header) + ShmDataOffset(nranks) +
           ((round % 2) * static_cast<size_t>(nranks) + static_cast<size_t>(r)) * kShmSlotBytes;
  }
  ShmChannel& Channel(int32_t src, int32_t dst) {
    return *reinterpret_cast<ShmChannel*>(reinterpret_cast<char*>(header) + ShmChannelsOffset(nranks) +
                                          static_cast<size_t>(src * nranks + dst) * ShmChannelStride());
  }
  char* ChannelSlot(int32_t src, int32_t dst, uint32_t chunk) {
    return reinterpret_cast<char*>(&Channel(src, dst)) + 4096 + (chunk % kP2PSlots) * kP2PSlotBytes;
  }
  SimError Broken() const {
    while (header->broken.load(std::memory_order_acquire) == 1) std::this_thread::yield();
    return SimError{OAR_STATUS_DEADLINE_EXCEEDED, std::string(header->message)};
  }
  /// Mark the segment broken with `message` (the first one wins) and wake every waiter.
  SimError Break(const std::string& message) {
    uint32_t fine = 0;
    if (header->broken.compare_exchange_strong(fine, 1)) {
      std::snprintf(header->message, sizeof(header->message), "%s", message.c_str());
      header->broken.store(2, std::memory_order_release);
      Futex(&header->generation, FUTEX_WAKE, INT_MAX, nullptr);
      Futex(&header->joined, FUTEX_WAKE, INT_MAX, nullptr);
    }
    return Broken();
  }
  /// Wait until `word` differs from `seen`, in slices, watching for a broken segment; false on timeout.
  bool WaitChange(std::atomic<uint32_t>& word, uint32_t seen, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (word.load(std::memory_order_acquire) == seen) {
      if (header->broken.load(std::memory_order_acquire) != 0) return true;
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::nanoseconds(0)) return false;
      const auto slice = std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(100));
      const timespec ts{static_cast<time_t>(slice.count() / 1000000000), static_cast<long>(slice.count() % 1000000000)};
      Futex(&word, FUTEX_WAIT, seen, &ts);
    }
    return true;
  }
  /// Meet every rank; `what` names the collective in a timeout.
  std::optional<SimError> Barrier(std::chrono::milliseconds timeout, const std::string& what) {
    if (header->broken.load(std::memory_order_acquire) != 0) return Broken();
    const uint64_t round = rounds++;
    Rank(rank).rounds.store(round + 1, std::memory_order_release);
    const uint32_t gen = header->generation.load(std::memory_order_acquire);
    if (header->count.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(nranks)) {
      header->count.store(0, std::memory_order_relaxed);
      header->generation.fetch_add(1, std::memory_order_release);
      Futex(&header->generation, FUTEX_WAKE, INT_MAX, nullptr);
      return std::nullopt;
    }
    if (!WaitChange(header->generation, gen, timeout)) {
      std::string missing;
      for (int32_t r = 0; r < nranks; ++r) {
        if (Rank(r).rounds.load() <= round) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return Break(what + ": rank " + std::to_string(rank) + " timed out after " + std::to_string(timeout.count()) +
                   " ms waiting for rank(s) " + missing +
                   " (in other processes: dead or hung?); the communicator is now broken");
    }
    if (header->generation.load(std::memory_order_acquire) == gen) return Broken();
    return std::nullopt;
  }
};

/// Rank 0: create and publish the segment. Others: find it through the store and map it. Then join.
std::shared_ptr<ShmGroup> OpenShmGroup(const oar_ccl_unique_id_t& id, int32_t nranks, int32_t rank,
                                       const oar_ccl_kv_store_t& store) {
  auto g = std::make_shared<ShmGroup>();
  g->nranks = nranks;
  g->rank = rank;
  g->bytes = ShmBytes(nranks);
  static const char* kHex = "0123456789abcdef";
  std::string tag;
  for (size_t i = 64; i < 96; ++i) {
    tag += kHex[id.bytes[i] >> 4];
    tag += kHex[id.bytes[i] & 15];
  }
  const std::string key = "oar-sim-ccl/" + tag + "/segment";
  const std::string who = Simulator::Get().spec().name + " comm_init_rank (rank " + std::to_string(rank) + " of " +
                          std::to_string(nranks) + ")";
  auto check = [&](oar_status_t* st, const std::string& what) {
    if (st == nullptr) return;
    const auto code = static_cast<oar_status_code>(sdk::Host()->status_code(st));
    const std::string message = sdk::Host()->status_message(st);
    sdk::Host()->status_destroy(st);
    Throw(code, who + ": " + what + ": " + message);
  };
  int fd = -1;
  if (rank == 0) {
    g->name = "/oar-sim-ccl-" + tag.substr(0, 48);
    fd = shm_open(g->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) Throw(OAR_STATUS_UNAVAILABLE, who + ": shm_open(" + g->name + "): " + std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(g->bytes)) != 0) {
      const int err = errno;
      close(fd);
      shm_unlink(g->name.c_str());
      Throw(OAR_STATUS_RESOURCE_EXHAUSTED, who + ": " + std::to_string(g->bytes) + " bytes of shared memory for " +
                                               g->name + ": " + std::strerror(err));
    }
  }
  std::string name;
  if (rank != 0) {
    char buf[256] = {};
    size_t size = 0;
    check(store.get(store.context, key.c_str(), buf, sizeof(buf) - 1, &size, Timeout().count()),
          "waiting for rank 0's shared-memory segment name under '" + key + "'");
    g->name.assign(buf, size);
    fd = shm_open(g->name.c_str(), O_RDWR, 0);
    if (fd < 0) {
      Throw(OAR_STATUS_UNAVAILABLE, who + ": shm_open(" + g->name + ") of rank 0's segment: " + std::strerror(errno) +
                                        " (the ranks must share one machine)");
    }
  }
  void* base = mmap(nullptr, g->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    if (rank == 0) shm_unlink(g->name.c_str());
    Throw(OAR_STATUS_RESOURCE_EXHAUSTED, who + ": mmap of " + g->name + ": " + std::strerror(map_errno));
  }
  g->header = static_cast<ShmHeader*>(base);
  if (rank == 0) {
    // A fresh segment is zero: atomics start at 0. Publish only once the header is complete.
    g->header->nranks = static_cast<uint32_t>(nranks);
    g->header->slot_bytes = kShmSlotBytes;
    // No fence: peers map the segment only after reading its name from the store, and that exchange
    // (socket or MPI system calls) orders these writes before their reads (a fence also breaks -fsanitize=thread).
    g->header->magic = kShmMagic;
    try {
      check(store.set(store.context, key.c_str(), g->name.data(), g->name.size()), "publishing the segment name");
    } catch (...) {
      shm_unlink(g->name.c_str());
      throw;
    }
  }
  if (g->header->magic != kShmMagic || g->header->nranks != static_cast<uint32_t>(nranks)) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, who + ": the segment " + g->name + " is for " +
                                           std::to_string(g->header->nranks) + " ranks (or not a communicator's)");
  }
  uint32_t free_slot = 0;
  if (!g->Rank(rank).joined.compare_exchange_strong(free_slot, 1)) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, who + ": rank " + std::to_string(rank) + " has already joined");
  }
  g->header->joined.fetch_add(1, std::memory_order_acq_rel);
  Futex(&g->header->joined, FUTEX_WAKE, INT_MAX, nullptr);
  return g;
}

/// Wait until every rank has mapped the segment (then rank 0 removes its name: the mappings stay).
void WaitForShmRanks(ShmGroup& g) {
  const auto deadline = std::chrono::steady_clock::now() + Timeout();
  uint32_t joined = 0;
  while ((joined = g.header->joined.load(std::memory_order_acquire)) < static_cast<uint32_t>(g.nranks)) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !g.WaitChange(g.header->joined, joined, left)) break;
    if (g.header->broken.load() != 0) break;
  }
  if (g.rank == 0) shm_unlink(g.name.c_str());
  if (g.header->joined.load() == static_cast<uint32_t>(g.nranks)) return;
  std::string missing;
  for (int32_t r = 0; r < g.nranks; ++r) {
    if (g.Rank(r).joined.load() == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  Throw(OAR_STATUS_DEADLINE_EXCEEDED, Simulator::Get().spec().name + " comm_init_rank: rank " + std::to_string(g.rank) +
                                          " of " + std::to_string(g.nranks) + " timed out waiting for rank(s) " +
                                          missing + " to join across processes (timeout OAR_SIM_CCL_TIMEOUT_MS)");
}

/// Send `bytes` at `data` to rank `dst` through its channel (on the sender's stream worker).
std::optional<SimError> ShmSend(ShmGroup& g, int32_t dst, const char* data, size_t bytes,
                                std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(g.send_mu);
  ShmChannel& c = g.Channel(g.rank, dst);
  const size_t chunks = std::max<size_t>(1, (bytes + kP2PSlotBytes - 1) / kP2PSlotBytes);
  for (size_t k = 0; k < chunks; ++k) {
    const uint32_t head = c.head.load(std::memory_order_relaxed);
    uint32_t tail = 0;
    while (head - (tail = c.tail.load(std::memory_order_acquire)) >= kP2PSlots) {
      if (g.header->broken.load(std::memory_order_acquire) != 0) return g.Broken();
      if (!g.WaitChange(c.tail, tail, timeout)) {
        return g.Break("send from rank " + std::to_string(g.rank) + " to rank " + std::to_string(dst) +
                       " timed out after " + std::to_string(timeout.count()) + " ms: rank " + std::to_string(dst) +
                       " is not receiving (in another process: dead or hung?); the communicator is now broken");
      }
    }
    const size_t off = k * kP2PSlotBytes, len = std::min(kP2PSlotBytes, bytes - std::min(bytes, off));
    if (len > 0) std::memcpy(g.ChannelSlot(g.rank, dst, head), data + off, len);
    c.message_bytes[head % kP2PSlots] = bytes;
    c.head.store(head + 1, std::memory_order_release);
    Futex(&c.head, FUTEX_WAKE, INT_MAX, nullptr);
  }
  return std::nullopt;
}

/// Receive `bytes` from rank `src` into `data` (on the receiver's stream worker).
std::optional<SimError> ShmRecv(ShmGroup& g, int32_t src, char* data, size_t bytes,
                                std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(g.recv_mu);
  ShmChannel& c = g.Channel(src, g.rank);
  const size_t chunks = std::max<size_t>(1, (bytes + kP2PSlotBytes - 1) / kP2PSlotBytes);
  for (size_t k = 0; k < chunks; ++k) {
    const uint32_t tail = c.tail.load(std::memory_order_relaxed);
    while (c.head.load(std::memory_order_acquire) == tail) {
      if (g.header->broken.load(std::memory_order_acquire) != 0) return g.Broken();
      if (!g.WaitChange(c.head, tail, timeout)) {
        return g.Break("recv on rank " + std::to_string(g.rank) + " timed out after " +
                       std::to_string(timeout.count()) + " ms waiting for a send from rank " + std::to_string(src) +
                       " (in another process: dead or hung?); the communicator is now broken");
      }
    }
    if (c.message_bytes[tail % kP2PSlots] != bytes) {
      return g.Break("recv on rank " + std::to_string(g.rank) + " expected " + std::to_string(bytes) +
                     " bytes from rank " + std::to_string(src) + ", the matching send had " +
                     std::to_string(c.message_bytes[tail % kP2PSlots]) + " (the communicator is now broken)");
    }
    const size_t off = k * kP2PSlotBytes, len = std::min(kP2PSlotBytes, bytes - std::min(bytes, off));
    if (len > 0) std::memcpy(data + off, g.ChannelSlot(src, g.rank, tail), len);
    c.tail.store(tail + 1, std::memory_order_release);
    Futex(&c.tail, FUTEX_WAKE, INT_MAX, nullptr);
  }
  return std::nullopt;
}

/// One rank's part of a collective through the segment (on the rank's stream worker).
std::optional<SimError> ShmArrive(ShmGroup& g, uint64_t seq, const Contribution& part,
                                  std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(g.mu);
  const CollectiveDesc& d = part.desc;
  const size_t n = static_cast<size_t>(g.nranks), rank = static_cast<size_t>(g.rank);
  const size_t esize = sdk::DTypeSize(d.dtype);
  const bool blocked = d.type == CollectiveType::kReduceScatter || d.type == CollectiveType::kAllToAll;
  const size_t chunk = kShmSlotBytes / esize / (blocked ? n : 1);  // elements per rank (per block) per round
  const std::string what = "collective " + d.ToString() + " #" + std::to_string(seq) + " across processes";
  size_t offset = 0;
  bool first = true;
  do {
    const size_t len = std::min(chunk, d.count - offset);
    char* mine = g.Slot(g.rounds, g.rank);
    if (first) g.Rank(g.rank).desc[g.rounds % 2] = d;
    const bool sends = d.type != CollectiveType::kBroadcast || rank == static_cast<size_t>(d.root);
    if (sends && len > 0) {
      if (blocked) {
        for (size_t b = 0; b < n; ++b) {
          std::memcpy(mine + b * len * esize, part.send + (b * d.count + offset) * esize, len * esize);
        }
      } else {
        std::memcpy(mine, part.send + offset * esize, len * esize);
      }
    }
    const uint64_t round = g.rounds;
    if (std::optional<SimError> e = g.Barrier(timeout, what)) return e;
    if (first) {
      const size_t p = round % 2;
      for (int32_t r = 1; r < g.nranks; ++r) {
        if (!(g.Rank(r).desc[p] == g.Rank(0).desc[p])) {
          return SimError{OAR_STATUS_INVALID_ARGUMENT,
                          "collective #" + std::to_string(seq) + " does not match across ranks: rank 0 called " +
                              g.Rank(0).desc[p].ToString() + ", rank " + std::to_string(r) + " called " +
                              g.Rank(r).desc[p].ToString()};
        }
      }
      first = false;
    }
    std::vector<const char*> slots(n);
    for (size_t r = 0; r < n; ++r) slots[r] = g.Slot(round, static_cast<int32_t>(r));
    try {
      switch (d.type) {
        case CollectiveType::kAllReduce:
          Reduce(d.dtype, slots, 0, len, d.op, part.recv + offset * esize);
          break;
        case CollectiveType::kReduce:
          if (rank == static_cast<size_t>(d.root)) Reduce(d.dtype, slots, 0, len, d.op, part.recv + offset * esize);
          break;
        case CollectiveType::kBroadcast:
          std::memcpy(part.recv + offset * esize, slots[static_cast<size_t>(d.root)], len * esize);
          break;
        case CollectiveType::kAllGather:
          for (size_t r = 0; r < n; ++r) std::memcpy(part.recv + (r * d.count + offset) * esize, slots[r], len * esize);
          break;
        case CollectiveType::kReduceScatter:
          Reduce(d.dtype, slots, rank * len, len, d.op, part.recv + offset * esize);
          break;
        case CollectiveType::kAllToAll:
          for (size_t r = 0; r < n; ++r) {
            std::memcpy(part.recv + (r * d.count + offset) * esize, slots[r] + rank * len * esize, len * esize);
          }
          break;
      }
    } catch (const sdk::StatusError& e) {
      return SimError{e.code(), e.what()};  // the same on every rank (the descriptions match)
    }
    offset += len;
  } while (offset < d.count);
  return std::nullopt;
}

// ---- rank-side execution on the worker -------------------------------------------------------------

std::optional<SimError> Arrive(const std::shared_ptr<Group>& group, int32_t rank, uint64_t seq,
                               const Contribution& part, std::chrono::milliseconds timeout) {
  Group& g = *group;
  std::unique_lock<std::mutex> lock(g.mu);
  if (g.broken) return g.broken;
  std::shared_ptr<Rendezvous>& slot = g.pending[seq];
  if (slot == nullptr) {
    slot = std::make_shared<Rendezvous>();
    slot->parts.resize(static_cast<size_t>(g.nranks));
  }
  std::shared_ptr<Rendezvous> rv = slot;
  rv->parts[static_cast<size_t>(rank)] = part;
  if (++rv->arrived == g.nranks) {
    std::vector<Contribution> parts;
    for (const auto& p : rv->parts) parts.push_back(*p);
    for (size_t r = 1; r < parts.size(); ++r) {
      if (!(parts[r].desc == parts[0].desc)) {
        rv->result = SimError{OAR_STATUS_INVALID_ARGUMENT,
                              "collective #" + std::to_string(seq) + " does not match across ranks: rank 0 called " +
                                  parts[0].desc.ToString() + ", rank " + std::to_string(r) + " called " +
                                  parts[r].desc.ToString()};
        break;
      }
    }
    if (!rv->result) {
      try {
        Execute(parts);
      } catch (const sdk::StatusError& e) {
        rv->result = SimError{e.code(), e.what()};
      }
    }
    rv->done = true;
    g.pending.erase(seq);
    g.seq_streams.erase(seq);
    g.cv.notify_all();
    return rv->result;
  }
  if (!g.cv.wait_for(lock, timeout, [&] { return rv->done || g.broken.has_value(); })) {
    std::string missing;
    for (int32_t r = 0; r < g.nranks; ++r) {
      if (!rv->parts[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    g.broken =
        SimError{OAR_STATUS_DEADLINE_EXCEEDED,
                 "collective " + part.desc.ToString() + " #" + std::to_string(seq) + ": rank " + std::to_string(rank) +
                     " timed out waiting for rank(s) " + missing + " (the communicator is now broken)"};
    g.cv.notify_all();
    return g.broken;
  }
  if (!rv->done) return g.broken;
  return rv->result;
}

std::optional<SimError> DeliverSend(const std::shared_ptr<Group>& group, int32_t src, int32_t dst, const char* data,
                                    size_t bytes) {
  Group& g = *group;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (g.broken) return g.broken;
    g.mailbox[{src, dst}].emplace_back(data, data + bytes);
  }
  g.cv.notify_all();
  return std::nullopt;
}

std::optional<SimError> TakeRecv(const std::shared_ptr<Group>& group, int32_t src, int32_t dst, char* data,
                                 size_t bytes, std::chrono::milliseconds timeout) {
  Group& g = *group;
  std::unique_lock<std::mutex> lock(g.mu);
  auto& queue = g.mailbox[{src, dst}];
  if (!g.cv.wait_for(lock, timeout, [&] { return !queue.empty() || g.broken.has_value(); })) {
    g.broken = SimError{OAR_STATUS_DEADLINE_EXCEEDED, "recv on rank " + std::to_string(dst) +
                                                          " timed out waiting for a send from rank " +
                                                          std::to_string(src) + " (the communicator is now broken)"};
    g.cv.notify_all();
    return g.broken;
  }
  if (queue.empty()) return g.broken;
  std::vector<char> message = std::move(queue.front());
  queue.pop_front();
  if (message.size() != bytes) {
    return SimError{OAR_STATUS_INVALID_ARGUMENT, "recv on rank " + std::to_string(dst) + " expected " +
                                                     std::to_string(bytes) + " bytes from rank " + std::to_string(src) +
                                                     ", the matching send had " + std::to_string(message.size())};
  }
  std::memcpy(data, message.data(), bytes);
  return std::nullopt;
}

// ---- host-side issue, grouping -----------------------------------------------------------------------

/// A call recorded between group_start and group_end (or issued at once outside a group).
struct PendingOp {
  Comm* comm;
  std::shared_ptr<Stream> stream;
  enum { kSend, kRecv, kCollective } kind;
  std::function<Work(uint64_t seq)> make;
};

thread_local int t_group_depth = 0;
thread_local std::vector<Comm*> t_inits;
thread_local std::vector<PendingOp> t_ops;

void Issue(std::vector<PendingOp> ops) {
  auto issue = [](PendingOp& op) {
    uint64_t seq = 0;
    if (op.kind == PendingOp::kCollective) {
      seq = op.comm->next_seq++;
      if (op.comm->shm != nullptr) {
        op.stream->Enqueue(op.make(seq));
        return;
      }
      Group& g = *op.comm->group;
      std::lock_guard<std::mutex> lock(g.mu);
      auto& streams = g.seq_streams[seq];
      if (auto it = streams.find(op.stream.get()); it != streams.end()) {
        Throw(OAR_STATUS_INVALID_ARGUMENT, "collective #" + std::to_string(seq) + ": ranks " +
                                               std::to_string(it->second) + " and " + std::to_string(op.comm->rank) +
                                               " use the same stream; each rank needs its own (it would deadlock)");
      }
      streams.emplace(op.stream.get(), op.comm->rank);
    }
    op.stream->Enqueue(op.make(seq));
  };
  for (PendingOp& op : ops) {
    if (op.kind == PendingOp::kSend) issue(op);  // sends are eager: issuing them first avoids deadlock
  }
  for (PendingOp& op : ops) {
    if (op.kind != PendingOp::kSend) issue(op);
  }
}

void Submit(PendingOp op) {
  if (t_group_depth > 0) {
    t_ops.push_back(std::move(op));
    return;
  }
  std::vector<PendingOp> ops;
  ops.push_back(std::move(op));
  Issue(std::move(ops));
}

size_t CheckDType(int32_t dtype) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT32:
    case OAR_DTYPE_FLOAT16:
    case OAR_DTYPE_BFLOAT16:
    case OAR_DTYPE_INT32:
    case OAR_DTYPE_INT64:
      return sdk::DTypeSize(dtype);
    default:
      Throw(OAR_STATUS_UNIMPLEMENTED, Simulator::Get().spec().name +
                                          " collectives support float32, float16, "
                                          "bfloat16, int32 and int64, not " +
                                          std::string(sdk::DTypeName(dtype)));
  }
}

void CheckReduceOp(int32_t op) {
  if (op < OAR_REDUCE_SUM || op > OAR_REDUCE_AVG) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, "unknown reduce op " + std::to_string(op));
  }
}

Cost CollectiveCost(const DeviceModel& model, double moved_bytes, uint64_t bytes) {
  Cost c;
  c.bytes = bytes;
  c.duration_ns = model.launch_overhead_ns + (model.peer_bandwidth > 0 ? moved_bytes / model.peer_bandwidth * 1e9 : 0);
  return c;
}

/// Validate and submit one collective of `comm` on `stream`.
void SubmitCollective(oar_ccl_comm_t handle, oar_stream_t stream_handle, CollectiveDesc desc, const void* send,
                      size_t send_bytes, void* recv, size_t recv_bytes, bool needs_send, bool needs_recv) {
  Comm* comm = GetComm(handle);
  CheckDType(desc.dtype);
  Simulator& sim = Simulator::Get();
  SimDevice& d = sim.device(comm->device);
  sim.BeginOperation(d, TypeName(desc.type));
  std::shared_ptr<Stream> stream = d.GetStream(stream_handle);
  const std::string where = d.where() + " " + TypeName(desc.type);
  Contribution part;
  part.desc = desc;
  if (needs_send) part.send = d.memory().Translate(send, send_bytes, where + " send buffer");
  if (needs_recv) part.recv = d.memory().Translate(recv, recv_bytes, where + " recv buffer");
  const double n = comm->group->nranks;
  double moved = static_cast<double>(std::max(send_bytes, recv_bytes));
  if (desc.type == CollectiveType::kAllReduce) moved *= 2 * (n - 1) / n;  // ring: reduce-scatter + all-gather
  if (desc.type == CollectiveType::kAllGather || desc.type == CollectiveType::kReduceScatter ||
      desc.type == CollectiveType::kAllToAll) {
    moved *= (n - 1) / n;
  }
  const Cost cost = CollectiveCost(d.model(), moved, std::max(send_bytes, recv_bytes));
  std::shared_ptr<Group> group = comm->group;
  std::shared_ptr<ShmGroup> shm = comm->shm;
  const int32_t rank = comm->rank;
  const std::chrono::milliseconds timeout = Timeout();
  Submit(PendingOp{comm, stream, PendingOp::kCollective, [=](uint64_t seq) {
                     Work w;
                     w.name = TypeName(desc.type);
                     w.kind = OAR_ACTIVITY_COLLECTIVE;
                     w.cost = cost;
                     if (shm != nullptr) {
                       w.run = [=] { return ShmArrive(*shm, seq, part, timeout); };
                     } else {
                       w.run = [=] { return Arrive(group, rank, seq, part, timeout); };
                     }
                     return w;
                   }});
}

// ===================================================================================================
// The ABI slots
// ===================================================================================================

oar_status_t* GetUniqueId(oar_ccl_unique_id_t* id) {
  return Guard([&] {
    if (id == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, "get_unique_id: id must not be NULL");
    static std::atomic<uint64_t> counter{0};
    std::memset(id->bytes, 0, sizeof(id->bytes));
    const std::string tag = "oar-sim-ccl:" + Simulator::Get().spec().name;
    std::memcpy(id->bytes, tag.data(), std::min(tag.size(), size_t{64}));
    const uint64_t words[4] = {static_cast<uint64_t>(getpid()), counter.fetch_add(1),
                               (static_cast<uint64_t>(std::random_device()()) << 32) | std::random_device()(),
                               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
    std::memcpy(id->bytes + 64, words, sizeof(words));
  });
}

oar_status_t* CommInitRank(int32_t device, int32_t nranks, const oar_ccl_unique_id_t* id, int32_t rank,
                           const oar_ccl_kv_store_t* store, oar_ccl_comm_t* out) {
  return Guard([&] {
    if (id == nullptr || out == nullptr) Throw(OAR_STATUS_INVALID_ARGUMENT, "comm_init_rank: NULL id or comm");
    *out = nullptr;
    Simulator& sim = Simulator::Get();
    SimDevice& d = sim.device(device);
    d.CheckAlive("comm_init_rank");
    if (nranks < 1 || nranks > 4096 || rank < 0 || rank >= nranks) {
      Throw(OAR_STATUS_INVALID_ARGUMENT,
            "comm_init_rank: rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " is out of range");
    }
    if (store != nullptr) {  // the ranks may be in several processes: through shared memory
      if (store->struct_size < OAR_CCL_KV_STORE_STRUCT_SIZE || store->set == nullptr || store->get == nullptr) {
        Throw(OAR_STATUS_INVALID_ARGUMENT, "comm_init_rank: the key/value store is incomplete");
      }
      auto group = std::make_shared<Group>(nranks);  // this rank's only: nranks, and nothing shared in-process
      group->devices[static_cast<size_t>(rank)] = device;
      group->joined = 1;
      auto comm = std::make_unique<Comm>(Comm{group, rank, device});
      comm->shm = OpenShmGroup(*id, nranks, rank, *store);
      Comm* raw = comm.get();
      if (t_group_depth > 0) {
        t_inits.push_back(raw);  // group_end waits for the other ranks
      } else {
        WaitForShmRanks(*raw->shm);
      }
      {
        std::lock_guard<std::mutex> lock(g_mu);
        g_comms.insert(comm.release());
      }
      *out = reinterpret_cast<oar_ccl_comm_t>(raw);
      return;
    }
    std::shared_ptr<Group> group;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      std::weak_ptr<Group>& slot = g_groups[IdKey(*id)];
      group = slot.lock();
      if (group == nullptr) {
        group = std::make_shared<Group>(nranks);
        slot = group;
      }
    }
    auto comm = std::make_unique<Comm>(Comm{group, rank, device});
    {
      std::lock_guard<std::mutex> lock(group->mu);
      if (group->nranks != nranks) {
        Throw(OAR_STATUS_INVALID_ARGUMENT, "comm_init_rank: rank " + std::to_string(rank) + " says " +
                                               std::to_string(nranks) + " ranks, the communicator has " +
                                               std::to_string(group->nranks));
      }
      if (group->devices[static_cast<size_t>(rank)] >= 0) {
        Throw(OAR_STATUS_INVALID_ARGUMENT, "comm_init_rank: rank " + std::to_string(rank) + " has already joined");
      }
      group->devices[static_cast<size_t>(rank)] = device;
      ++group->joined;
    }
    group->cv.notify_all();
    Comm* raw = comm.release();
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_comms.insert(raw);
    }
    if (t_group_depth > 0) {
      t_inits.push_back(raw);  // group_end waits for the other ranks
    } else {
      WaitForRanks(raw);
    }
    *out = reinterpret_cast<oar_ccl_comm_t>(raw);
  });
}

oar_status_t* CommDestroy(oar_ccl_comm_t handle) {
  return Guard([&] {
    Comm* comm = GetComm(handle);
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_comms.erase(comm);
    }
    {
      std::lock_guard<std::mutex> lock(comm->group->mu);
      comm->group->devices[static_cast<size_t>(comm->rank)] = -1;
      --comm->group->joined;
    }
    delete comm;  // queued work holds the group, not the handle
  });
}

oar_status_t* AllReduce(const void* send, void* recv, size_t count, int32_t dtype, int32_t op, oar_ccl_comm_t comm,
                        oar_stream_t stream) {
  return Guard([&] {
    CheckReduceOp(op);
    const size_t bytes = count * sdk::DTypeSize(dtype);
    SubmitCollective(comm, stream, {CollectiveType::kAllReduce, count, dtype, op, 0}, send, bytes, recv, bytes, true,
                     true);
  });
}

oar_status_t* Broadcast(const void* send, void* recv, size_t count, int32_t dtype, int32_t root, oar_ccl_comm_t comm,
                        oar_stream_t stream) {
  return Guard([&] {
    const Comm* c = GetComm(comm);
    if (root < 0 || root >= c->group->nranks) Throw(OAR_STATUS_INVALID_ARGUMENT, "broadcast: root out of range");
    const size_t bytes = count * sdk::DTypeSize(dtype);
    SubmitCollective(comm, stream, {CollectiveType::kBroadcast, count, dtype, 0, root}, send, bytes, recv, bytes,
                     c->rank == root, true);
  });
}

oar_status_t* ReduceSlot(const void* send, void* recv, size_t count, int32_t dtype, int32_t op, int32_t root,
                         oar_ccl_comm_t comm, oar_stream_t stream) {
  return Guard([&] {
    CheckReduceOp(op);
    const Comm* c = GetComm(comm);
    if (root < 0 || root >= c->group->nranks) Throw(OAR_STATUS_INVALID_ARGUMENT, "reduce: root out of range");
    const size_t bytes = count * sdk::DTypeSize(dtype);
    SubmitCollective(comm, stream, {CollectiveType::kReduce, count, dtype, op, root}, send, bytes, recv, bytes, true,
                     c->rank == root);
  });
}

oar_status_t* AllGather(const void* send, void* recv, size_t send_count, int32_t dtype, oar_ccl_comm_t comm,
                        oar_stream_t stream) {
  return Guard([&] {
    const Comm* c = GetComm(comm);
    const size_t bytes = send_count * sdk::DTypeSize(dtype);
    SubmitCollective(comm, stream, {CollectiveType::kAllGather, send_count, dtype, 0, 0}, send, bytes, recv,
                     bytes * static_cast<size_t>(c->group->nranks), true, true);
  });
}

oar_status_t* ReduceScatter(const void* send, void* recv, size_t recv_count, int32_t dtype, int32_t op,
                            oar_ccl_comm_t comm, oar_stream_t stream) {
  return Guard([&] {
    CheckReduceOp(op);
    const Comm* c = GetComm(comm);
    const size_t bytes = recv_count * sdk::DTypeSize(dtype);
    SubmitCollective(comm, stream, {CollectiveType::kReduceScatter, recv_count, dtype, op, 0}, send,
                     bytes * static_cast<size_t>(c->group->nranks), recv, bytes, true, true);
  });
}

oar_status_t* AllToAll(const void* send, void* recv, size_t count, int32_t dtype, oar_ccl_comm_t comm,
                       oar_stream_t stream) {
  return Guard([&] {
    const Comm* c = GetComm(comm);
    const size_t bytes = count * sdk::DTypeSize(dtype) * static_cast<size_t>(c->group->nranks);
    SubmitCollective(comm, stream, {CollectiveType::kAllToAll, count, dtype, 0, 0}, send, bytes, recv, bytes, true,
                     true);
  });
}

/// Validate a send or recv and submit it.
void SubmitP2P(bool is_send, void* buf, size_t count, int32_t dtype, int32_t peer, oar_ccl_comm_t handle,
               oar_stream_t stream_handle) {
  Comm* comm = GetComm(handle);
  const size_t bytes = count * CheckDType(dtype);
  const char* name = is_send ? "send" : "recv";
  if (peer < 0 || peer >= comm->group->nranks) {
    Throw(OAR_STATUS_INVALID_ARGUMENT, std::string(name) + ": peer " + std::to_string(peer) + " is out of range");
  }
  Simulator& sim = Simulator::Get();
  SimDevice& d = sim.device(comm->device);
  sim.BeginOperation(d, name);
  std::shared_ptr<Stream> stream = d.GetStream(stream_handle);
  char* data = d.memory().Translate(buf, bytes, d.where() + " " + name + " buffer");
  const Cost cost = CollectiveCost(d.model(), static_cast<double>(bytes), bytes);
  std::shared_ptr<Group> group = comm->group;
  std::shared_ptr<ShmGroup> shm = comm->shm;
  const int32_t rank = comm->rank;
  const std::chrono::milliseconds timeout = Timeout();
  Submit(PendingOp{comm, stream, is_send ? PendingOp::kSend : PendingOp::kRecv, [=](uint64_t) {
                     Work w;
                     w.name = name;
                     w.kind = OAR_ACTIVITY_COLLECTIVE;
                     w.cost = cost;
                     if (shm != nullptr && is_send) {
                       w.run = [=] { return ShmSend(*shm, peer, data, bytes, timeout); };
                     } else if (shm != nullptr) {
                       w.run = [=] { return ShmRecv(*shm, peer, data, bytes, timeout); };
                     } else if (is_send) {
                       w.run = [=] { return DeliverSend(group, rank, peer, data, bytes); };
                     } else {
                       w.run = [=] { return TakeRecv(group, peer, rank, data, bytes, timeout); };
                     }
                     return w;
                   }});
}

oar_status_t* Send(const void* buf, size_t count, int32_t dtype, int32_t peer, oar_ccl_comm_t comm,
                   oar_stream_t stream) {
  return Guard([&] { SubmitP2P(true, const_cast<void*>(buf), count, dtype, peer, comm, stream); });
}

oar_status_t* Recv(void* buf, size_t count, int32_t dtype, int32_t peer, oar_ccl_comm_t comm, oar_stream_t stream) {
  return Guard([&] { SubmitP2P(false, buf, count, dtype, peer, comm, stream); });
}

oar_status_t* GroupStart() {
  return Guard([&] { ++t_group_depth; });
}

oar_status_t* GroupEnd() {
  return Guard([&] {
    if (t_group_depth == 0) Throw(OAR_STATUS_INVALID_ARGUMENT, "group_end without group_start");
    if (--t_group_depth > 0) return;
    std::vector<Comm*> inits;
    inits.swap(t_inits);
    std::vector<PendingOp> ops;
    ops.swap(t_ops);
    std::optional<sdk::StatusError> first;
    for (Comm* comm : inits) {
      try {
        if (comm->shm != nullptr) {
          WaitForShmRanks(*comm->shm);
        } else {
          WaitForRanks(comm);
        }
      } catch (const sdk::StatusError& e) {
        if (!first) first = e;
      }
    }
    if (first) throw *first;
    Issue(std::move(ops));
  });
}

const oar_ccl_api_t kCclApi = [] {
  oar_ccl_api_t c{};
  c.struct_size = OAR_CCL_API_STRUCT_SIZE;
  c.get_unique_id = GetUniqueId;
  c.comm_init_rank = CommInitRank;
  c.comm_destroy = CommDestroy;
  c.all_reduce = AllReduce;
  c.broadcast = Broadcast;
  c.reduce = ReduceSlot;
  c.all_gather = AllGather;
  c.reduce_scatter = ReduceScatter;
  c.all_to_all = AllToAll;
  c.send = Send;
  c.recv = Recv;
  c.group_start = GroupStart;
  c.group_end = GroupEnd;
  return c;
}();

}  // namespace

const oar_ccl_api_t* CclApi() { return &kCclApi; }

}  // namespace oar::sim
