// Key/value stores that bootstrap a device type's CCL across processes (the ABI's oar_ccl_kv_store_t).
//
// A CCL communicator that spans processes needs its ranks to exchange a few small blobs once (the unique
// id, a shared-memory segment's name, NCCL's bootstrap handle): the plugin calls `set` and `get` on the
// store the host hands to comm_init_rank. Two implementations, one per launcher (LaunchInfo):
//   - under `mpirun`: ProcessGroup::NewStore(), over MPI point-to-point on a duplicated communicator,
//     rank 0 answering from a service thread (so a `get` completes while the other ranks are not in any
//     MPI call);
//   - under torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): TcpStore, rank 0 serving
//     on MASTER_PORT, every rank (rank 0 too) a client. It is small and hand-written on POSIX sockets:
//     libtorch's c10d::TCPStore is in Debian but the core must not link libtorch.
// Keys are set once (a second set of a key replaces its value); `Get` waits until the key exists. The
// stores are for bootstrap, not for data: values are small (at most kMaxValueBytes).
#ifndef OAR_CORE_DISTRIBUTED_STORE_H_
#define OAR_CORE_DISTRIBUTED_STORE_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "core/runtime/ccl.h"  // oar_ccl_kv_store_t

namespace oar::distributed {

struct LaunchInfo;

class Store {
 public:
  /// The longest key and value a store accepts (kInvalidArgument beyond).
  static constexpr size_t kMaxKeyBytes = 1024, kMaxValueBytes = 1 << 20;

  Store();
  virtual ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Make `key` hold `value` for every rank. Thread-safe.
  virtual void Set(std::string_view key, std::string_view value) = 0;
  /// The value of `key`, waiting until some rank sets it; kDeadlineExceeded after `timeout`, naming the key,
  /// this rank and where the store is. Thread-safe. After a timeout the store stays usable where it can
  /// cancel the wait (TcpStore: the server forgets it and the late answer, if any, is dropped); where it
  /// cannot (rank 0 gone or not answering the cancel), every later call fails at once.
  virtual std::string Get(std::string_view key, std::chrono::milliseconds timeout) = 0;

  /// This store as the ABI's callback table, valid while the store lives; errors become status objects
  /// (`get` into a too small buffer: RESOURCE_EXHAUSTED with *size the value's size).
  const oar_ccl_kv_store_t* ccl() const { return &ccl_; }

 private:
  oar_ccl_kv_store_t ccl_{};
};

/// The TCP store: rank 0 listens on `port` (every interface) and serves every rank; each rank connects to
/// `addr`:`port`, retrying until `timeout` (rank 0 may start last). The constructor returns once this rank
/// is connected. Rank 0's destructor keeps serving until each of the `world_size` ranks has connected and
/// disconnected (or `timeout` passes), so a rank may leave as soon as it has what it needs.
class TcpStore final : public Store {
 public:
  TcpStore(std::string addr, int port, int rank, int world_size, std::chrono::milliseconds timeout);
  ~TcpStore() override;

  /// From the launcher's MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (kInvalidArgument when one is
  /// missing, naming it).
  static std::unique_ptr<TcpStore> FromLaunch(const LaunchInfo& launch, std::chrono::milliseconds timeout);

  void Set(std::string_view key, std::string_view value) override;
  std::string Get(std::string_view key, std::chrono::milliseconds timeout) override;

 private:
  class Server;
  std::string Where() const;
  void Exchange(std::string_view request, std::string* reply, std::chrono::milliseconds timeout, std::string_view what,
                std::string_view key);
  // After a request for `key` timed out (`in`: what had arrived of its answer): ask the server to forget it
  // ('C') and read up to its confirmation ('c'), dropping a late answer; false when that fails too.
  bool Cancel(std::string_view key, std::string in);

  std::string addr_;
  int port_ = 0, rank_ = 0;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Server> server_;  // rank 0 only
  int fd_ = -1;
  bool broken_ = false;
  std::unique_ptr<std::mutex> mu_;  // one request at a time on the connection
};

/// The TCP store's server side without its sockets: the table of keys and the clients waiting for them,
/// fed the bytes each client sent (also the fuzz target's entry, fuzz/tcp_store_fuzzer.cc). Wire format: a
/// request is op (1 byte: 'S' set, 'G' get, 'C' cancel), the key's and the value's byte counts (4 bytes each,
/// little endian), the key, the value (empty for a get and a cancel); a set is answered 'k', a get 'v', the
/// value's byte count (4 bytes) and the value, once the key exists; a cancel 'c', after forgetting the
/// client's wait for the key (a client's answers come in the order the server sends them, so after 'c'
/// nothing of the cancelled get can follow).
class StoreTable {
 public:
  /// Sends `bytes` to `client`; false when the client is gone.
  using Send = std::function<bool(int client, std::string_view bytes)>;
  /// Handle every whole request at the front of `in` (what `client` sent so far), erasing them from it and
  /// answering through `send`; a partial request stays in `in`. False when `in` starts with something that
  /// is not a request (unknown op, empty or too long key or value: the server hangs up on such a client).
  bool Consume(int client, std::string& in, const Send& send);
  /// Forget `client`'s waits (it hung up).
  void Drop(int client);
  size_t keys() const { return kv_.size(); }
  size_t waiting() const { return waiters_.size(); }

 private:
  std::map<std::string, std::string, std::less<>> kv_;
  std::multimap<std::string, int, std::less<>> waiters_;  // key -> client waiting for it
};

/// A request in the TCP store's wire format (StoreTable).
std::string StoreRequest(char op, std::string_view key, std::string_view value);

/// A view of `base` whose keys carry `prefix` (several stores' keys in one table without clashing); it shares
/// `base`, which lives while some view or other holder does.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix);
  void Set(std::string_view key, std::string_view value) override;
  std::string Get(std::string_view key, std::chrono::milliseconds timeout) override;

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

/// The TCP store of this process's torchrun-style launch (TcpStore::FromLaunch, `timeout` on first use), one
/// per process while anything holds it: StoreForLaunch's views and the Gloo process group share one
/// connection (and, on rank 0, one server on MASTER_PORT). The Gloo world holds it for the process's life.
std::shared_ptr<Store> LaunchTcpStore(std::chrono::milliseconds timeout);

/// The store for this process's launcher: under `mpirun` the MPI store of ProcessGroup::World() (a
/// collective: every process must call it), under torchrun-style variables a view of LaunchTcpStore (keys
/// as given: the caller picks keys that do not clash with its other uses); kFailedPrecondition without a
/// launcher.
std::unique_ptr<Store> StoreForLaunch(std::chrono::milliseconds timeout);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_STORE_H_
