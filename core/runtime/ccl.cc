#include "core/runtime/ccl.h"

#include <fmt/format.h>

#include "core/base/error.h"
#include "core/runtime/runtime.h"
#include "core/runtime/status.h"

namespace oar::runtime {
namespace {

DeviceContext& Ctx(Device d) { return Runtime::Get().Context(d); }
int32_t Code(DType dtype) { return static_cast<int32_t>(dtype); }
int32_t Code(ReduceOp op) { return static_cast<int32_t>(op); }

const oar_ccl_api_t* CclOf(const Device& d) {
  DeviceType* type = Runtime::Get().FindType(d.type());
  OAR_CHECK(type != nullptr, kNotFound, "no device type '{}'", d.type());
  const oar_ccl_api_t* ccl = type->plugin().ccl();
  OAR_CHECK(ccl != nullptr, kUnimplemented,
            "device type '{}' has no collective communication (its plugin has no CCL table)", d.type());
  return ccl;
}

}  // namespace

Communicator::Communicator(std::vector<Device> devices) : devices_(std::move(devices)) {
  OAR_CHECK(!devices_.empty(), kInternal, "runtime::Communicator needs at least one device");
  ccl_ = CclOf(devices_[0]);
  nranks_ = size();
  oar_ccl_unique_id_t id{};
  ThrowIfError(ccl_->get_unique_id(&id), [&] { return devices_[0].type() + " ccl get_unique_id"; });
  comms_.assign(devices_.size(), nullptr);
  Grouped("comm_init_rank", [&](int r) {
    return ccl_->comm_init_rank(Ctx(devices_[r]).ordinal(), size(), &id, r, nullptr, &comms_[r]);
  });
}

Communicator::Communicator(Device device, int nranks, int rank, const oar_ccl_kv_store_t* store, const std::string& key,
                           int64_t timeout_ms)
    : devices_{device}, nranks_(nranks) {
  OAR_CHECK(
      nranks >= 1 && rank >= 0 && rank < nranks && store != nullptr && store->set != nullptr && store->get != nullptr,
      kInternal, "runtime::Communicator: rank {} of {}, or no store", rank, nranks);
  ccl_ = CclOf(device);
  oar_ccl_unique_id_t id{};
  const std::string id_key = key + "/unique_id";
  if (rank == 0) {
    ThrowIfError(ccl_->get_unique_id(&id), [&] { return device.type() + " ccl get_unique_id"; });
    ThrowIfError(store->set(store->context, id_key.c_str(), id.bytes, sizeof(id.bytes)),
                 [&] { return fmt::format("{} ccl bootstrap: rank 0 publishing the unique id", device.str()); });
  } else {
    size_t got = 0;
    ThrowIfError(store->get(store->context, id_key.c_str(), id.bytes, sizeof(id.bytes), &got, timeout_ms), [&] {
      return fmt::format("{} ccl bootstrap: rank {} waiting for rank 0's unique id", device.str(), rank);
    });
    OAR_CHECK(got == sizeof(id.bytes), kInternal, "ccl bootstrap: the unique id under '{}' has {} bytes, not {}",
              id_key, got, sizeof(id.bytes));
  }
  comms_.assign(1, nullptr);
  ThrowIfError(ccl_->comm_init_rank(Ctx(device).ordinal(), nranks, &id, rank, store, &comms_[0]), [&] {
    return fmt::format("{} ccl comm_init_rank (rank {} of {}, across processes)", device.str(), rank, nranks);
  });
}

Communicator::~Communicator() {
  for (size_t r = 0; r < comms_.size(); ++r) {
    if (comms_[r] == nullptr) continue;
    try {
      Ctx(devices_[r]).Synchronize();  // queued collectives still use the communicator
    } catch (const Error&) {
      // The device failed; its error was (or will be) reported where the work was read.
    }
    if (oar_status_t* s = ccl_->comm_destroy(comms_[r])) TakeStatus(s);
  }
}

template <typename Call>
void Communicator::Grouped(const char* what, Call&& call) {
  ThrowIfError(ccl_->group_start(), [&] { return devices_[0].type() + " ccl group_start"; });
  for (int r = 0; r < size(); ++r) {
    oar_status_t* s = call(r);
    if (s != nullptr) {
      if (oar_status_t* e = ccl_->group_end()) TakeStatus(e);
      ThrowIfError(s, [&] { return fmt::format("{} ccl {} (rank {})", devices_[r].str(), what, r); });
    }
  }
  ThrowIfError(ccl_->group_end(), [&] { return fmt::format("{} ccl {}", devices_[0].type(), what); });
}

void Communicator::AllReduce(std::span<const Tensor> tensors, ReduceOp op) {
  Grouped("all_reduce", [&](int r) {
    const Tensor& t = tensors[r];
    return ccl_->all_reduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), Code(t.dtype()), Code(op),
                            comms_[r], Ctx(devices_[r]).stream());
  });
}

void Communicator::Broadcast(std::span<const Tensor> tensors, int root) {
  Grouped("broadcast", [&](int r) {
    const Tensor& t = tensors[r];
    return ccl_->broadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), Code(t.dtype()), root,
                           comms_[r], Ctx(devices_[r]).stream());
  });
}

void Communicator::AllGather(std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  Grouped("all_gather", [&](int r) {
    return ccl_->all_gather(inputs[r].data_ptr(), outputs[r].data_ptr(), static_cast<size_t>(inputs[r].numel()),
                            Code(inputs[r].dtype()), comms_[r], Ctx(devices_[r]).stream());
  });
}

void Communicator::ReduceScatter(std::span<const Tensor> inputs, std::span<const Tensor> outputs, ReduceOp op) {
  Grouped("reduce_scatter", [&](int r) {
    return ccl_->reduce_scatter(inputs[r].data_ptr(), outputs[r].data_ptr(), static_cast<size_t>(outputs[r].numel()),
                                Code(inputs[r].dtype()), Code(op), comms_[r], Ctx(devices_[r]).stream());
  });
}

void Communicator::SendRecv(const Tensor& src, int src_rank, const Tensor& dst, int dst_rank) {
  const auto count = static_cast<size_t>(src.numel());
  ThrowIfError(ccl_->group_start(), [&] { return devices_[0].type() + " ccl group_start"; });
  oar_status_t* s = ccl_->send(src.data_ptr(), count, Code(src.dtype()), dst_rank, comms_[src_rank],
                               Ctx(src.device()).stream());
  if (s == nullptr) {
    s = ccl_->recv(dst.data_ptr(), count, Code(dst.dtype()), src_rank, comms_[dst_rank], Ctx(dst.device()).stream());
  }
  oar_status_t* end = ccl_->group_end();
  if (s != nullptr && end != nullptr) TakeStatus(end);
  ThrowIfError(s != nullptr ? s : end, [&] { return devices_[0].type() + " ccl send/recv"; });
}

void Communicator::Send(const Tensor& t, int peer) {
  OAR_CHECK(size() == 1, kInternal, "runtime::Communicator::Send is for one rank per process");
  ThrowIfError(ccl_->send(t.data_ptr(), static_cast<size_t>(t.numel()), Code(t.dtype()), peer, comms_[0],
                          Ctx(devices_[0]).stream()),
               [&] { return fmt::format("{} ccl send to rank {}", devices_[0].str(), peer); });
}

void Communicator::Recv(const Tensor& t, int peer) {
  OAR_CHECK(size() == 1, kInternal, "runtime::Communicator::Recv is for one rank per process");
  ThrowIfError(ccl_->recv(t.data_ptr(), static_cast<size_t>(t.numel()), Code(t.dtype()), peer, comms_[0],
                          Ctx(devices_[0]).stream()),
               [&] { return fmt::format("{} ccl recv from rank {}", devices_[0].str(), peer); });
}

}  // namespace oar::runtime
