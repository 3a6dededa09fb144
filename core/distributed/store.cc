#include "core/distributed/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "core/base/error.h"
#include "core/distributed/process_group.h"
#include "core/runtime/status.h"

namespace oar::distributed {
namespace {

using Clock = std::chrono::steady_clock;

// ---- the ABI view --------------------------------------------------------------------------------------

oar_status_t* CclSet(void* context, const char* key, const void* value, size_t size) {
  try {
    OAR_CHECK_ARG(key != nullptr && (value != nullptr || size == 0), "store set: NULL key or value");
    static_cast<Store*>(context)->Set(key, std::string_view(static_cast<const char*>(value), size));
    return nullptr;
  } catch (const Error& e) {
    return runtime::MakeStatus(e.code(), e.what());
  } catch (const std::exception& e) {
    return runtime::MakeStatus(ErrorCode::kInternal, e.what());
  }
}

oar_status_t* CclGet(void* context, const char* key, void* value, size_t capacity, size_t* size, int64_t timeout_ms) {
  try {
    OAR_CHECK_ARG(key != nullptr && size != nullptr && (value != nullptr || capacity == 0),
                  "store get: NULL key, value or size");
    const std::string v =
        static_cast<Store*>(context)->Get(key, std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0)));
    *size = v.size();
    OAR_CHECK(v.size() <= capacity, kResourceExhausted, "store get '{}': the value has {} bytes, the buffer {}", key,
              v.size(), capacity);
    if (!v.empty()) std::memcpy(value, v.data(), v.size());
    return nullptr;
  } catch (const Error& e) {
    return runtime::MakeStatus(e.code(), e.what());
  } catch (const std::exception& e) {
    return runtime::MakeStatus(ErrorCode::kInternal, e.what());
  }
}

// ---- the TCP store's wire format (store.h: StoreTable) ----------------------------------------------------

constexpr size_t kHeaderBytes = 9;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string ValueReply(const std::string& value) {
  std::string r(1, 'v');
  PutU32(r, static_cast<uint32_t>(value.size()));
  r.append(value);
  return r;
}

void CheckSizes(std::string_view key, std::string_view value) {
  OAR_CHECK_ARG(!key.empty() && key.size() <= Store::kMaxKeyBytes && value.size() <= Store::kMaxValueBytes,
                "store: key '{}' ({} bytes) or its value ({} bytes) is empty or too long (at most {} and {} bytes)",
                key.substr(0, 64), key.size(), value.size(), Store::kMaxKeyBytes, Store::kMaxValueBytes);
}

// Write all of `data` (the peer reads as it comes: no timeout needed for these small messages).
bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace

std::string StoreRequest(char op, std::string_view key, std::string_view value) {
  std::string r(1, op);
  PutU32(r, static_cast<uint32_t>(key.size()));
  PutU32(r, static_cast<uint32_t>(value.size()));
  r.append(key);
  r.append(value);
  return r;
}

bool StoreTable::Consume(int client, std::string& in, const Send& send) {
  bool ok = true;
  size_t at = 0;
  while (in.size() - at >= kHeaderBytes) {
    const char* h = in.data() + at;
    const uint32_t klen = GetU32(h + 1), vlen = GetU32(h + 5);
    if ((h[0] != 'S' && h[0] != 'G' && h[0] != 'C') || klen == 0 || klen > Store::kMaxKeyBytes ||
        vlen > Store::kMaxValueBytes || (h[0] != 'S' && vlen != 0)) {
      ok = false;  // not one of ours
      break;
    }
    if (in.size() - at < kHeaderBytes + klen + vlen) break;
    std::string key = in.substr(at + kHeaderBytes, klen);
    if (h[0] == 'S') {
      std::string value = in.substr(at + kHeaderBytes + klen, vlen);
      ok = send(client, "k");
      auto [lo, hi] = waiters_.equal_range(key);
      for (auto it = lo; it != hi; ++it) send(it->second, ValueReply(value));
      waiters_.erase(lo, hi);
      kv_[std::move(key)] = std::move(value);
    } else if (h[0] == 'C') {  // cancel: forget this client's wait for the key; 'c' follows any answer sent
      auto [lo, hi] = waiters_.equal_range(key);
      for (auto it = lo; it != hi;) it = it->second == client ? waiters_.erase(it) : ++it;
      ok = send(client, "c");
    } else if (auto it = kv_.find(key); it != kv_.end()) {
      ok = send(client, ValueReply(it->second));
    } else {
      waiters_.emplace(std::move(key), client);
    }
    at += kHeaderBytes + klen + vlen;
    if (!ok) break;
  }
  in.erase(0, at);
  return ok;
}

void StoreTable::Drop(int client) {
  for (auto it = waiters_.begin(); it != waiters_.end();) it = it->second == client ? waiters_.erase(it) : ++it;
}

Store::Store() {
  ccl_.struct_size = OAR_CCL_KV_STORE_STRUCT_SIZE;
  ccl_.context = this;
  ccl_.set = CclSet;
  ccl_.get = CclGet;
}
Store::~Store() = default;

// ===================================================================================================
// TcpStore::Server: one thread polling the listening socket and every client
// ===================================================================================================

class TcpStore::Server {
 public:
  Server(int port, int world_size, std::chrono::milliseconds timeout) : world_size_(world_size), timeout_(timeout) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    OAR_CHECK(listen_fd_ >= 0, kUnavailable, "TCP store: rank 0 cannot create a socket: {}", std::strerror(errno));
    const int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listen_fd_, 128) != 0) {
      const int err = errno;
      ::close(listen_fd_);
      Throw(ErrorCode::kUnavailable, "TCP store: rank 0 cannot listen on port {} (MASTER_PORT): {}", port,
            std::strerror(err));
    }
    OAR_CHECK(::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) == 0, kUnavailable, "TCP store: pipe: {}", std::strerror(errno));
    thread_ = std::thread([this] { Loop(); });
  }

  ~Server() {
    // Serve until every rank has come and gone (a peer may still be reading what it needs), at most timeout_.
    const auto deadline = Clock::now() + timeout_;
    while (finished_.load() < world_size_ && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    stop_.store(true);
    const char c = 0;
    [[maybe_unused]] const ssize_t n = ::write(wake_[1], &c, 1);
    thread_.join();
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

 private:
  struct Client {
    int fd;
    std::string in;
  };

  void Loop() {
    std::vector<Client> clients;
    StoreTable table;
    const StoreTable::Send send = [](int fd, std::string_view bytes) { return SendAll(fd, bytes); };
    auto drop = [&](size_t i) {
      table.Drop(clients[i].fd);
      ::close(clients[i].fd);
      clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
      finished_.fetch_add(1);
    };
    while (!stop_.load()) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      for (const Client& c : clients) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
      if (fds[0].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          clients.push_back({fd, {}});
        }
      }
      // Only the clients polled above (one accepted just now has no pollfd yet); a drop erases at i, so the
      // lower indices stay valid.
      for (size_t i = fds.size() - 2; i-- > 0;) {
        const pollfd& p = fds[2 + i];
        if (p.fd != clients[i].fd || !(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char buf[65536];
        const ssize_t n = ::recv(p.fd, buf, sizeof(buf), 0);
        if (n <= 0) {
          drop(i);
          continue;
        }
        std::string& in = clients[i].in;
        in.append(buf, static_cast<size_t>(n));
        if (!table.Consume(p.fd, in, send)) drop(i);
      }
    }
    for (const Client& c : clients) ::close(c.fd);
  }

  const int world_size_;
  const std::chrono::milliseconds timeout_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> finished_{0};  // connections closed by their rank
  std::thread thread_;
};

// ===================================================================================================
// TcpStore
// ===================================================================================================

TcpStore::TcpStore(std::string addr, int port, int rank, int world_size, std::chrono::milliseconds timeout)
    : addr_(std::move(addr)), port_(port), rank_(rank), timeout_(timeout), mu_(std::make_unique<std::mutex>()) {
  OAR_CHECK_ARG(port > 0 && port < 65536 && world_size >= 1 && rank >= 0 && rank < world_size && !addr_.empty(),
                "TCP store: bad address {}:{} or rank {} of {}", addr_, port, rank, world_size);
  if (rank == 0) server_ = std::make_unique<Server>(port, world_size, timeout);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int gai = ::getaddrinfo(addr_.c_str(), service.c_str(), &hints, &found);
  OAR_CHECK(gai == 0 && found != nullptr, kInvalidArgument, "TCP store (rank {}): cannot resolve MASTER_ADDR '{}': {}",
            rank, addr_, ::gai_strerror(gai));
  const sockaddr_in target = *reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  // Rank 0 may not listen yet: retry until the timeout.
  const auto deadline = Clock::now() + timeout;
  std::string last_error;
  while (true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    OAR_CHECK(fd_ >= 0, kUnavailable, "TCP store (rank {}): socket: {}", rank, std::strerror(errno));
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&target), sizeof(target)) == 0) break;
    last_error = std::strerror(errno);
    ::close(fd_);
    fd_ = -1;
    OAR_CHECK(Clock::now() < deadline, kDeadlineExceeded,
              "TCP store: rank {} could not connect to rank 0 at {} within {} ms ({}); is rank 0 running, and are "
              "MASTER_ADDR and MASTER_PORT the same for every rank?",
              rank, Where(), timeout.count(), last_error);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();  // rank 0: serves the others until they have gone
}

std::unique_ptr<TcpStore> TcpStore::FromLaunch(const LaunchInfo& l, std::chrono::milliseconds timeout) {
  OAR_CHECK_ARG(!l.master_addr.empty() && l.master_port > 0,
                "TCP store: MASTER_ADDR and MASTER_PORT must be set (rank 0's address and a free port), got '{}' "
                "and {}",
                l.master_addr, l.master_port);
  return std::make_unique<TcpStore>(l.master_addr, l.master_port, l.rank, l.world_size, timeout);
}

std::string TcpStore::Where() const { return addr_ + ":" + std::to_string(port_); }

namespace {

enum class Read { kOk, kTimedOut, kClosed };

// Read from `fd` until `in` holds `bytes` bytes (never more), or the deadline passes, or the peer closes.
Read ReadUntil(int fd, std::string& in, size_t bytes, Clock::time_point deadline) {
  while (in.size() < bytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Read::kTimedOut;
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, std::min(sizeof(buf), bytes - in.size()), 0);
    if (n <= 0) return Read::kClosed;
    in.append(buf, static_cast<size_t>(n));
  }
  return Read::kOk;
}

}  // namespace

void TcpStore::Exchange(std::string_view request, std::string* reply, std::chrono::milliseconds timeout,
                        std::string_view what, std::string_view key) {
  std::lock_guard<std::mutex> lock(*mu_);
  OAR_CHECK(!broken_, kFailedPrecondition,
            "TCP store at {} (rank {}): {} '{}': an earlier request timed out and could not be cancelled", Where(),
            rank_, what, key);
  broken_ = true;  // until the whole answer is in
  OAR_CHECK(SendAll(fd_, request), kUnavailable, "TCP store at {} (rank {}): {} '{}': rank 0 closed the connection",
            Where(), rank_, what, key);
  const auto deadline = Clock::now() + timeout;
  std::string in;
  auto need = [&](size_t bytes) {
    const Read r = ReadUntil(fd_, in, bytes, deadline);
    if (r == Read::kTimedOut) {
      // The connection stays usable when the server confirms the cancel (the late answer, if any, before it).
      broken_ = !Cancel(key, std::move(in));
      Throw(ErrorCode::kDeadlineExceeded,
            "TCP store at {} (rank {}): {} '{}' got no answer within {} ms (no rank set the key: is a peer "
            "missing or late?)",
            Where(), rank_, what, key, timeout.count());
    }
    OAR_CHECK(r == Read::kOk, kUnavailable, "TCP store at {} (rank {}): {} '{}': rank 0 closed the connection", Where(),
              rank_, what, key);
  };
  need(1);
  if (in[0] == 'v') {
    need(5);
    need(5 + GetU32(in.data() + 1));
    *reply = in.substr(5);
  } else {
    OAR_CHECK(in[0] == 'k', kInternal, "TCP store at {} (rank {}): {} '{}': unexpected answer", Where(), rank_, what,
              key);
  }
  broken_ = false;
}

bool TcpStore::Cancel(std::string_view key, std::string in) {
  if (!SendAll(fd_, StoreRequest('C', key, {}))) return false;
  const auto deadline = Clock::now() + timeout_;
  while (true) {  // `in`: what had come of the timed-out answer
    if (ReadUntil(fd_, in, 1, deadline) != Read::kOk) return false;
    if (in[0] == 'c') return true;  // read exactly up to it: nothing follows
    if (in[0] == 'k') {             // a set's late answer
      in.erase(0, 1);
      continue;
    }
    if (in[0] != 'v' || ReadUntil(fd_, in, 5, deadline) != Read::kOk) return false;
    const size_t whole = 5 + GetU32(in.data() + 1);
    if (ReadUntil(fd_, in, whole, deadline) != Read::kOk) return false;
    in.erase(0, whole);  // the late value, dropped
  }
}

void TcpStore::Set(std::string_view key, std::string_view value) {
  CheckSizes(key, value);
  Exchange(StoreRequest('S', key, value), nullptr, timeout_, "set", key);
}

std::string TcpStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  CheckSizes(key, {});
  std::string value;
  Exchange(StoreRequest('G', key, {}), &value, timeout, "get", key);
  return value;
}

PrefixStore::PrefixStore(std::shared_ptr<Store> base, std::string prefix)
    : base_(std::move(base)), prefix_(std::move(prefix)) {}

void PrefixStore::Set(std::string_view key, std::string_view value) { base_->Set(prefix_ + std::string(key), value); }

std::string PrefixStore::Get(std::string_view key, std::chrono::milliseconds timeout) {
  return base_->Get(prefix_ + std::string(key), timeout);
}

std::shared_ptr<Store> LaunchTcpStore(std::chrono::milliseconds timeout) {
  static std::mutex mu;
  static std::weak_ptr<Store> current;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<Store> s = current.lock();
  if (s == nullptr) {
    const LaunchInfo l = LaunchInfo::FromEnv();
    OAR_CHECK(l.launcher == "env", kFailedPrecondition,
              "the TCP store needs the torchrun-style launch variables RANK, WORLD_SIZE, MASTER_ADDR and "
              "MASTER_PORT (launcher: {})",
              l.launcher);
    s = TcpStore::FromLaunch(l, timeout);
    current = s;
  }
  return s;
}

std::unique_ptr<Store> StoreForLaunch(std::chrono::milliseconds timeout) {
  const LaunchInfo l = LaunchInfo::FromEnv();
  if (l.launcher == "mpirun") return ProcessGroup::World().NewStore(timeout);
  OAR_CHECK(l.launcher == "env", kFailedPrecondition,
            "no launcher: a store across processes needs mpirun or RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  return std::make_unique<PrefixStore>(LaunchTcpStore(timeout), "");
}

}  // namespace oar::distributed
