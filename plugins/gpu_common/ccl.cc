#include "plugins/gpu_common/ccl.h"

#if defined(OAR_GPU_HAVE_CCL)

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "oar/plugin/cpp/status.hpp"
#include "plugins/gpu_common/runtime.h"

#if defined(OAR_GPU_CUDA)
#include <nccl.h>
#define OAR_CCL_LIBRARY "NCCL"
#else
#include <rccl/rccl.h>
#define OAR_CCL_LIBRARY "RCCL"
#endif

namespace oar::gpu {
namespace {

using sdk::Guard;

static_assert(sizeof(ncclUniqueId) <= OAR_CCL_UNIQUE_ID_BYTES, "the ABI's unique id must hold the library's");

void CheckCcl(ncclResult_t result, const char* api, int32_t device) {
  if (result == ncclSuccess) return;
  const oar_status_code code = result == ncclInvalidArgument || result == ncclInvalidUsage ? OAR_STATUS_INVALID_ARGUMENT
                               : result == ncclSystemError                                 ? OAR_STATUS_UNAVAILABLE
                                                                                           : OAR_STATUS_INTERNAL;
  Fail(code, std::string(api) + (device >= 0 ? " on device " + std::to_string(device) : std::string()) +
                 " failed: " + ncclGetErrorString(result) + " (" OAR_CCL_LIBRARY ")");
}
#define OAR_CCL_CHECK(device, fn, ...) CheckCcl(fn(__VA_ARGS__), #fn, (device))

struct Comm {
  int32_t device;
  ncclComm_t native;
};

struct Comms {
  std::mutex mutex;
  std::unordered_set<Comm*> live;
};
Comms& Live() {
  static auto* c = new Comms();
  return *c;
}

Comm Lookup(oar_ccl_comm_t handle) {
  std::lock_guard<std::mutex> lock(Live().mutex);
  auto it = Live().live.find(reinterpret_cast<Comm*>(handle));
  if (it == Live().live.end()) Fail(OAR_STATUS_INVALID_ARGUMENT, "unknown or destroyed communicator");
  return **it;
}

ncclDataType_t DataType(int32_t dtype, bool reducing) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT32:
      return ncclFloat32;
    case OAR_DTYPE_FLOAT64:
      return ncclFloat64;
    case OAR_DTYPE_FLOAT16:
      return ncclFloat16;
    case OAR_DTYPE_BFLOAT16:
      return ncclBfloat16;
    case OAR_DTYPE_INT8:
      return ncclInt8;
    case OAR_DTYPE_UINT8:
      return ncclUint8;
    case OAR_DTYPE_INT32:
      return ncclInt32;
    case OAR_DTYPE_INT64:
      return ncclInt64;
    case OAR_DTYPE_BOOL:
      if (!reducing) return ncclUint8;  // moving bytes only
      break;
    default:
      break;
  }
  Fail(OAR_STATUS_UNIMPLEMENTED, "dtype " + std::to_string(dtype) + (reducing ? " cannot be reduced" : " is unknown"));
}

ncclRedOp_t NcclOp(int32_t op) {
  switch (op) {
    case OAR_REDUCE_SUM:
      return ncclSum;
    case OAR_REDUCE_PROD:
      return ncclProd;
    case OAR_REDUCE_MAX:
      return ncclMax;
    case OAR_REDUCE_MIN:
      return ncclMin;
    case OAR_REDUCE_AVG:
      return ncclAvg;
    default:
      Fail(OAR_STATUS_INVALID_ARGUMENT, "unknown reduce op " + std::to_string(op));
  }
}

/// The communicator and its device's native stream for one collective call.
struct Target {
  Comm comm;
  gpuStream_t stream;
};
Target Resolve(oar_ccl_comm_t handle, oar_stream_t stream) {
  const Comm c = Lookup(handle);
  UseDevice(c.device);
  return Target{c, NativeStream(c.device, stream)};
}

oar_status_t* GetUniqueId(oar_ccl_unique_id_t* id) {
  return Guard([&] {
    if (id == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "get_unique_id: NULL id");
    ncclUniqueId native;
    OAR_CCL_CHECK(-1, ncclGetUniqueId, &native);
    std::memset(id->bytes, 0, sizeof(id->bytes));
    std::memcpy(id->bytes, &native, sizeof(native));
  });
}

oar_status_t* CommInitRank(int32_t device, int32_t nranks, const oar_ccl_unique_id_t* id, int32_t rank,
                           const oar_ccl_kv_store_t* store, oar_ccl_comm_t* comm) {
  return Guard([&] {
    (void)store;  // the host distributes the unique id; NCCL/RCCL bootstrap over their own sockets
    if (id == nullptr || comm == nullptr) Fail(OAR_STATUS_INVALID_ARGUMENT, "comm_init_rank: NULL id or comm");
    if (nranks < 1 || rank < 0 || rank >= nranks) Fail(OAR_STATUS_INVALID_ARGUMENT, "comm_init_rank: bad rank/nranks");
    UseDevice(device);
    ncclUniqueId native;
    std::memcpy(&native, id->bytes, sizeof(native));
    ncclComm_t c = nullptr;
    OAR_CCL_CHECK(device, ncclCommInitRank, &c, nranks, native, rank);
    auto* entry = new Comm{device, c};
    std::lock_guard<std::mutex> lock(Live().mutex);
    Live().live.insert(entry);
    *comm = reinterpret_cast<oar_ccl_comm_t>(entry);
  });
}

oar_status_t* CommDestroy(oar_ccl_comm_t handle) {
  return Guard([&] {
    Comm* entry = nullptr;
    {
      std::lock_guard<std::mutex> lock(Live().mutex);
      auto it = Live().live.find(reinterpret_cast<Comm*>(handle));
      if (it == Live().live.end()) Fail(OAR_STATUS_INVALID_ARGUMENT, "unknown or destroyed communicator");
      entry = *it;
      Live().live.erase(it);
    }
    const Comm c = *entry;
    delete entry;
    UseDevice(c.device);
    OAR_CCL_CHECK(c.device, ncclCommDestroy, c.native);
  });
}

oar_status_t* AllReduce(const void* send, void* recv, size_t count, int32_t dtype, int32_t op, oar_ccl_comm_t comm,
                        oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    OAR_CCL_CHECK(t.comm.device, ncclAllReduce, send, recv, count, DataType(dtype, true), NcclOp(op), t.comm.native,
                  t.stream);
  });
}

oar_status_t* Broadcast(const void* send, void* recv, size_t count, int32_t dtype, int32_t root, oar_ccl_comm_t comm,
                        oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    OAR_CCL_CHECK(t.comm.device, ncclBroadcast, send, recv, count, DataType(dtype, false), root, t.comm.native,
                  t.stream);
  });
}

oar_status_t* Reduce(const void* send, void* recv, size_t count, int32_t dtype, int32_t op, int32_t root,
                     oar_ccl_comm_t comm, oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    OAR_CCL_CHECK(t.comm.device, ncclReduce, send, recv, count, DataType(dtype, true), NcclOp(op), root, t.comm.native,
                  t.stream);
  });
}

oar_status_t* AllGather(const void* send, void* recv, size_t send_count, int32_t dtype, oar_ccl_comm_t comm,
                        oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    OAR_CCL_CHECK(t.comm.device, ncclAllGather, send, recv, send_count, DataType(dtype, false), t.comm.native,
                  t.stream);
  });
}

oar_status_t* ReduceScatter(const void* send, void* recv, size_t recv_count, int32_t dtype, int32_t op,
                            oar_ccl_comm_t comm, oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    OAR_CCL_CHECK(t.comm.device, ncclReduceScatter, send, recv, recv_count, DataType(dtype, true), NcclOp(op),
                  t.comm.native, t.stream);
  });
}

size_t ElementBytes(int32_t dtype) {
  switch (dtype) {
    case OAR_DTYPE_FLOAT64:
    case OAR_DTYPE_INT64:
      return 8;
    case OAR_DTYPE_FLOAT32:
    case OAR_DTYPE_INT32:
      return 4;
    case OAR_DTYPE_FLOAT16:
    case OAR_DTYPE_BFLOAT16:
      return 2;
    default:
      return 1;
  }
}

/// all_to_all as one group of paired sends and receives (NCCL has no all-to-all primitive).
oar_status_t* AllToAll(const void* send, void* recv, size_t count, int32_t dtype, oar_ccl_comm_t comm,
                       oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    const ncclDataType_t type = DataType(dtype, false);
    int nranks = 0;
    OAR_CCL_CHECK(t.comm.device, ncclCommCount, t.comm.native, &nranks);
    const size_t chunk = count * ElementBytes(dtype);
    OAR_CCL_CHECK(t.comm.device, ncclGroupStart);
    ncclResult_t result = ncclSuccess;
    for (int peer = 0; peer < nranks && result == ncclSuccess; ++peer) {
      result = ncclSend(static_cast<const char*>(send) + peer * chunk, count, type, peer, t.comm.native, t.stream);
      if (result == ncclSuccess) {
        result = ncclRecv(static_cast<char*>(recv) + peer * chunk, count, type, peer, t.comm.native, t.stream);
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    CheckCcl(result, "ncclSend/ncclRecv", t.comm.device);
    CheckCcl(end, "ncclGroupEnd", t.comm.device);
  });
}

oar_status_t* Send(const void* buf, size_t count, int32_t dtype, int32_t peer, oar_ccl_comm_t comm,
                   oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    OAR_CCL_CHECK(t.comm.device, ncclSend, buf, count, DataType(dtype, false), peer, t.comm.native, t.stream);
  });
}

oar_status_t* Recv(void* buf, size_t count, int32_t dtype, int32_t peer, oar_ccl_comm_t comm, oar_stream_t stream) {
  return Guard([&] {
    const Target t = Resolve(comm, stream);
    OAR_CCL_CHECK(t.comm.device, ncclRecv, buf, count, DataType(dtype, false), peer, t.comm.native, t.stream);
  });
}

oar_status_t* GroupStart() {
  return Guard([&] { OAR_CCL_CHECK(-1, ncclGroupStart); });
}
oar_status_t* GroupEnd() {
  return Guard([&] { OAR_CCL_CHECK(-1, ncclGroupEnd); });
}

const oar_ccl_api_t kCclApi = [] {
  oar_ccl_api_t c{};
  c.struct_size = OAR_CCL_API_STRUCT_SIZE;
  c.get_unique_id = GetUniqueId;
  c.comm_init_rank = CommInitRank;
  c.comm_destroy = CommDestroy;
  c.all_reduce = AllReduce;
  c.broadcast = Broadcast;
  c.reduce = Reduce;
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

}  // namespace oar::gpu

#else  // built without NCCL / RCCL

namespace oar::gpu {
const oar_ccl_api_t* CclApi() { return nullptr; }
}  // namespace oar::gpu

#endif
