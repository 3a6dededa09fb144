// Level 0 — loadable: the ABI handshake and the device API contract (enumeration, attributes, memory,
// copies in every direction, memset, streams, events, callbacks, stats, clean errors for misuse). Cases
// talk to the plugin's device table directly, as the runtime does, so a failure names the slot.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <numeric>
#include <mutex>
#include <thread>

#include "conformance/runner/case.h"
#include "conformance/runner/determinism.h"
#include "core/ops/ops.h"
#include "core/runtime/dispatch.h"
#include "core/runtime/kernel_registry.h"
#include "core/runtime/status.h"
#include "core/tensor/tensor.h"

namespace oar::conformance {
namespace {

using runtime::StatusInfo;
using runtime::TakeStatus;

// ---- helpers ----------------------------------------------------------------------------------------

struct Api {
  CaseContext& c;
  const oar_device_api_t* d;
  int32_t ord;
  explicit Api(CaseContext& c) : c(c), d(c.ctx.api()), ord(c.ctx.ordinal()) {}

  /// Fail the case when `s` is an error.
  void Ok(oar_status_t* s, const std::string& what) const {
    if (s == nullptr) return;
    StatusInfo info = TakeStatus(s);
    Fail(fmt::format("{} returned {}: {}", what, ErrorCodeName(info.code), info.message));
  }
  /// Fail unless `s` is an error (any code but OK); return it.
  StatusInfo Err(oar_status_t* s, const std::string& what) const {
    if (s == nullptr) Fail(fmt::format("{} succeeded; expected a clean error status", what));
    return TakeStatus(s);
  }
};

// A device allocation freed at scope exit.
struct DeviceBuffer {
  Api& api;
  void* ptr = nullptr;
  size_t size;
  DeviceBuffer(Api& api, size_t size) : api(api), size(size) {
    api.Ok(api.d->malloc(api.ord, size, &ptr), fmt::format("malloc({} bytes)", size));
    Expect(size == 0 || ptr != nullptr, fmt::format("malloc({} bytes) returned NULL without an error", size));
  }
  ~DeviceBuffer() {
    if (oar_status_t* s = api.d->free(api.ord, ptr)) TakeStatus(s);
  }
};

struct StreamHandle {
  Api& api;
  oar_stream_t s = nullptr;
  explicit StreamHandle(Api& api) : api(api) { api.Ok(api.d->stream_create(api.ord, &s), "stream_create"); }
  ~StreamHandle() {
    if (oar_status_t* st = api.d->stream_destroy(api.ord, s)) TakeStatus(st);
  }
};

struct EventHandle {
  Api& api;
  oar_event_t e = nullptr;
  explicit EventHandle(Api& api) : api(api) { api.Ok(api.d->event_create(api.ord, &e), "event_create"); }
  ~EventHandle() {
    if (oar_status_t* st = api.d->event_destroy(api.ord, e)) TakeStatus(st);
  }
};

std::vector<uint8_t> Pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

void ExpectBytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const std::string& what) {
  if (got == want) return;
  size_t i = 0;
  while (i < got.size() && got[i] == want[i]) ++i;
  Fail(fmt::format("{}: byte {} of {} is {:#04x}, expected {:#04x}", what, i, want.size(), got[i], want[i]));
}

const runtime::AttrValue* Attr(CaseContext& c, const char* name) { return c.ctx.FindAttribute(name); }

size_t Alignment(CaseContext& c) {
  const runtime::AttrValue* a = Attr(c, OAR_DEVICE_ATTR_ALIGNMENT);
  return a != nullptr && a->type == OAR_ATTR_INT && a->i > 0 ? static_cast<size_t>(a->i) : 16;
}

std::vector<uint8_t> ReadBack(Api& api, const void* dev, size_t n) {
  std::vector<uint8_t> host(n);
  api.Ok(api.d->memcpy_d2h(api.ord, host.data(), dev, n), fmt::format("memcpy_d2h({} bytes)", n));
  return host;
}

using Body = std::function<void(CaseContext&)>;
void Add(std::vector<Case>& cases, std::string id, std::string family, Body body) {
  cases.push_back({"L0." + id, 0, std::move(family), [body = std::move(body)](CaseContext& c) {
                     body(c);
                     return CaseResult{};
                   }});
}

// ---- cases ------------------------------------------------------------------------------------------

void Handshake(std::vector<Case>& cases) {
  Add(cases, "handshake.abi_version", "handshake", [](CaseContext& c) {
    const runtime::Plugin& p = c.ctx.plugin();
    Expect(p.abi_major() == OAR_PLUGIN_ABI_MAJOR,
           fmt::format("plugin ABI major {} differs from host major {}", p.abi_major(), OAR_PLUGIN_ABI_MAJOR));
    Expect(!p.version().empty() && p.version() != "unknown", "plugin reports no version string");
    Expect(!p.vendor().empty() && p.vendor() != "unknown", "plugin reports no vendor string");
  });
  Add(cases, "enumeration.device_count", "enumeration", [](CaseContext& c) {
    Api api(c);
    int32_t n = -1;
    api.Ok(api.d->device_count(&n), "device_count");
    Expect(n >= 1 && c.ctx.ordinal() < n, fmt::format("device_count is {}; the device under test is ordinal {}", n,
                                                      c.ctx.ordinal()));
  });
  Add(cases, "enumeration.required_attributes", "enumeration", [](CaseContext& c) {
    for (const char* key : {OAR_DEVICE_ATTR_NAME, OAR_DEVICE_ATTR_VENDOR}) {
      const runtime::AttrValue* a = Attr(c, key);
      Expect(a != nullptr && a->type == OAR_ATTR_STRING && !a->s.empty(),
             fmt::format("required attribute '{}' must be a non-empty STRING", key));
    }
    const runtime::AttrValue* mem = Attr(c, OAR_DEVICE_ATTR_TOTAL_MEMORY);
    Expect(mem != nullptr && mem->type == OAR_ATTR_INT && mem->i > 0,
           "required attribute 'total_memory' must be a positive INT (bytes)");
    if (const runtime::AttrValue* al = Attr(c, OAR_DEVICE_ATTR_ALIGNMENT)) {
      Expect(al->type == OAR_ATTR_INT && al->i > 0 && (al->i & (al->i - 1)) == 0,
             fmt::format("attribute 'alignment' must be a power of two, got {}", al->ToString()));
    }
    if (const runtime::AttrValue* dt = Attr(c, OAR_DEVICE_ATTR_DTYPES)) {
      Expect(dt->type == OAR_ATTR_INTS, "attribute 'dtypes' must be INTS");
      for (int64_t t : dt->ints) {
        Expect(sdk::DTypeSize(static_cast<int32_t>(t)) != 0, fmt::format("attribute 'dtypes' lists invalid dtype {}", t));
      }
    }
  });
  Add(cases, "enumeration.determinism_declarations", "enumeration", [](CaseContext& c) {
    // The per-kernel lists must parse, name kernels the plugin registers (a typo would silently declare
    // nothing), and never call one kernel both reproducible and not.
    DeterminismDeclarations d;
    try {
      d = DeterminismDeclarations::Read(c.ctx);
    } catch (const Error& e) {
      Fail(e.what());
    }
    const runtime::KernelTable& table = c.ctx.plugin().kernels();
    for (const auto* list : {&d.deterministic, &d.nondeterministic}) {
      const char* name = list == &d.deterministic ? kDeterministicKernelsAttribute : kNondeterministicKernelsAttribute;
      for (const KernelPattern& p : *list) {
        bool registered = false;
        for (const runtime::KernelEntry& e : table.Variants(runtime::InternOp(p.op))) {
          std::vector<DType> key;
          for (int i = 0; i < e.num_dtypes; ++i) key.push_back(static_cast<DType>(e.dtypes[i]));
          registered = registered || p.Matches(p.op, key);
        }
        Expect(registered, fmt::format("device attribute '{}' lists {}, which the plugin does not register", name,
                                       p.text));
      }
    }
    for (int op_id : table.Ops()) {
      for (const runtime::KernelEntry& e : table.Variants(op_id)) {
        std::vector<DType> key;
        for (int i = 0; i < e.num_dtypes; ++i) key.push_back(static_cast<DType>(e.dtypes[i]));
        const std::string& op = runtime::OpName(op_id);
        auto listed = [&](const std::vector<KernelPattern>& l) {
          return std::any_of(l.begin(), l.end(), [&](const KernelPattern& p) { return p.Matches(op, key); });
        };
        Expect(!(listed(d.deterministic) && listed(d.nondeterministic)),
               fmt::format("kernel {} ({}) is listed both in '{}' and in '{}'", op, e.KeyString(),
                           kDeterministicKernelsAttribute, kNondeterministicKernelsAttribute));
      }
    }
  });
  Add(cases, "enumeration.invalid_ordinal", "misuse", [](CaseContext& c) {
    Api api(c);
    int32_t n = 0;
    api.Ok(api.d->device_count(&n), "device_count");
    void* p = nullptr;
    StatusInfo e = api.Err(api.d->malloc(n, 64, &p), fmt::format("malloc on ordinal {} (one past the last device)", n));
    Expect(e.code == ErrorCode::kInvalidArgument || e.code == ErrorCode::kOutOfRange,
           fmt::format("malloc on a non-existent ordinal gave {}; expected INVALID_ARGUMENT", ErrorCodeName(e.code)));
  });
}

void Memory(std::vector<Case>& cases) {
  Add(cases, "memory.zero_size", "memory", [](CaseContext& c) {
    Api api(c);
    void* p = reinterpret_cast<void*>(1);
    api.Ok(api.d->malloc(api.ord, 0, &p), "malloc(0 bytes)");
    api.Ok(api.d->free(api.ord, p), "free of a zero-size allocation");
  });
  Add(cases, "memory.alignment", "memory", [](CaseContext& c) {
    Api api(c);
    const size_t align = Alignment(c);
    for (size_t size : {1ul, 3ul, 100ul, 4096ul, 65537ul, (1ul << 20) + 5}) {
      DeviceBuffer b(api, size);
      Expect(reinterpret_cast<uintptr_t>(b.ptr) % align == 0,
             fmt::format("malloc({}) returned {} which is not aligned to {} bytes", size, b.ptr, align));
    }
  });
  Add(cases, "memory.allocations_are_disjoint", "memory", [](CaseContext& c) {
    Api api(c);
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    for (size_t i = 0; i < 16; ++i) bufs.push_back(std::make_unique<DeviceBuffer>(api, 1000 + 333 * i));
    // Write a distinct byte into each and read all back: overlapping allocations would clobber each other.
    for (size_t i = 0; i < bufs.size(); ++i) {
      api.Ok(api.d->memset(api.ord, bufs[i]->ptr, static_cast<uint8_t>(i + 1), bufs[i]->size), "memset");
    }
    for (size_t i = 0; i < bufs.size(); ++i) {
      ExpectBytes(ReadBack(api, bufs[i]->ptr, bufs[i]->size), std::vector<uint8_t>(bufs[i]->size, static_cast<uint8_t>(i + 1)),
                  fmt::format("allocation {} after filling 16 live allocations", i));
    }
  });
  Add(cases, "memory.exhaustion_is_a_clean_error", "memory", [](CaseContext& c) {
    Api api(c);
    const runtime::AttrValue* mem = Attr(c, OAR_DEVICE_ATTR_TOTAL_MEMORY);
    if (mem == nullptr || mem->type != OAR_ATTR_INT) throw SkipCase{"no total_memory attribute"};
    const size_t too_much = static_cast<size_t>(mem->i) * 2 + (1ull << 30);
    void* p = nullptr;
    StatusInfo e = api.Err(api.d->malloc(api.ord, too_much, &p), fmt::format("malloc({} bytes, twice total_memory)", too_much));
    Expect(e.code == ErrorCode::kResourceExhausted,
           fmt::format("allocation beyond capacity gave {} ({}); expected RESOURCE_EXHAUSTED", ErrorCodeName(e.code), e.message));
    DeviceBuffer after(api, 4096);  // the device still works
  });
  Add(cases, "memory.stats_are_consistent", "memory", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, memory_stats)) throw SkipCase{"optional slot memory_stats is NULL"};
    auto stats = [&] {
      oar_memory_stats_t s{};
      s.struct_size = OAR_MEMORY_STATS_STRUCT_SIZE;
      api.Ok(api.d->memory_stats(api.ord, &s), "memory_stats");
      return s;
    };
    const oar_memory_stats_t before = stats();
    uint64_t during_in_use = 0;
    {
      DeviceBuffer b(api, 3 << 20);
      const oar_memory_stats_t during = stats();
      during_in_use = during.bytes_in_use;
      if (during.bytes_in_use_is_set && before.bytes_in_use_is_set) {
        Expect(during.bytes_in_use >= before.bytes_in_use + (3 << 20),
               fmt::format("bytes_in_use went from {} to {} after a 3 MiB malloc", before.bytes_in_use, during.bytes_in_use));
      }
      if (during.peak_bytes_in_use_is_set && during.bytes_in_use_is_set) {
        Expect(during.peak_bytes_in_use >= during.bytes_in_use,
               fmt::format("peak_bytes_in_use {} < bytes_in_use {}", during.peak_bytes_in_use, during.bytes_in_use));
      }
      if (during.bytes_limit_is_set && during.bytes_in_use_is_set) {
        Expect(during.bytes_limit >= during.bytes_in_use,
               fmt::format("bytes_limit {} < bytes_in_use {}", during.bytes_limit, during.bytes_in_use));
      }
    }
    const oar_memory_stats_t after = stats();
    if (after.bytes_in_use_is_set && before.bytes_in_use_is_set) {
      Expect(after.bytes_in_use == before.bytes_in_use,
             fmt::format("bytes_in_use is {} after free, {} before malloc (during: {})", after.bytes_in_use,
                         before.bytes_in_use, during_in_use));
    }
  });
  Add(cases, "memory.pinned_host", "memory", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, host_malloc) || !OAR_HAS_SLOT(api.d, host_free)) {
      throw SkipCase{"optional slots host_malloc/host_free are NULL (the host uses plain memory)"};
    }
    void* h = nullptr;
    api.Ok(api.d->host_malloc(api.ord, 1 << 16, &h), "host_malloc(64 KiB)");
    Expect(h != nullptr, "host_malloc returned NULL");
    std::memset(h, 0x5a, 1 << 16);  // pinned memory is host memory: must be writable
    DeviceBuffer b(api, 1 << 16);
    api.Ok(api.d->memcpy_h2d(api.ord, b.ptr, h, 1 << 16), "memcpy_h2d from pinned memory");
    ExpectBytes(ReadBack(api, b.ptr, 1 << 16), std::vector<uint8_t>(1 << 16, 0x5a), "pinned round trip");
    api.Ok(api.d->host_free(api.ord, h), "host_free");
  });
}

void Copies(std::vector<Case>& cases) {
  for (size_t n : {1ul, 7ul, 4096ul, (1ul << 20) + 3}) {
    Add(cases, fmt::format("copy.h2d_d2h.bytes={}", n), "copy", [n](CaseContext& c) {
      Api api(c);
      DeviceBuffer b(api, n);
      const auto want = Pattern(n, c.seed);
      api.Ok(api.d->memcpy_h2d(api.ord, b.ptr, want.data(), n), "memcpy_h2d");
      ExpectBytes(ReadBack(api, b.ptr, n), want, "h2d then d2h");
    });
    Add(cases, fmt::format("copy.d2d.bytes={}", n), "copy", [n](CaseContext& c) {
      Api api(c);
      DeviceBuffer a(api, n), b(api, n);
      const auto want = Pattern(n, c.seed);
      api.Ok(api.d->memcpy_h2d(api.ord, a.ptr, want.data(), n), "memcpy_h2d");
      api.Ok(api.d->memcpy_d2d(api.ord, b.ptr, a.ptr, n), "memcpy_d2d");
      ExpectBytes(ReadBack(api, b.ptr, n), want, "d2d copy");
    });
  }
  Add(cases, "copy.offsets_inside_allocations", "copy", [](CaseContext& c) {
    Api api(c);
    DeviceBuffer b(api, 1000);
    const auto base = Pattern(1000, c.seed);
    api.Ok(api.d->memcpy_h2d(api.ord, b.ptr, base.data(), 1000), "memcpy_h2d");
    const auto patch = Pattern(100, c.seed + 1);
    api.Ok(api.d->memcpy_h2d(api.ord, static_cast<char*>(b.ptr) + 333, patch.data(), 100), "memcpy_h2d at offset 333");
    auto want = base;
    std::copy(patch.begin(), patch.end(), want.begin() + 333);
    ExpectBytes(ReadBack(api, b.ptr, 1000), want, "partial write at an interior offset");
    std::vector<uint8_t> part(50);
    api.Ok(api.d->memcpy_d2h(api.ord, part.data(), static_cast<char*>(b.ptr) + 950, 50), "memcpy_d2h of the last 50 bytes");
    ExpectBytes(part, std::vector<uint8_t>(want.begin() + 950, want.end()), "read at an interior offset");
  });
  Add(cases, "copy.async_round_trip", "copy", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, memcpy_h2d_async) || !OAR_HAS_SLOT(api.d, memcpy_d2h_async) ||
        !OAR_HAS_SLOT(api.d, memcpy_d2d_async)) {
      throw SkipCase{"optional async copy slots are NULL (the host falls back to synchronous copies)"};
    }
    const size_t n = (1 << 20) + 17;
    DeviceBuffer a(api, n), b(api, n);
    StreamHandle s(api);
    const auto want = Pattern(n, c.seed);
    // Never freed: a plugin that completes streams early may write here after the case has ended.
    static uint8_t* const got = new uint8_t[n];
    std::memset(got, 0, n);
    api.Ok(api.d->memcpy_h2d_async(api.ord, s.s, a.ptr, want.data(), n), "memcpy_h2d_async");
    api.Ok(api.d->memcpy_d2d_async(api.ord, s.s, b.ptr, a.ptr, n), "memcpy_d2d_async");
    api.Ok(api.d->memcpy_d2h_async(api.ord, s.s, got, b.ptr, n), "memcpy_d2h_async");
    api.Ok(api.d->stream_synchronize(api.ord, s.s), "stream_synchronize");
    ExpectBytes(std::vector<uint8_t>(got, got + n), want, "async h2d -> d2d -> d2h on one stream, then stream_synchronize");
  });
  Add(cases, "copy.async_d2h_complete_at_event", "copy", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, memcpy_d2h_async)) throw SkipCase{"optional slot memcpy_d2h_async is NULL"};
    const size_t n = (1 << 20) + 5;
    // A plugin that signals completion early may still write into the destination later: give it host
    // memory that outlives the case (never freed) so such a late write cannot corrupt the runner, and
    // the failure is reported on this case instead of as a heap corruption in a later one.
    static uint8_t* const late_safe = new uint8_t[n];
    DeviceBuffer b(api, n);
    StreamHandle s(api);
    EventHandle done(api);
    for (int round = 0; round < 3; ++round) {
      const auto want = Pattern(n, c.seed + round);
      std::memset(late_safe, 0, n);
      api.Ok(api.d->memcpy_h2d(api.ord, b.ptr, want.data(), n), "memcpy_h2d");
      api.Ok(api.d->memcpy_d2h_async(api.ord, s.s, late_safe, b.ptr, n), "memcpy_d2h_async");
      api.Ok(api.d->event_record(api.ord, done.e, s.s), "event_record after memcpy_d2h_async");
      api.Ok(api.d->event_synchronize(api.ord, done.e), "event_synchronize");
      // The event completes only after the copy before it: every byte must be in host memory now.
      ExpectBytes(std::vector<uint8_t>(late_safe, late_safe + n), want,
                  fmt::format("host buffer right after event_synchronize of an event recorded after memcpy_d2h_async "
                              "(round {})",
                              round));
    }
  });
  Add(cases, "copy.p2p", "copy", [](CaseContext& c) {
    Api api(c);
    int32_t count = 0;
    api.Ok(api.d->device_count(&count), "device_count");
    if (count < 2) throw SkipCase{"needs two devices of this type"};
    if (!OAR_HAS_SLOT(api.d, memcpy_p2p)) throw SkipCase{"optional slot memcpy_p2p is NULL (the host stages through host memory)"};
    const int32_t peer = (api.ord + 1) % count;
    const size_t n = 100000;
    void* remote = nullptr;
    api.Ok(api.d->malloc(peer, n, &remote), fmt::format("malloc on peer device {}", peer));
    DeviceBuffer local(api, n);
    const auto want = Pattern(n, c.seed);
    api.Ok(api.d->memcpy_h2d(api.ord, local.ptr, want.data(), n), "memcpy_h2d");
    api.Ok(api.d->memcpy_p2p(peer, remote, api.ord, local.ptr, n), "memcpy_p2p");
    std::vector<uint8_t> got(n);
    api.Ok(api.d->memcpy_d2h(peer, got.data(), remote, n), "memcpy_d2h on the peer");
    api.Ok(api.d->free(peer, remote), "free on the peer");
    ExpectBytes(got, want, "peer copy");
  });
  Add(cases, "memset.sync_and_async", "memset", [](CaseContext& c) {
    Api api(c);
    const size_t n = 70001;
    DeviceBuffer b(api, n);
    api.Ok(api.d->memset(api.ord, b.ptr, 0xab, n), "memset");
    ExpectBytes(ReadBack(api, b.ptr, n), std::vector<uint8_t>(n, 0xab), "memset 0xab");
    api.Ok(api.d->memset(api.ord, static_cast<char*>(b.ptr) + 10, 0x01, 20), "memset of an interior range");
    auto want = std::vector<uint8_t>(n, 0xab);
    std::fill(want.begin() + 10, want.begin() + 30, 0x01);
    ExpectBytes(ReadBack(api, b.ptr, n), want, "interior memset");
    if (!OAR_HAS_SLOT(api.d, memset_async)) return;
    StreamHandle s(api);
    api.Ok(api.d->memset_async(api.ord, s.s, b.ptr, 0x3c, n), "memset_async");
    api.Ok(api.d->stream_synchronize(api.ord, s.s), "stream_synchronize");
    ExpectBytes(ReadBack(api, b.ptr, n), std::vector<uint8_t>(n, 0x3c), "memset_async then synchronize");
  });
}

void Streams(std::vector<Case>& cases) {
  Add(cases, "stream.create_query_synchronize_destroy", "stream", [](CaseContext& c) {
    Api api(c);
    for (int i = 0; i < 8; ++i) {
      StreamHandle s(api);
      api.Ok(api.d->stream_synchronize(api.ord, s.s), "stream_synchronize of an empty stream");
      bool idle = false;
      api.Ok(api.d->stream_query(api.ord, s.s, &idle), "stream_query");
      Expect(idle, "stream_query reports work pending on a synchronised stream");
    }
  });
  Add(cases, "stream.in_order_execution", "stream", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, memset_async) || !OAR_HAS_SLOT(api.d, memcpy_d2d_async)) {
      throw SkipCase{"needs memset_async and memcpy_d2d_async"};
    }
    const size_t n = 1 << 20;
    DeviceBuffer a(api, n), b(api, n);
    StreamHandle s(api);
    // a = 1; b = a; a = 2 — in order, b must end up all 1s, whatever the device's internal scheduling.
    api.Ok(api.d->memset_async(api.ord, s.s, a.ptr, 1, n), "memset_async a=1");
    api.Ok(api.d->memcpy_d2d_async(api.ord, s.s, b.ptr, a.ptr, n), "memcpy_d2d_async b=a");
    api.Ok(api.d->memset_async(api.ord, s.s, a.ptr, 2, n), "memset_async a=2");
    api.Ok(api.d->stream_synchronize(api.ord, s.s), "stream_synchronize");
    ExpectBytes(ReadBack(api, b.ptr, n), std::vector<uint8_t>(n, 1), "b after a=1; b=a; a=2");
    ExpectBytes(ReadBack(api, a.ptr, n), std::vector<uint8_t>(n, 2), "a after a=1; b=a; a=2");
  });
  Add(cases, "stream.sync_copy_waits_for_queued_work", "stream", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, memset_async)) throw SkipCase{"needs memset_async"};
    const size_t n = 4 << 20;
    DeviceBuffer a(api, n);
    StreamHandle s(api);
    api.Ok(api.d->memset_async(api.ord, s.s, a.ptr, 9, n), "memset_async");
    // No explicit synchronisation: a synchronous copy is ordered after queued work on every stream.
    ExpectBytes(ReadBack(api, a.ptr, n), std::vector<uint8_t>(n, 9), "sync memcpy_d2h right after memset_async");
  });
  Add(cases, "stream.host_callback", "stream", [](CaseContext& c) {
    Api api(c);
    StreamHandle s(api);
    std::atomic<int> calls{0};
    api.Ok(api.d->stream_add_callback(
               api.ord, s.s, [](void* p) { static_cast<std::atomic<int>*>(p)->fetch_add(1); }, &calls),
           "stream_add_callback");
    api.Ok(api.d->stream_synchronize(api.ord, s.s), "stream_synchronize");
    // The callback may run on a plugin thread; give it a moment after the stream drained.
    for (int i = 0; i < 200 && calls.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    Expect(calls.load() == 1, fmt::format("host callback ran {} times; expected once", calls.load()));
  });
  Add(cases, "event.record_query_synchronize", "event", [](CaseContext& c) {
    Api api(c);
    EventHandle never(api);
    bool done = false;
    api.Ok(api.d->event_query(api.ord, never.e, &done), "event_query of a never-recorded event");
    Expect(done, "an event that was never recorded must be complete");
    api.Ok(api.d->event_synchronize(api.ord, never.e), "event_synchronize of a never-recorded event");
    StreamHandle s(api);
    EventHandle e(api);
    api.Ok(api.d->event_record(api.ord, e.e, s.s), "event_record");
    api.Ok(api.d->event_synchronize(api.ord, e.e), "event_synchronize");
    api.Ok(api.d->event_query(api.ord, e.e, &done), "event_query");
    Expect(done, "event_query reports incomplete after event_synchronize");
  });
  Add(cases, "event.cross_stream_ordering", "event", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, memset_async) || !OAR_HAS_SLOT(api.d, memcpy_d2d_async)) {
      throw SkipCase{"needs memset_async and memcpy_d2d_async"};
    }
    const size_t n = 8 << 20;
    DeviceBuffer x(api, n), y(api, n);
    StreamHandle producer(api), consumer(api);
    EventHandle ready(api);
    api.Ok(api.d->memset(api.ord, y.ptr, 0, n), "memset y=0");
    api.Ok(api.d->memset_async(api.ord, producer.s, x.ptr, 7, n), "memset_async x=7 on the producer stream");
    api.Ok(api.d->event_record(api.ord, ready.e, producer.s), "event_record on the producer");
    api.Ok(api.d->stream_wait_event(api.ord, consumer.s, ready.e), "stream_wait_event on the consumer");
    api.Ok(api.d->memcpy_d2d_async(api.ord, consumer.s, y.ptr, x.ptr, n), "memcpy_d2d_async y=x on the consumer");
    api.Ok(api.d->stream_synchronize(api.ord, consumer.s), "stream_synchronize(consumer)");
    ExpectBytes(ReadBack(api, y.ptr, n), std::vector<uint8_t>(n, 7), "consumer copy ordered after the producer's event");
  });
}

// ---- ordering against a stream the runner holds ---------------------------------------------------
// A host callback that blocks until the runner opens it holds everything queued behind it on its
// stream, for as long as the runner wants: the checks below do not depend on how fast the device is.
// A device that runs host callbacks at once on the enqueuing thread (synchronous streams) has nothing
// to hold: the callback notices and returns, and the case is SKIPPED.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false, ran_inline = false, timed_out = false;
  std::thread::id enqueuer = std::this_thread::get_id();

  static void Wait(void* p) {
    auto* g = static_cast<Gate*>(p);
    std::unique_lock<std::mutex> lock(g->mu);
    if (std::this_thread::get_id() == g->enqueuer) {
      g->ran_inline = true;
      return;
    }
    if (!g->cv.wait_for(lock, std::chrono::seconds(20), [g] { return g->open; })) g->timed_out = true;  // never forever
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  /// Opened by the runner, or given up waiting (then nothing was held any more).
  bool IsOpen() {
    std::lock_guard<std::mutex> lock(mu);
    return open || timed_out;
  }
};

// Holds `stream` with a fresh Gate (never freed: a callback may outlive a failed case), or SKIPs.
Gate* HoldStream(Api& api, oar_stream_t stream) {
  Gate* g = new Gate;
  api.Ok(api.d->stream_add_callback(api.ord, stream, &Gate::Wait, g), "stream_add_callback (the runner's gate)");
  if (g->ran_inline) {
    throw SkipCase{"the device runs host callbacks at once on the enqueuing thread (synchronous streams): there is "
                   "no queued work to order against"};
  }
  return g;
}

// Opens the gate when the case ends, however it ends.
struct OpenAtExit {
  Gate* g;
  ~OpenAtExit() { g->Open(); }
};

void GatedOrdering(std::vector<Case>& cases) {
  Add(cases, "stream.held_stream_queries_report_pending", "stream", [](CaseContext& c) {
    Api api(c);
    StreamHandle s(api);
    EventHandle e(api);
    Gate* g = HoldStream(api, s.s);
    OpenAtExit open{g};
    api.Ok(api.d->event_record(api.ord, e.e, s.s), "event_record behind the held callback");
    bool idle = true, done = true;
    api.Ok(api.d->stream_query(api.ord, s.s, &idle), "stream_query");
    Expect(!idle, "stream_query reports the stream idle while a host callback on it has not returned (the runner "
                  "holds it): stream_query must report pending work");
    api.Ok(api.d->event_query(api.ord, e.e, &done), "event_query");
    Expect(!done, "event_query reports complete an event recorded behind a host callback that has not returned "
                  "(the runner holds it): event_query must report it pending");
    g->Open();
    api.Ok(api.d->event_synchronize(api.ord, e.e), "event_synchronize after the gate opened");
    api.Ok(api.d->stream_query(api.ord, s.s, &idle), "stream_query after event_synchronize");
    api.Ok(api.d->event_query(api.ord, e.e, &done), "event_query after event_synchronize");
    Expect(done, "event_query reports pending after event_synchronize returned");
  });
  Add(cases, "stream.held_stream_sync_copy_and_event_synchronize_wait", "stream", [](CaseContext& c) {
    Api api(c);
    if (!OAR_HAS_SLOT(api.d, memset_async)) throw SkipCase{"needs memset_async"};
    const size_t n = 1 << 16;
    DeviceBuffer b(api, n);
    api.Ok(api.d->memset(api.ord, b.ptr, 0, n), "memset 0");
    StreamHandle s(api);
    EventHandle e(api);
    Gate* g = HoldStream(api, s.s);
    OpenAtExit open{g};
    api.Ok(api.d->memset_async(api.ord, s.s, b.ptr, 0x5a, n), "memset_async 0x5a behind the held callback");
    api.Ok(api.d->event_record(api.ord, e.e, s.s), "event_record after it");
    // Each waits on its own thread; whether it returned before the gate opened is decided without timing
    // (the gate's state is read when it returns), the short sleep only gives a wrong one time to return.
    std::vector<uint8_t> host(n, 0);
    std::atomic<bool> copy_early{false}, sync_early{false};
    std::string copy_error, sync_error;
    std::thread copier([&] {
      if (oar_status_t* st = api.d->memcpy_d2h(api.ord, host.data(), b.ptr, n)) copy_error = TakeStatus(st).message;
      copy_early = !g->IsOpen();
    });
    std::thread syncer([&] {
      if (oar_status_t* st = api.d->event_synchronize(api.ord, e.e)) sync_error = TakeStatus(st).message;
      sync_early = !g->IsOpen();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g->Open();
    copier.join();
    syncer.join();
    Expect(copy_error.empty(), "memcpy_d2h failed: " + copy_error);
    Expect(sync_error.empty(), "event_synchronize failed: " + sync_error);
    Expect(!sync_early, "event_synchronize returned while the stream it was recorded on was held by the runner "
                        "(work queued before the event had not run)");
    Expect(!copy_early, "a synchronous memcpy_d2h returned while a stream was held with work queued on it: "
                        "synchronous copies are ordered after queued work on every stream");
    ExpectBytes(host, std::vector<uint8_t>(n, 0x5a),
                "synchronous memcpy_d2h issued while memset_async 0x5a was queued behind a held callback");
  });
  Add(cases, "stream.op_result_read_without_synchronize", "stream", [](CaseContext& c) {
    Api api(c);
    const std::vector<float> a(4099, 1.25f), b(4099, 2.5f);
    const Tensor ta = FromVector<float>(a, Dims{4099}, Device("cpu")).to(c.device);
    const Tensor tb = FromVector<float>(b, Dims{4099}, Device("cpu")).to(c.device);
    c.ctx.Synchronize();
    Gate* g = HoldStream(api, c.ctx.stream());  // the stream the core enqueues ops on
    OpenAtExit open{g};
    Tensor sum;
    try {
      sum = ops::Run(ops::Op::kAdd, std::vector<Tensor>{ta, tb}, {}, c.device)[0];  // queued behind the gate
    } catch (const Error& err) {
      if (err.code() == ErrorCode::kUnimplemented) throw SkipCase{"prerequisite not claimed: add float32"};
      throw;
    }
    std::vector<float> got;
    std::atomic<bool> early{false};
    std::thread reader([&] {  // no explicit synchronize: reading the result must wait for it
      got = sum.to(Device("cpu")).ToVector<float>();
      early = !g->IsOpen();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g->Open();
    reader.join();
    Expect(!early, "reading an op's result on the host returned while the op was still queued behind a held callback");
    for (size_t i = 0; i < got.size(); ++i) {
      Expect(got[i] == 3.75f, fmt::format("add's result read without synchronize: element {} is {}, expected 3.75 "
                                          "(the copy did not wait for the queued op)",
                                          i, got[i]));
    }
  });
}

void Misuse(std::vector<Case>& cases) {
  Add(cases, "misuse.unsupported_op_is_a_clean_error", "misuse", [](CaseContext& c) {
    // Through the runtime, with fallback forbidden: an op no plugin has must be UNIMPLEMENTED, not a crash.
    const int op = runtime::InternOp("conformance_no_such_op");
    Tensor x = zeros({4}, DType::kFloat32, c.device);
    try {
      runtime::Launch(c.device, op, {&x, 1}, {&x, 1}, {});
      Fail("launching an op the plugin never registered succeeded");
    } catch (const Error& e) {
      Expect(e.code() == ErrorCode::kUnimplemented,
             fmt::format("unregistered op gave {}: {}; expected UNIMPLEMENTED", ErrorCodeName(e.code()), e.what()));
    }
  });
  Add(cases, "misuse.free_of_foreign_pointer", "misuse", [](CaseContext& c) {
    Api api(c);
    int host_object = 0;
    oar_status_t* s = api.d->free(api.ord, &host_object);
    if (s == nullptr) Fail("free() of a host stack address (never allocated by the plugin) reported success");
    TakeStatus(s);
  });
  Add(cases, "misuse.destroyed_stream_handle", "misuse", [](CaseContext& c) {
    Api api(c);
    oar_stream_t s = nullptr;
    api.Ok(api.d->stream_create(api.ord, &s), "stream_create");
    api.Ok(api.d->stream_destroy(api.ord, s), "stream_destroy");
    // Using a destroyed handle is a host bug; the plugin may not detect it, but it must not crash.
    bool idle = false;
    if (oar_status_t* st = api.d->stream_query(api.ord, s, &idle)) TakeStatus(st);
  });
}

}  // namespace

void AddLevel0Cases(std::vector<Case>& cases) {
  Handshake(cases);
  Memory(cases);
  Copies(cases);
  Streams(cases);
  GatedOrdering(cases);
  Misuse(cases);
}

}  // namespace oar::conformance
