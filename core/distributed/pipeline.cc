// Pipeline schedules and their one-process executor (see pipeline.h).
#include "core/distributed/pipeline.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/distributed/group.h"
#include "core/distributed/process_group.h"
#include "core/ops/ops.h"

namespace oar::distributed {

PipelineSchedule ParsePipelineSchedule(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n == "fthenb" || n == "gpipe") return PipelineSchedule::kFThenB;
  if (n == "1f1b") return PipelineSchedule::k1F1B;
  Throw(ErrorCode::kInvalidArgument, "pipeline schedule: expected 'fthenb' or '1f1b', got '{}'", name);
}

std::string ScheduleName(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kFThenB ? "FThenB" : "1F1B";
}

std::string PipelineAction::ToString() const { return (kind == Kind::kForward ? "F" : "B") + std::to_string(micro); }

std::vector<PipelineAction> StageOrder(PipelineSchedule schedule, int64_t stages, int64_t micro_batches,
                                       int64_t stage) {
  OAR_CHECK_ARG(stages >= 1 && micro_batches >= 1 && stage >= 0 && stage < stages,
                "pipeline: need at least one stage and one micro-batch and a stage in [0, stages); got stage {} of {} "
                "with {} micro-batches",
                stage, stages, micro_batches);
  using K = PipelineAction::Kind;
  std::vector<PipelineAction> order;
  if (schedule == PipelineSchedule::kFThenB) {
    for (int64_t m = 0; m < micro_batches; ++m) order.push_back({K::kForward, m});
    for (int64_t m = 0; m < micro_batches; ++m) order.push_back({K::kBackward, m});
    return order;
  }
  const int64_t warmup = std::min(stages - stage - 1, micro_batches);
  for (int64_t m = 0; m < warmup; ++m) order.push_back({K::kForward, m});
  for (int64_t i = 0; i < micro_batches - warmup; ++i) {
    order.push_back({K::kForward, warmup + i});
    order.push_back({K::kBackward, i});
  }
  for (int64_t m = micro_batches - warmup; m < micro_batches; ++m) order.push_back({K::kBackward, m});
  return order;
}

double PipelineResult::MeanLoss() const {
  OAR_CHECK_ARG(!losses.empty(), "pipeline: no losses (Run has not run)");
  double total = 0;
  for (const Tensor& l : losses) total += l.to(Device("cpu")).item<float>();
  return total / static_cast<double>(losses.size());
}

Pipeline::Pipeline(std::vector<PipelineStage> stages) : stages_(std::move(stages)) {
  OAR_CHECK_ARG(!stages_.empty(), "pipeline: no stages");
  std::vector<Device> all;
  std::unordered_set<Device> seen;
  for (size_t s = 0; s < stages_.size(); ++s) {
    const PipelineStage& st = stages_[s];
    OAR_CHECK_ARG(!st.lanes.empty(), "pipeline: stage {} has no device", s);
    OAR_CHECK_ARG(st.lanes.size() == stages_[0].lanes.size(),
                  "pipeline: every stage needs as many lanes as stage 0 ({}); stage {} has {}", stages_[0].lanes.size(),
                  s, st.lanes.size());
    OAR_CHECK_ARG(static_cast<bool>(st.forward), "pipeline: stage {} has no forward", s);
    for (const Device& d : st.lanes) {
      OAR_CHECK_ARG(seen.insert(d).second, "pipeline: device {} appears twice (stage {}); each lane needs its own",
                    d.str(), s);
      OAR_CHECK_ARG(d.type() == stages_[0].lanes[0].type(),
                    "pipeline: every device must be of one type ({}); stage {} has {}", stages_[0].lanes[0].type(), s,
                    d.str());
      all.push_back(d);
    }
  }
  if (stages_.size() > 1) {
    try {
      group_ = std::make_unique<Group>(all);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kUnimplemented) throw;  // no CCL table: copies through Tensor::to
    }
  }
}

Pipeline::Pipeline(std::vector<PipelineStage> stages, PipelineProcesses where) : stages_(std::move(stages)) {
  OAR_CHECK_ARG(!stages_.empty(), "pipeline: no stages");
  const auto lanes = static_cast<int64_t>(stages_[0].lanes.size());
  for (size_t s = 0; s < stages_.size(); ++s) {
    OAR_CHECK_ARG(static_cast<int64_t>(stages_[s].lanes.size()) == lanes && lanes > 0,
                  "pipeline: every stage needs as many lanes as stage 0 ({}); stage {} has {}", lanes, s,
                  stages_[s].lanes.size());
  }
  OAR_CHECK_ARG(where.stage >= 0 && where.stage < num_stages() && where.lane >= 0 && where.lane < lanes &&
                    static_cast<int64_t>(where.ranks.size()) == num_stages() * lanes,
                "pipeline: process at stage {} lane {} with {} ranks does not fit {} stages of {} lanes", where.stage,
                where.lane, where.ranks.size(), num_stages(), lanes);
  OAR_CHECK_ARG(static_cast<bool>(stages_[static_cast<size_t>(where.stage)].forward),
                "pipeline: stage {} (this process's) has no forward", where.stage);
  processes_ = std::make_unique<PipelineProcesses>(std::move(where));
}

Pipeline::~Pipeline() = default;

PipelineResult Pipeline::RunProcess(PipelineSchedule schedule, int64_t micro_batches, double loss_scale) {
  const int64_t S = num_stages(), L = num_lanes(), M = micro_batches;
  const int64_t s = processes_->stage, l = processes_->lane;
  using K = PipelineAction::Kind;
  ProcessGroup& world = ProcessGroup::World();
  auto rank_of = [&](int64_t stage) { return processes_->ranks[static_cast<size_t>(stage * L + l)]; };
  const Device device = stages_[static_cast<size_t>(s)].lanes[static_cast<size_t>(l)];
  std::vector<Tensor> outs(static_cast<size_t>(M)), ins(static_cast<size_t>(M));
  PipelineResult result;
  result.peak_live.assign(static_cast<size_t>(S), 0);
  if (s + 1 == S) result.losses.resize(static_cast<size_t>(M));
  int64_t live = 0;
  for (const PipelineAction& a : StageOrder(schedule, S, M, s)) {
    const auto m = static_cast<size_t>(a.micro);
    if (a.kind == K::kForward) {
      Tensor in;
      if (s > 0) {
        in = world.Recv(rank_of(s - 1), device);
        in.set_requires_grad(true);
      }
      Tensor out = stages_[static_cast<size_t>(s)].forward(a.micro, l, in);
      OAR_CHECK_ARG(out.defined() && out.device() == device,
                    "pipeline: stage {} lane {} must return its output on {} (micro-batch {})", s, l, device.str(),
                    a.micro);
      if (s + 1 == S) {
        OAR_CHECK_ARG(out.numel() == 1 && out.rank() == 0,
                      "pipeline: the last stage must return the micro-batch's scalar loss, got shape {}",
                      out.shape().ToString());
        result.losses[m] = out.detach();
      } else {
        world.Send(out.detach(), rank_of(s + 1));
        ++result.transfers;
      }
      outs[m] = std::move(out);
      ins[m] = std::move(in);
      result.peak_live[static_cast<size_t>(s)] = std::max(result.peak_live[static_cast<size_t>(s)], ++live);
    } else {
      const Tensor& out = outs[m];
      const Tensor seed = s + 1 == S ? full({}, loss_scale * processes_->seed, out.dtype(), out.device())
                                     : world.Recv(rank_of(s + 1), device);
      if (out.requires_grad()) oar::backward({out}, {seed});
      if (s > 0) {
        const Tensor g = ins[m].grad();
        OAR_CHECK_ARG(g.defined(), "pipeline: stage {}'s output does not depend on its input (micro-batch {})", s,
                      a.micro);
        world.Send(g, rank_of(s - 1));
        ++result.transfers;
      }
      outs[m] = Tensor();  // the micro-batch's activations on this stage are released here
      ins[m] = Tensor();
      --live;
    }
    if (!result.trace.empty()) result.trace += ' ';
    result.trace += "s" + std::to_string(s) + ":" + a.ToString();
  }
  world.WaitSends();
  return result;
}

Tensor Pipeline::Send(const Tensor& t, int64_t from, int64_t to, int64_t lane, PipelineResult& result) {
  NoGradGuard no_grad;
  const Device dst_device = stages_[static_cast<size_t>(to)].lanes[static_cast<size_t>(lane)];
  ++result.transfers;
  if (group_ == nullptr) return t.detach().to(dst_device);
  const Tensor src = t.detach().contiguous();
  Tensor dst = empty(src.shape(), src.dtype(), dst_device);
  const int64_t lanes = num_lanes();
  group_->SendRecv(src, static_cast<int>(from * lanes + lane), dst, static_cast<int>(to * lanes + lane));
  return dst;
}

PipelineResult Pipeline::Run(PipelineSchedule schedule, int64_t micro_batches, double loss_scale) {
  OAR_CHECK_ARG(micro_batches >= 1, "pipeline: need at least one micro-batch, got {}", micro_batches);
  const int64_t S = num_stages(), L = num_lanes(), M = micro_batches;
  if (loss_scale <= 0) loss_scale = 1.0 / static_cast<double>(M);
  if (processes_ != nullptr) return RunProcess(schedule, M, loss_scale);
  using K = PipelineAction::Kind;
  std::vector<std::vector<PipelineAction>> orders;
  for (int64_t s = 0; s < S; ++s) orders.push_back(StageOrder(schedule, S, M, s));
  // Per stage and micro-batch: the graph's outputs and input leaves (one per lane) between forward and
  // backward, the activations received from the previous stage and the gradients from the next.
  struct Slot {
    std::vector<Tensor> out, in, received_act, received_grad;
  };
  std::vector<std::vector<Slot>> slots(static_cast<size_t>(S), std::vector<Slot>(static_cast<size_t>(M)));
  auto slot = [&](int64_t s, int64_t m) -> Slot& { return slots[static_cast<size_t>(s)][static_cast<size_t>(m)]; };
  std::vector<size_t> cursor(static_cast<size_t>(S), 0);
  std::vector<int64_t> live(static_cast<size_t>(S), 0);
  PipelineResult result;
  result.losses.resize(static_cast<size_t>(M * L));
  result.peak_live.assign(static_cast<size_t>(S), 0);
  for (;;) {
    bool progressed = false, done = true;
    // One action per stage per sweep: the stages advance side by side, as they would on their own hosts.
    for (int64_t s = 0; s < S; ++s) {
      const auto& order = orders[static_cast<size_t>(s)];
      size_t& c = cursor[static_cast<size_t>(s)];
      if (c == order.size()) continue;
      done = false;
      const PipelineAction a = order[c];
      Slot& sl = slot(s, a.micro);
      if (a.kind == K::kForward) {
        if (s > 0 && sl.received_act.empty()) continue;  // the previous stage has not sent it yet
        for (int64_t l = 0; l < L; ++l) {
          Tensor in;
          if (s > 0) {
            in = sl.received_act[static_cast<size_t>(l)];
            in.set_requires_grad(true);
          }
          Tensor out = stages_[static_cast<size_t>(s)].forward(a.micro, l, in);
          OAR_CHECK_ARG(out.defined(), "pipeline: stage {}'s forward of micro-batch {} returned no tensor", s, a.micro);
          const Device want = stages_[static_cast<size_t>(s)].lanes[static_cast<size_t>(l)];
          OAR_CHECK_ARG(out.device() == want, "pipeline: stage {} lane {} must return its output on {}, got {}", s, l,
                        want.str(), out.device().str());
          if (s + 1 == S) {
            OAR_CHECK_ARG(out.numel() == 1 && out.rank() == 0,
                          "pipeline: the last stage must return the micro-batch's scalar loss, got shape {}",
                          out.shape().ToString());
            result.losses[static_cast<size_t>(a.micro * L + l)] = out.detach();
          } else {
            slot(s + 1, a.micro).received_act.push_back(Send(out, s, s + 1, l, result));
          }
          sl.out.push_back(std::move(out));
          sl.in.push_back(std::move(in));
        }
        sl.received_act.clear();
        int64_t& n = live[static_cast<size_t>(s)];
        ++n;
        result.peak_live[static_cast<size_t>(s)] = std::max(result.peak_live[static_cast<size_t>(s)], n);
      } else {
        if (s + 1 < S && sl.received_grad.empty()) continue;  // the next stage's backward has not run yet
        for (int64_t l = 0; l < L; ++l) {
          const Tensor& out = sl.out[static_cast<size_t>(l)];
          const Tensor seed =
              s + 1 == S ? full({}, loss_scale, out.dtype(), out.device()) : sl.received_grad[static_cast<size_t>(l)];
          if (out.requires_grad()) oar::backward({out}, {seed});
          if (s > 0) {
            const Tensor g = sl.in[static_cast<size_t>(l)].grad();
            OAR_CHECK_ARG(g.defined(), "pipeline: stage {}'s output does not depend on its input (micro-batch {})", s,
                          a.micro);
            slot(s - 1, a.micro).received_grad.push_back(Send(g, s, s - 1, l, result));
          }
        }
        sl = Slot();  // the micro-batch's activations on this stage are released here
        --live[static_cast<size_t>(s)];
      }
      if (!result.trace.empty()) result.trace += ' ';
      result.trace += "s" + std::to_string(s) + ":" + a.ToString();
      ++c;
      progressed = true;
    }
    if (done) break;
    OAR_CHECK(progressed, kInternal, "pipeline: the {} schedule of {} stages and {} micro-batches is stuck after {}",
              ScheduleName(schedule), S, M, result.trace);
  }
  return result;
}

}  // namespace oar::distributed
