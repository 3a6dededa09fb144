#include "core/scheduler/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <bit>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "core/base/error.h"
#include "core/ir/dialect.h"
#include "core/ir/op_dialect.h"
#include "core/ir/text.h"
#include "core/ir/verifier.h"
#include "core/ops/ops.h"
#include "core/ops/output_allocator.h"
#include "core/runtime/copy.h"
#include "core/runtime/profiler.h"
#include "core/runtime/runtime.h"
#include "core/runtime/stream.h"
#include "core/scheduler/memory_plan.h"
#include "core/scheduler/op_runner.h"
#include "core/scheduler/planned_launch.h"
#include "core/ops/trace.h"
#include "core/tensor/autograd_meta.h"

namespace oar::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

enum class Kind {
  kKernel,   // an op schema run through ops::Run (results through the output allocator)
  kCompiled, // an op a registered OpCompiler made runnable (cinn.group): run like a kernel
  kSpecial,  // views, clone/copy, slice_scatter: Tensor methods, as the interpreter runs them
  kTransfer, // kernel.transfer: bytes to another device on a copy stream
  kInput,    // builtin.data: checked, moved to the run's device when it is elsewhere
  kIf,
  kWhile,
};

struct CBlock;

struct Instr {
  Kind kind = Kind::kKernel;
  std::string name;   // op name
  std::string where;  // ir::DescribeOp: name, position, index
  const ops::OpSchema* schema = nullptr;
  ops::AttrValues attrs;
  std::shared_ptr<const CompiledOp> compiled;  // kCompiled
  Device device;      // where it runs; transfers: the destination
  Device from;        // transfers: the source
  int stream = -1;    // index of the run's stream (2 per device: compute, copy); -1: host (control flow)
  std::vector<int> in, out;  // value slots
  int inplace = -1;          // operand whose buffer result 0 is written over
  std::vector<int> deps;     // earlier instructions of the same block this one must follow (static)
  std::vector<std::unique_ptr<CBlock>> regions;
  std::vector<int> release;  // slots whose last use in this block is here
  std::vector<char> record_in;  // per operand: made on another stream (the allocator is told of this use)
  std::vector<char> elementwise_in;  // per operand of an elementwise kernel (results of one type): it has that type
  bool pure = true;          // the op's `pure` trait: false keeps program order with other such ops
  int global = 0;            // index over every block (events, profiles)
  // kInput
  int input_index = -1;
  std::string input_name, input_type;
  DType input_dtype = DType::kFloat32;
  std::vector<int64_t> input_dims;
};

// Which instructions wait for which, per block.
struct Schedule {
  struct Wait {
    int producer;       // instruction index in the block
    bool same_device;   // a device-side wait (stream_wait_event); else the host waits for the event
  };
  std::vector<std::vector<Wait>> waits;  // per instruction
  std::vector<char> record;              // per instruction: record its event after issuing
  size_t edges = 0;
};

struct CBlock {
  std::vector<Instr> instrs;
  std::vector<int> args;    // block argument slots
  std::vector<int> yields;  // terminator operand slots
  Schedule schedule;        // from the static dependencies (regions always use it)
};

// A buffer the top-level block owns: the bytes one instruction's result gets, shared by its views and by
// results written over it in place.
struct Buffer {
  int device = 0;            // device slot
  int def = 0;               // instruction writing it first
  int last = 0;              // last instruction using any alias
  int64_t static_bytes = -1; // from the IR type, -1 when symbolic
  bool plannable = true;     // not escaping, not used inside a region
  std::vector<int> users;    // instructions reading or writing any alias (sorted, unique)
  std::string name;
  int inplace_of = -1;       // merged into this buffer by an in-place result (for summaries)
  int donor = -1;            // program input whose bytes this (output) buffer may take (ExecutorOptions::donate)
  int donor_buffer = -1;     // that input's buffer
};

struct Plan {
  std::vector<int64_t> offsets;         // per buffer, -1: not in the arena
  std::vector<uint64_t> bytes;          // per buffer
  std::vector<uint64_t> arena_bytes;    // per device slot
  Schedule schedule;                    // the top-level block's, with the memory-reuse dependencies
  std::vector<MemoryPlanSummary> summaries;
  std::unique_ptr<PlannedInstructions> planned;  // per top-level instruction: its launch plan (planned_launch.h)
};

struct DeviceSlot {
  Device device;
  bool host_accessible = false;
  uint64_t alignment = 256;
  bool simulated = false;  // a time model with a clock per stream (the simulators' `simulated` attribute)
};

struct RunContext {
  std::vector<std::unique_ptr<runtime::Stream>> streams;  // destroyed last (synchronised first)
  std::vector<std::unique_ptr<runtime::Event>> events;    // per global instruction, made on first use
  std::vector<std::unique_ptr<runtime::Event>> start_events;  // per device: the default stream at run start
  std::vector<std::unique_ptr<runtime::Event>> align_events;  // per stream: where the previous run left it
  std::vector<std::shared_ptr<Storage>> arenas;           // per device slot
  // Per stream: work was enqueued on it in the current run (Begin clears it). A stream that has none yet
  // (the copy stream when every input is already on the device) records no events and is waited for by no
  // one: everything issued on it so far did nothing.
  std::vector<char> busy;
  // Per buffer: the last Tensor made over its arena bytes (Executor::Impl::Output), handed out again while
  // the arena, shape and dtype are the same: a planned result then costs no Storage, TensorImpl or Dims
  // allocation (about 600 instructions per instruction at batch 1, docs/PERFORMANCE.md).
  std::vector<Tensor> arena_tensors;
  ~RunContext() {
    for (auto& s : streams) {
      try {
        if (s) s->Synchronize();
      } catch (const std::exception&) {  // reported by the run that failed
      }
    }
    arena_tensors.clear();
    arenas.clear();
    events.clear();
    start_events.clear();
    align_events.clear();
    streams.clear();
  }
};

uint64_t NBytes(const Dims& shape, DType dtype) {
  return static_cast<uint64_t>(shape.Product()) * DTypeSize(dtype);
}

}  // namespace

struct Executor::Impl {
  Device device;
  ExecutorOptions options;
  std::vector<DeviceSlot> devices;
  CBlock top;
  int num_slots = 0;
  int num_global = 0;
  std::vector<Tensor> presets;        // per slot: parameters and constants (on their device)
  std::vector<int> buffer_of;         // per slot: owned buffer, -1 for none (top level only)
  std::vector<Buffer> buffers;
  std::vector<std::vector<int>> out_buffer;  // per top-level instr: buffer of each result (-1 none)
  std::vector<std::vector<int>> aliases;     // per buffer: the slots viewing it
  std::vector<int64_t> slot_bytes;           // per slot: bytes from a static result type, -1 otherwise
  std::vector<uint64_t> static_bytes;        // per buffer, when every size is static
  std::vector<const Instr*> by_global;
  bool static_shapes = true;
  std::map<int64_t, std::string> symbol_names;

  mutable std::mutex mutex;  // plans, contexts, stats
  mutable std::map<std::string, std::shared_ptr<const Plan>> plans;
  // The plan of the last run and its inputs' dtypes, shapes and placement: a run with the same inputs (the
  // common case: a server's repeated shapes) takes it without building its signature string.
  // What of an input a plan depends on: its dtype, its shape, and whether it is already on the program's device
  // (else it is copied in, and its bytes are planned). The one definition behind the plans' signature string and
  // the last-plan check.
  struct InputKey {
    bool defined = false, here = false;
    DType dtype = DType::kInvalid;
    Dims shape;
    static InputKey Of(const Tensor& t, const Device& device) {
      if (!t.defined()) return {};
      return {true, t.device() == device, t.dtype(), t.shape()};
    }
    bool Matches(const Tensor& t, const Device& device) const {  // == Of(t, device), without copying the shape
      if (t.defined() != defined) return false;
      return !defined || (t.dtype() == dtype && (t.device() == device) == here && t.shape() == shape);
    }
    void AppendTo(std::string* sig) const {
      *sig += defined ? std::string(DTypeName(dtype)) + shape.ToString() : "undefined";
      if (defined && !here) *sig += '@';
      *sig += ';';
    }
  };
  mutable std::vector<InputKey> last_inputs;
  mutable std::shared_ptr<const Plan> last_plan;
  mutable std::vector<std::unique_ptr<RunContext>> free_contexts;
  mutable ExecutorStats stats;
  mutable std::mutex first_run_mutex;
  mutable std::atomic<bool> warmed{false};

  // ---- compile ----------------------------------------------------------------------------------------
  std::unordered_map<const void*, int> slot_of;
  static inline thread_local std::string scratch_name_;

  int DeviceSlotOf(Device d) {
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].device == d) return static_cast<int>(i);
    }
    runtime::DeviceContext& ctx = runtime::Runtime::Get().Context(d);
    DeviceSlot s{d, ctx.host_accessible(), 256};
    if (const runtime::AttrValue* a = ctx.FindAttribute("alignment"); a != nullptr && a->i > 0) {
      s.alignment = std::max<uint64_t>(256, std::bit_ceil(static_cast<uint64_t>(a->i)));
    }
    s.simulated = ctx.FindAttribute("simulated") != nullptr;
    devices.push_back(s);
    return static_cast<int>(devices.size()) - 1;
  }
  int ComputeStream(Device d) { return 2 * DeviceSlotOf(d); }
  int CopyStream(Device d) { return 2 * DeviceSlotOf(d) + 1; }

  int NewSlot(ir::Value v) {
    const int s = num_slots++;
    slot_of[v.impl()] = s;
    presets.emplace_back();
    slot_bytes.push_back(v.type().IsTensor() && v.type().HasStaticShape()
                             ? static_cast<int64_t>(NBytes(Dims(v.type().dims()), v.type().dtype()))
                             : -1);
    return s;
  }
  int Slot(ir::Value v, const ir::Operation& user) {
    auto it = slot_of.find(v.impl());
    OAR_CHECK(it != slot_of.end(), kInternal, "scheduler: {} uses a value defined nowhere it can see",
              ir::DescribeOp(user));
    return it->second;
  }

  void Compile(const ir::Program& program) {
    ir::Verify(program);
    DeviceSlotOf(device);
    CompileBlock(program, program.block(), &top);
    BuildBuffers();
    BuildDonations();
    BuildSchedule(&top, nullptr);
    static_bytes.assign(buffers.size(), 0);
    for (size_t b = 0; b < buffers.size(); ++b) {
      if (buffers[b].static_bytes < 0) static_shapes = false;
      static_bytes[b] = static_cast<uint64_t>(std::max<int64_t>(buffers[b].static_bytes, 0));
    }
    by_global.assign(static_cast<size_t>(num_global), nullptr);
    IndexGlobals(top);
    for (const DeviceSlot& d : devices) runtime::Synchronize(d.device);  // parameters and constants are there
  }

  void IndexGlobals(const CBlock& b) {
    for (const Instr& in : b.instrs) {
      by_global[in.global] = &in;
      for (const auto& r : in.regions) IndexGlobals(*r);
    }
  }

  void CompileBlock(const ir::Program& program, const ir::Block& block, CBlock* out) {
    for (size_t i = 0; i < block.num_arguments(); ++i) out->args.push_back(NewSlot(block.argument(i)));
    for (ir::Operation* op : block) CompileOp(program, *op, out);
  }

  void CompileOp(const ir::Program& program, const ir::Operation& op, CBlock* block) {
    const std::string_view name = op.name();
    if (name == "builtin.output" || name == "cf.yield" || name == "cf.condition") {
      for (uint32_t i = 0; i < op.num_operands(); ++i) block->yields.push_back(Slot(op.operand(i), op));
      return;
    }
    if (name == "builtin.parameter") return Preset(op, ParameterValue(program, op, device, "scheduler: "));
    if (name == "builtin.constant") return Preset(op, ConstantValue(op, device));
    if (name == "kernel.format_cast") {  // formats are the runtime's: the value passes through
      slot_of[op.result(0).impl()] = Slot(op.operand(0), op);
      return;
    }
    if (FoldPresetView(op) || FoldPresetConstant(op)) return;
    Instr in;
    in.name = std::string(name);
    in.where = ir::DescribeOp(op);
    in.pure = op.info().Has(ir::kPure);
    in.global = num_global++;
    for (uint32_t i = 0; i < op.num_operands(); ++i) in.in.push_back(Slot(op.operand(i), op));
    if (name == "builtin.data") {
      in.kind = Kind::kInput;
      in.device = device;
      in.stream = CopyStream(device);
      in.input_index = op.attr("index").AsInt();
      in.input_name = op.attr("name").AsString();
      const ir::Type t = op.result(0).type();
      in.input_type = ir::PrintType(program.context(), t);
      in.input_dtype = t.dtype();
      in.input_dims.assign(t.dims().begin(), t.dims().end());
      for (int64_t d : in.input_dims) {
        if (ir::SymDim::IsSymbol(d)) symbol_names[d] = program.context().SymbolName(d);
      }
    } else if (name == "cf.if" || name == "cf.while") {
      in.kind = name == "cf.if" ? Kind::kIf : Kind::kWhile;
      in.device = device;
      for (uint32_t r = 0; r < op.num_regions(); ++r) {
        auto region = std::make_unique<CBlock>();
        CompileBlock(program, op.region(r).front(), region.get());
        BuildSchedule(region.get(), nullptr);
        in.regions.push_back(std::move(region));
      }
    } else if (name == "kernel.transfer") {
      in.kind = Kind::kTransfer;
      in.from = Device(op.attr("from").AsString());
      in.device = Device(op.attr("to").AsString());
      const bool from_host = devices[DeviceSlotOf(in.from)].host_accessible;
      const bool to_host = devices[DeviceSlotOf(in.device)].host_accessible;
      // The copy runs on the copy stream of the device whose API moves the bytes: the accelerator's side.
      in.stream = from_host && !to_host ? CopyStream(in.device) : CopyStream(in.from);
    } else if (OpCompiler compile = FindOpCompiler(name)) {
      in.kind = Kind::kCompiled;
      in.device = device;
      in.stream = ComputeStream(device);
      in.compiled = compile(op, device);
    } else {
      const ops::OpSchema* s = op.info().schema;
      OAR_CHECK(s != nullptr, kUnimplemented, "scheduler: {}: no way to run '{}'", in.where, name);
      const bool kernel = op.info().dialect->name() == "kernel";
      in.schema = s;
      in.kind = IsTensorMethodOp(s->op) ? Kind::kSpecial : Kind::kKernel;
      in.device = kernel ? Device(op.attr("device").AsString()) : device;
      in.stream = ComputeStream(in.device);
      in.attrs = ir::SchemaAttrValues(*s, op.attributes());
      // (Several results, as fused_adam's, count when they all have one type: each reads its operands at
      // its own index, so any one of them may be written over an operand of that type.)
      bool one_type = op.num_results() >= 1;
      for (uint32_t r = 1; r < op.num_results(); ++r) one_type = one_type && op.result(r).type() == op.result(0).type();
      if (in.kind == Kind::kKernel && op.info().Has(ir::kElementwise) && one_type) {
        for (uint32_t i = 0; i < op.num_operands(); ++i) {
          in.elementwise_in.push_back(op.operand(i).type() == op.result(0).type() ? 1 : 0);
        }
      }
      if (options.inplace && in.kind == Kind::kKernel) {
        if (ir::Attribute a = op.attr("oar.inplace"); a && a.kind() == ir::AttrKind::kInt) {
          const int64_t k = a.AsInt();
          if (k >= 0 && k < static_cast<int64_t>(op.num_operands()) && op.num_results() == 1 &&
              op.operand(static_cast<uint32_t>(k)).type() == op.result(0).type()) {
            in.inplace = static_cast<int>(k);
          }
        }
      }
    }
    for (uint32_t i = 0; i < op.num_results(); ++i) in.out.push_back(NewSlot(op.result(i)));
    block->instrs.push_back(std::move(in));
  }

  void Preset(const ir::Operation& op, Tensor t) { presets[NewSlot(op.result(0))] = std::move(t); }

  // A view (permute, view, slice, ...) of a parameter or constant is the same view on every run: it is made
  // once here and becomes a preset itself (a transposed weight is no instruction at all). Only a result over
  // the operand's own bytes on the op's device is folded, so every kernel reading it sees what it saw when
  // the view ran as an instruction.
  bool FoldPresetView(const ir::Operation& op) {
    const ops::OpSchema* s = op.info().schema;
    if (s == nullptr || !IsPlannableView(s->op) || op.num_operands() != 1 || op.num_results() != 1) return false;
    auto it = slot_of.find(op.operand(0).impl());
    if (it == slot_of.end()) return false;
    const Tensor& x = presets[static_cast<size_t>(it->second)];
    const bool kernel = op.info().dialect->name() == "kernel";
    if (!x.defined() || x.device() != (kernel ? Device(op.attr("device").AsString()) : device)) return false;
    std::vector<Tensor> out =
        RunTensorMethodOp(*s, std::span<const Tensor>(&x, 1), ir::SchemaAttrValues(*s, op.attributes()));
    if (out.size() != 1 || !out[0].defined() || out[0].storage() != x.storage()) return false;
    Preset(op, std::move(out[0]));
    return true;
  }

  // A fill of a static shape of at most kPresetFillElements elements (the scalars eager code makes with full(),
  // which a capture records as fills) and a transfer of a preset (a constant a cpu fallback reads) make the same
  // value on every run: made once here with the same kernel or copy, as constants are, rather than a launch
  // per run. Not a value its block yields (the caller gets tensors of its own) or one an op is marked to write
  // over; a preset is no buffer of the run, so nothing else is written over it in place.
  static constexpr int64_t kPresetFillElements = 4096;
  bool FoldPresetConstant(const ir::Operation& op) {
    const std::string_view name = op.name();
    if (!options.preset_fills || (name != "kernel.fill" && name != "kernel.transfer") || op.num_results() != 1) {
      return false;
    }
    for (const ir::OpOperand* u = op.result(0).first_use(); u != nullptr; u = u->next_use()) {
      const std::string_view user = u->owner()->name();
      if (user == "builtin.output" || user == "cf.yield" || user == "cf.condition") return false;
      // Marked to be written over (the inplace pass): left a per-run value (inside a region the mark holds).
      if (ir::Attribute a = u->owner()->attr("oar.inplace");
          a && a.kind() == ir::AttrKind::kInt && a.AsInt() == static_cast<int64_t>(u->index())) {
        return false;
      }
    }
    if (name == "kernel.fill") {
      const ir::Type t = op.result(0).type();
      const ir::Attribute value = op.attr("value");
      if (!t.IsTensor() || !t.HasStaticShape() || Dims(t.dims()).Product() > kPresetFillElements || !value ||
          value.kind() != ir::AttrKind::kFloat) {
        return false;
      }
      Preset(op, full(Dims(t.dims()), value.AsFloat(), t.dtype(), Device(op.attr("device").AsString())));
      return true;
    }
    auto it = slot_of.find(op.operand(0).impl());
    if (it == slot_of.end()) return false;
    const Tensor& x = presets[static_cast<size_t>(it->second)];
    if (!x.defined()) return false;
    Preset(op, x.to(Device(op.attr("to").AsString())));
    return true;
  }

  // Slots used anywhere inside `b` (its instructions' operands and yields, nested regions included).
  static void UsedIn(const CBlock& b, std::vector<int>* used) {
    for (const Instr& in : b.instrs) {
      used->insert(used->end(), in.in.begin(), in.in.end());
      for (const auto& r : in.regions) UsedIn(*r, used);
    }
    used->insert(used->end(), b.yields.begin(), b.yields.end());
  }

  // Buffers of the top-level block, in-place decisions, last uses.
  void BuildBuffers() {
    buffer_of.assign(static_cast<size_t>(num_slots), -1);
    out_buffer.assign(top.instrs.size(), {});
    for (const InputOutputAlias& a : options.donate) {
      if (a.output < top.yields.size()) donated_to[top.yields[a.output]].push_back(a.input);
    }
    for (const Instr& in : top.instrs) {
      if (in.kind == Kind::kInput) input_at[in.out[0]] = static_cast<size_t>(in.input_index);
    }
    // The last top-level instruction using each slot (directly or inside its regions); outputs never die.
    last_use.assign(static_cast<size_t>(num_slots), -1);
    for (size_t i = 0; i < top.instrs.size(); ++i) {
      std::vector<int> used(top.instrs[i].in);
      for (const auto& r : top.instrs[i].regions) UsedIn(*r, &used);
      for (int s : used) last_use[static_cast<size_t>(s)] = static_cast<int>(i);
    }
    for (int s : top.yields) last_use[static_cast<size_t>(s)] = INT32_MAX;
    for (size_t i = 0; i < top.instrs.size(); ++i) {
      Instr& in = top.instrs[i];
      out_buffer[i].assign(in.out.size(), -1);
      const bool views = in.kind == Kind::kSpecial && in.schema->op != ops::Op::kClone &&
                         in.schema->op != ops::Op::kCopy && in.schema->op != ops::Op::kSliceScatter;
      for (size_t k = 0; k < in.out.size(); ++k) {
        const int slot = in.out[k];
        if (views) {
          buffer_of[slot] = buffer_of[in.in[0]];  // the result views its input's bytes (or copies: then fresh)
          if (buffer_of[slot] >= 0) aliases[buffer_of[slot]].push_back(slot);
          continue;
        }
        // clone, copy and slice_scatter make fresh bytes (Kind::kSpecial, not a view): planned like a kernel's.
        if (in.kind == Kind::kIf || in.kind == Kind::kWhile) continue;
        // An output that may take a donated input it reads elementwise takes that input's bytes rather than
        // another operand's (a state update p - u goes into p, not into u).
        if (k == 0 && in.inplace >= 0 && TakesDonatedOperand(in, slot)) in.inplace = -1;
        if (k == 0 && in.inplace >= 0) {
          const int operand = in.in[static_cast<size_t>(in.inplace)];
          const int b = buffer_of[operand];
          if (b >= 0 && InplaceAllowed(b, static_cast<int>(i), operand)) {
            buffer_of[slot] = b;
            aliases[b].push_back(slot);
            buffers[b].inplace_of = 1;
            continue;
          }
          in.inplace = -1;  // the mark does not hold here (the operand is used later, or not the program's own)
        }
        Buffer buf;
        buf.device = DeviceSlotOf(in.device);
        buf.def = static_cast<int>(i);
        buf.name = in.where;
        buf.static_bytes = slot_bytes[static_cast<size_t>(slot)];
        buffers.push_back(buf);
        aliases.push_back({slot});
        buffer_of[slot] = static_cast<int>(buffers.size()) - 1;
        out_buffer[i][k] = buffer_of[slot];
      }
      // Users.
      for (int s : in.in) {
        if (buffer_of[s] >= 0) buffers[buffer_of[s]].users.push_back(static_cast<int>(i));
      }
      std::vector<int> inner;
      for (const auto& r : in.regions) UsedIn(*r, &inner);
      for (int s : inner) {
        if (s < num_slots && buffer_of[s] >= 0) {
          buffers[buffer_of[s]].users.push_back(static_cast<int>(i));
          buffers[buffer_of[s]].plannable = false;
        }
      }
      for (int s : in.out) {
        if (buffer_of[s] >= 0) buffers[buffer_of[s]].users.push_back(static_cast<int>(i));
      }
    }
    for (int s : top.yields) {
      if (buffer_of[s] >= 0) buffers[buffer_of[s]].plannable = false;  // escapes as an output
    }
    for (Buffer& b : buffers) {
      std::sort(b.users.begin(), b.users.end());
      b.users.erase(std::unique(b.users.begin(), b.users.end()), b.users.end());
      b.last = b.users.empty() ? b.def : b.users.back();
    }
    ComputeReleases(&top);
  }

  // An in-place write over buffer `b` (via `operand`) at instruction `at` is allowed when the buffer is one
  // the program owns (a kernel or transfer result, not an input, parameter, constant or block argument) and
  // nothing uses any view of it after `at`.
  std::vector<int> last_use;  // per slot (top level), INT32_MAX for outputs

  bool InplaceAllowed(int b, int at, int operand) const {
    const Buffer& buf = buffers[b];
    if (top.instrs[buf.def].kind == Kind::kInput) return false;
    for (int s : aliases[b]) {
      if (last_use[static_cast<size_t>(s)] > at) return false;
      // Another operand of the same instruction reading the same bytes (x + view(x)) is not elementwise-safe.
      const Instr& in = top.instrs[at];
      int reads = 0;
      for (int x : in.in) reads += x == s ? 1 : 0;
      if (s != operand ? reads > 0 : reads > 1) return false;
    }
    return true;
  }

  // Instruction `in` makes output slot `slot`, which options.donate lets take an input `in` reads as an
  // elementwise operand of the result's type.
  std::unordered_map<int, std::vector<size_t>> donated_to;  // output slot -> inputs it may take (options.donate)
  std::unordered_map<int, size_t> input_at;                  // builtin.data slot -> program input index

  bool TakesDonatedOperand(const Instr& in, int slot) const {
    auto it = donated_to.find(slot);
    if (in.elementwise_in.empty() || it == donated_to.end()) return false;
    for (size_t k = 0; k < in.in.size(); ++k) {
      auto x = input_at.find(in.in[k]);
      if (x == input_at.end() || in.elementwise_in[k] == 0) continue;
      if (std::find(it->second.begin(), it->second.end(), x->second) != it->second.end()) return true;
    }
    return false;
  }

  // The aliases of options.donate the program allows (ExecutorOptions::donate says when).
  std::vector<InputOutputAlias> donations;

  void BuildDonations() {
    std::map<size_t, const Instr*> input_of;  // program input index -> its builtin.data (top level)
    for (const Instr& in : top.instrs) {
      if (in.kind == Kind::kInput) input_of.emplace(static_cast<size_t>(in.input_index), &in);
    }
    std::vector<char> taken(input_of.empty() ? 0 : input_of.rbegin()->first + 1, 0);
    for (const InputOutputAlias& a : options.donate) {
      OAR_CHECK_ARG(a.output < top.yields.size() && input_of.count(a.input) > 0,
                    "scheduler: donate {{output {}, input {}}}: the program has {} outputs and {} inputs", a.output,
                    a.input, top.yields.size(), input_of.size());
      const Instr& input = *input_of.at(a.input);
      const int b = buffer_of[static_cast<size_t>(top.yields[a.output])];
      const int bi = buffer_of[static_cast<size_t>(input.out[0])];
      if (b < 0 || bi < 0 || buffers[b].donor >= 0 || taken[a.input]) continue;
      const Buffer& out = buffers[b];
      const Buffer& in = buffers[bi];
      const Instr& def = top.instrs[static_cast<size_t>(out.def)];
      if (def.kind != Kind::kKernel && def.kind != Kind::kCompiled && def.kind != Kind::kTransfer) continue;
      if (!in.plannable || in.device != out.device) continue;  // the input escapes, or is read inside a region
      if (out.static_bytes >= 0 && in.static_bytes >= 0 && out.static_bytes != in.static_bytes) continue;
      bool ok = true;
      for (int u : in.users) {
        if (u < out.def) continue;
        if (u > out.def) {
          ok = false;
          break;
        }
        // The producer reads the input: only as one elementwise operand of the result's type (in place).
        int reads = 0, at = -1;
        for (size_t k = 0; k < def.in.size(); ++k) {
          if (buffer_of[static_cast<size_t>(def.in[k])] == bi) {
            ++reads;
            at = static_cast<int>(k);
          }
        }
        ok = def.kind == Kind::kKernel && reads == 1 && def.in[static_cast<size_t>(at)] == input.out[0] &&
             !def.elementwise_in.empty() && def.elementwise_in[static_cast<size_t>(at)] != 0 &&
             std::find(out_buffer[static_cast<size_t>(out.def)].begin(), out_buffer[static_cast<size_t>(out.def)].end(),
                       b) != out_buffer[static_cast<size_t>(out.def)].end();
      }
      if (!ok) continue;
      buffers[b].donor = static_cast<int>(a.input);
      buffers[b].donor_buffer = bi;
      taken[a.input] = 1;
      donations.push_back(a);
    }
  }

  // Free each slot defined in `b` (or its arguments) after its last use in `b`.
  void ComputeReleases(CBlock* b) {
    std::unordered_map<int, int> last;  // slot -> instruction
    std::vector<int> defined(b->args);
    for (size_t i = 0; i < b->instrs.size(); ++i) {
      Instr& in = b->instrs[i];
      for (int s : in.out) {
        defined.push_back(s);
        last[s] = static_cast<int>(i);
      }
      std::vector<int> used(in.in);
      for (auto& r : in.regions) {
        UsedIn(*r, &used);
        ComputeReleases(r.get());
      }
      for (int s : used) last[s] = static_cast<int>(i);
    }
    for (int s : b->yields) last[s] = INT32_MAX;  // the block's results stay
    for (int s : defined) {
      auto it = last.find(s);
      if (it == last.end() || it->second == INT32_MAX) continue;
      // An async copy's source and destination are held until the run ends (run state): releasing here drops
      // only the executor's own reference.
      b->instrs[static_cast<size_t>(it->second)].release.push_back(s);
    }
  }

  // Dependencies and waits of `b`; `plan` adds the memory-reuse dependencies (top level).
  void BuildSchedule(CBlock* b, const Plan* plan, Schedule* out = nullptr) {
    const size_t n = b->instrs.size();
    std::vector<std::vector<int>> deps(n);
    std::unordered_map<int, int> producer;  // slot -> instruction in this block
    std::map<std::pair<int, int>, int> producer_at;  // (instruction, operand slot) -> the producer's stream
    int last_effect = -1;
    for (size_t i = 0; i < n; ++i) {
      Instr& in = b->instrs[i];
      std::vector<int> used(in.in);
      for (const auto& r : in.regions) UsedIn(*r, &used);
      for (int s : used) {
        if (auto it = producer.find(s); it != producer.end()) deps[i].push_back(it->second);
      }
      for (int s : in.in) {
        auto it = producer.find(s);
        // From outside the block (a region's operand) or a preset/input: -2 (presets never die in a run).
        producer_at[{static_cast<int>(i), s}] =
            it != producer.end() ? b->instrs[static_cast<size_t>(it->second)].stream
                                 : (presets[static_cast<size_t>(s)].defined() || b == &top ? in.stream : -2);
      }
      // Control flow is a barrier (the run's streams are synchronised around it): later instructions follow it.
      if (in.kind == Kind::kIf || in.kind == Kind::kWhile) {
        for (size_t j = 0; j < i; ++j) deps[i].push_back(static_cast<int>(j));
      }
      if (last_effect >= 0) deps[i].push_back(last_effect);
      const bool effect = in.kind == Kind::kIf || in.kind == Kind::kWhile ||
                          ((in.kind == Kind::kKernel || in.kind == Kind::kCompiled || in.kind == Kind::kSpecial) && !in.pure);
      if (effect) last_effect = static_cast<int>(i);
      for (int s : in.out) producer[s] = static_cast<int>(i);
    }
    if (b == &top) {
      // A write over a buffer follows everything that reads the bytes before (in-place results).
      for (size_t i = 0; i < n; ++i) {
        const Instr& in = b->instrs[i];
        if (in.inplace < 0) continue;
        const int buf = buffer_of[in.in[static_cast<size_t>(in.inplace)]];
        for (int u : buffers[buf].users) {
          if (u < static_cast<int>(i)) deps[i].push_back(u);
        }
      }
      // An output written into a donated input's bytes follows every reader of the input.
      for (const Buffer& buf : buffers) {
        if (buf.donor < 0) continue;
        for (int u : buffers[static_cast<size_t>(buf.donor_buffer)].users) {
          if (u < buf.def) deps[static_cast<size_t>(buf.def)].push_back(u);
        }
      }
      if (plan != nullptr) {
        // A buffer placed over bytes an earlier buffer used follows every user of that one.
        for (size_t x = 0; x < buffers.size(); ++x) {
          if (plan->offsets[x] < 0) continue;
          for (size_t y = 0; y < buffers.size(); ++y) {
            if (x == y || plan->offsets[y] < 0 || buffers[x].device != buffers[y].device) continue;
            if (buffers[y].last >= buffers[x].def) continue;  // y must end before x starts
            const int64_t xo = plan->offsets[x], yo = plan->offsets[y];
            const int64_t xe = xo + static_cast<int64_t>(plan->bytes[x]), ye = yo + static_cast<int64_t>(plan->bytes[y]);
            if (xo < ye && yo < xe) {
              for (int u : buffers[y].users) deps[buffers[x].def].push_back(u);
            }
          }
        }
      }
    }
    Schedule s;
    s.waits.assign(n, {});
    s.record.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const Instr& in = b->instrs[i];
      // Per producer stream only the latest producer needs a wait (stream order covers the earlier ones).
      std::map<int, int> latest;
      for (int d : deps[i]) {
        const int st = b->instrs[d].stream;
        if (st == in.stream || st < 0 || in.stream < 0) continue;  // same stream, or a barrier
        auto [it, fresh] = latest.emplace(st, d);
        if (!fresh) it->second = std::max(it->second, d);
      }
      for (const auto& [st, d] : latest) {
        s.waits[i].push_back({d, st / 2 == in.stream / 2});
        s.record[d] = 1;
        ++s.edges;
      }
    }
    if (out == nullptr) {  // compile time only: a plan made while other runs read the instructions changes none
      for (size_t i = 0; i < n; ++i) {
        Instr& in = b->instrs[i];
        in.deps = deps[i];
        in.record_in.assign(in.in.size(), 0);
        for (size_t k = 0; k < in.in.size(); ++k) {
          auto it = producer_at.find({static_cast<int>(i), in.in[k]});
          in.record_in[k] = it == producer_at.end() || it->second != in.stream ? 1 : 0;
        }
      }
    }
    if (out != nullptr) {
      *out = std::move(s);
    } else {
      b->schedule = std::move(s);
    }
  }

  // ---- plans --------------------------------------------------------------------------------------------
  // `inputs`: the run's; an input already on the run's device passes through and takes no arena bytes (the
  // signature tells such runs from runs whose input is copied in).
  std::shared_ptr<const Plan> MakePlan(const std::vector<uint64_t>& bytes, std::span<const Tensor> inputs) const {
    auto plan = std::make_shared<Plan>();
    plan->planned = std::make_unique<PlannedInstructions>(top.instrs.size());
    plan->bytes = bytes;
    plan->offsets.assign(buffers.size(), -1);
    plan->arena_bytes.assign(devices.size(), 0);
    for (size_t d = 0; d < devices.size(); ++d) {
      std::vector<BufferRequest> requests;
      std::vector<size_t> ids;
      MemoryPlanSummary summary;
      summary.device = devices[d].device.str();
      for (size_t b = 0; b < buffers.size(); ++b) {
        if (buffers[b].device != static_cast<int>(d) || !buffers[b].plannable || !options.plan_memory) continue;
        if (bytes[b] == 0 || PassesThrough(buffers[b], inputs)) continue;
        requests.push_back({bytes[b], buffers[b].def, buffers[b].last, buffers[b].name});
        ids.push_back(b);
        summary.inplace += buffers[b].inplace_of > 0 ? 1 : 0;
      }
      if (requests.empty()) continue;
      const ArenaPlan arena = PlanArena(requests, devices[d].alignment);
      CheckArenaPlan(requests, arena, devices[d].alignment);
      for (size_t k = 0; k < ids.size(); ++k) plan->offsets[ids[k]] = static_cast<int64_t>(arena.offsets[k]);
      plan->arena_bytes[d] = arena.arena_bytes;
      summary.arena_bytes = arena.arena_bytes;
      summary.unplanned_bytes = UnplannedBytes(requests, devices[d].alignment);
      summary.buffers = requests.size();
      plan->summaries.push_back(summary);
    }
    // With an output schedule BuildSchedule reads the instructions only (runs may be reading them too).
    const_cast<Impl*>(this)->BuildSchedule(const_cast<CBlock*>(&top), plan.get(), &plan->schedule);
    return plan;
  }


  bool PassesThrough(const Buffer& b, std::span<const Tensor> inputs) const {
    const Instr& in = top.instrs[static_cast<size_t>(b.def)];
    if (in.kind != Kind::kInput || in.input_index < 0 || static_cast<size_t>(in.input_index) >= inputs.size()) {
      return false;
    }
    const Tensor& t = inputs[static_cast<size_t>(in.input_index)];
    return t.defined() && t.device() == device;
  }

  // ---- run ----------------------------------------------------------------------------------------------
  struct RunState {
    RunContext* ctx = nullptr;
    const Plan* plan = nullptr;                // null: dynamic memory
    std::vector<Tensor> values;
    std::vector<Tensor> hold;                  // async cross-device copies' operands, until the run ends
    std::vector<uint64_t>* measured = nullptr; // per buffer: bytes seen (dynamic runs)
    std::vector<std::string> copy_names;       // per global instruction: the copy it made (profiles)
    std::map<int64_t, int64_t> symbols;
    std::span<const Tensor> inputs;
    std::vector<char> donor_ok;                // per input: its tensor may take a donated output
    uint64_t donated = 0;                      // outputs written into donated inputs
    uint64_t planned = 0;                      // instructions run from their plan (RunPlanned)
    std::optional<runtime::ScopedStream>* held = nullptr;  // the top-level block's current stream (EnterStream)
    int held_stream = -1;
    RunProfile* profile = nullptr;
    Clock::time_point t0;
    bool idle = false;  // the instruction just run enqueued nothing (an input or transfer already in place)
  };

  runtime::Stream& StreamOf(RunState& st, int stream) const {
    auto& s = st.ctx->streams[static_cast<size_t>(stream)];
    if (!s) s = std::make_unique<runtime::Stream>(devices[static_cast<size_t>(stream / 2)].device);
    return *s;
  }
  runtime::Event& EventOf(RunState& st, const Instr& in) const {
    auto& e = st.ctx->events[static_cast<size_t>(in.global)];
    if (!e) e = std::make_unique<runtime::Event>(devices[static_cast<size_t>(in.stream / 2)].device);
    return *e;
  }

  std::unique_ptr<RunContext> AcquireContext() const {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!free_contexts.empty()) {
        auto c = std::move(free_contexts.back());
        free_contexts.pop_back();
        return c;
      }
      ++stats.run_contexts;
    }
    auto c = std::make_unique<RunContext>();
    c->streams.resize(2 * devices.size());
    c->events.resize(static_cast<size_t>(num_global));
    c->start_events.resize(devices.size());
    c->align_events.resize(2 * devices.size());
    c->arenas.resize(devices.size());
    c->busy.resize(2 * devices.size());
    return c;
  }

  // The inputs are those of the last run's plan (under `mutex`).
  bool SameAsLast(std::span<const Tensor> inputs) const {
    if (inputs.size() != last_inputs.size()) return false;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!last_inputs[i].Matches(inputs[i], device)) return false;
    }
    return true;
  }
  void RememberLast(std::span<const Tensor> inputs, std::shared_ptr<const Plan> plan) const {
    last_inputs.clear();
    for (const Tensor& t : inputs) last_inputs.push_back(InputKey::Of(t, device));
    last_plan = std::move(plan);
  }

  std::string Signature(std::span<const Tensor> inputs) const {
    std::string sig;
    for (const Tensor& t : inputs) InputKey::Of(t, device).AppendTo(&sig);
    return sig;
  }

  std::vector<Tensor> Run(std::span<const Tensor> inputs, RunProfile* profile, bool donate) const {
    // The first run makes the devices' private-format copies of parameters: it runs alone, so a concurrent
    // run never reads a copy still being made on another run's stream.
    std::unique_lock<std::mutex> first;
    if (!warmed.load(std::memory_order_acquire)) {
      first = std::unique_lock<std::mutex>(first_run_mutex);
      if (warmed.load(std::memory_order_acquire)) first.unlock();
    }
    NoGradGuard no_grad;
    std::string sig;
    std::shared_ptr<const Plan> plan;
    bool measure = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++stats.runs;
      if (last_plan != nullptr && SameAsLast(inputs)) {
        plan = last_plan;
      } else {
        sig = Signature(inputs);
        if (auto it = plans.find(sig); it != plans.end()) {
          plan = it->second;
        } else if (static_shapes) {
          plan = MakePlan(static_bytes, inputs);
          plans[sig] = plan;
          ++stats.plans_built;
        } else {
          measure = true;
        }
        if (plan != nullptr) RememberLast(inputs, plan);
      }
    }
    std::unique_ptr<RunContext> ctx = AcquireContext();
    RunState st;
    st.ctx = ctx.get();
    st.plan = plan.get();
    std::vector<uint64_t> measured(measure ? buffers.size() : 0, 0);
    if (measure) st.measured = &measured;
    st.profile = profile;
    if (profile != nullptr) st.copy_names.assign(static_cast<size_t>(num_global), "");
    st.values = presets;
    st.inputs = inputs;
    if (donate) {
      AllowDonations(st);
    } else {
      st.donor_ok.assign(inputs.size(), 0);
    }
    std::vector<Tensor> outputs;
    try {
      if (profile != nullptr) StartProfile();
      st.t0 = Clock::now();
      Begin(st, plan.get());
      RunBlock(st, top, plan != nullptr ? plan->schedule : top.schedule, inputs);
      for (int s : top.yields) outputs.push_back(st.values[s]);
      SynchronizeAll(st);
      if (profile != nullptr) FinishProfile(st);
    } catch (...) {
      // Synchronise and destroy the streams first: a copy still in flight writes or reads bytes the run holds
      // (cross-device copies' ends, which the other device's allocator would hand to a concurrent run at once).
      ctx.reset();
      st.values.clear();
      st.hold.clear();
      if (profile != nullptr && runtime::Profiler::Get().enabled()) runtime::Profiler::Get().Stop();
      throw;
    }
    st.values.clear();
    st.hold.clear();
    {
      std::lock_guard<std::mutex> lock(mutex);
      free_contexts.push_back(std::move(ctx));
      if (measure && plans.find(sig) == plans.end() && options.plan_memory) {
        plans[sig] = MakePlan(measured, inputs);
        ++stats.plans_built;
      }
      stats.donated_outputs += st.donated;
      stats.planned_launches += st.planned;
    }
    warmed.store(true, std::memory_order_release);
    return outputs;
  }

  // Which donated inputs' tensors may take their output: on the run's device, contiguous, owning all of their
  // storage, which no other input shares (a tensor given twice, or views of one storage, are never written).
  void AllowDonations(RunState& st) const {
    st.donor_ok.assign(st.inputs.size(), 0);
    for (const InputOutputAlias& a : donations) {
      if (a.input >= st.inputs.size()) continue;  // too few inputs: RunInput says so
      const Tensor& t = st.inputs[a.input];
      bool ok = t.defined() && t.device() == device && t.is_contiguous() && t.offset() == 0 &&
                t.storage() != nullptr && t.storage()->nbytes() == t.nbytes() && t.nbytes() > 0;
      for (size_t j = 0; ok && j < st.inputs.size(); ++j) {
        ok = j == a.input || !st.inputs[j].defined() || st.inputs[j].storage() != t.storage();
      }
      st.donor_ok[a.input] = ok ? 1 : 0;
    }
  }

  // Give every device its arena, then order the run after the work queued on the devices' current
  // (default) streams: eager code that made the inputs, and the waits the caching allocator enqueued there
  // when the arena's bytes were last used by another stream.
  void Begin(RunState& st, const Plan* plan) const {
    std::fill(st.ctx->busy.begin(), st.ctx->busy.end(), 0);
    for (size_t d = 0; d < devices.size(); ++d) {
      const uint64_t want = plan != nullptr ? plan->arena_bytes[d] : 0;
      auto& arena = st.ctx->arenas[d];
      if (want > 0 && (!arena || arena->nbytes() < want)) {
        arena.reset();
        arena = runtime::Runtime::Get().Context(devices[d].device).allocator().AllocateStorage(devices[d].device, want);
      }
    }
    for (size_t d = 0; d < devices.size(); ++d) {
      auto& start = st.ctx->start_events[d];
      if (!start) start = std::make_unique<runtime::Event>(devices[d].device);
      start->Record();  // the calling thread's current stream of the device
      runtime::Stream& compute = StreamOf(st, static_cast<int>(2 * d));
      runtime::Stream& copy = StreamOf(st, static_cast<int>(2 * d + 1));
      compute.WaitEvent(*start);
      copy.WaitEvent(*start);
      // Each of the two streams starts after where the other left off (the previous run is complete, but a
      // device's time model keeps a clock per stream: this keeps a run's times on one timeline). A device
      // without a time model needs nothing more.
      if (!devices[d].simulated) continue;
      st.ctx->busy[2 * d] = st.ctx->busy[2 * d + 1] = 1;  // the clocks' alignment is the time model's work
      auto& ec = st.ctx->align_events[2 * d];
      auto& ep = st.ctx->align_events[2 * d + 1];
      if (!ec) ec = std::make_unique<runtime::Event>(devices[d].device);
      if (!ep) ep = std::make_unique<runtime::Event>(devices[d].device);
      ec->Record(compute);
      ep->Record(copy);
      compute.WaitEvent(*ep);
      copy.WaitEvent(*ec);
    }
  }

  void SynchronizeAll(RunState& st) const {
    for (size_t i = 0; i < st.ctx->streams.size(); ++i) {
      if (st.ctx->streams[i] && st.ctx->busy[i]) st.ctx->streams[i]->Synchronize();
    }
  }

  // Make `stream` the calling thread's current stream of its device until the top-level block ends or another
  // planned launch needs another stream: consecutive launches on one stream do not set it again.
  void EnterStream(RunState& st, int stream) const {
    if (st.held == nullptr) return;
    if (st.held_stream == stream && st.held->has_value()) return;
    st.held->reset();
    st.held->emplace(StreamOf(st, stream));
    st.held_stream = stream;
  }

  void RunBlock(RunState& st, const CBlock& b, const Schedule& sched, std::span<const Tensor> inputs) const {
    std::optional<runtime::ScopedStream> held;  // destroyed last: restores the thread's current stream
    if (&b == &top) {
      st.held = &held;
      st.held_stream = -1;
    }
    struct Unhold {
      RunState& st;
      bool top;
      ~Unhold() {
        if (top) st.held = nullptr;
      }
    } unhold{st, &b == &top};
    for (size_t i = 0; i < b.instrs.size(); ++i) {
      const Instr& in = b.instrs[i];
      try {
        for (const Schedule::Wait& w : sched.waits[i]) {
          const Instr& producer = b.instrs[static_cast<size_t>(w.producer)];
          if (producer.stream >= 0 && !st.ctx->busy[static_cast<size_t>(producer.stream)]) continue;
          runtime::Event& e = EventOf(st, producer);
          if (w.same_device) {
            StreamOf(st, in.stream).WaitEvent(e);
          } else {
            e.Synchronize();  // another device's work: the host waits, then issues
          }
        }
        const Clock::time_point t0 = st.profile != nullptr ? Clock::now() : Clock::time_point{};
        st.idle = false;
        RunInstr(st, in, static_cast<int>(&b == &top ? i : -1), inputs);
        if (in.stream >= 0 && !st.idle) st.ctx->busy[static_cast<size_t>(in.stream)] = 1;
        if (sched.record[i] && st.ctx->busy[static_cast<size_t>(in.stream)]) {
          EventOf(st, in).Record(StreamOf(st, in.stream));
        }
        if (st.profile != nullptr) AddProfile(st, in, t0, Clock::now());
        for (int s : in.release) st.values[static_cast<size_t>(s)] = Tensor();
      } catch (const Error& e) {
        if (std::string_view(e.what()).starts_with("scheduler: ")) throw;
        Throw(e.code(), "scheduler: {}: {}", in.where, e.what());
      }
    }
  }

  // The tensor an output allocation of instruction `top_index` result `k` gets: the planned arena bytes, the
  // operand it is written over, or the caching allocator.
  Tensor Output(RunState& st, const Instr& in, int top_index, size_t k, const Dims& shape, DType dtype,
                Device device) const {
    const uint64_t n = NBytes(shape, dtype);
    if (k == 0 && in.inplace >= 0) {
      const Tensor& x = st.values[static_cast<size_t>(in.in[static_cast<size_t>(in.inplace)])];
      if (x.defined() && x.device() == device && x.is_contiguous() && x.nbytes() == n &&
          x.storage()->nbytes() >= n) {
        return Tensor(x.storage(), dtype, shape, ContiguousStrides(shape), x.offset());
      }
    }
    if (top_index >= 0 && k < out_buffer[static_cast<size_t>(top_index)].size()) {
      const int b = out_buffer[static_cast<size_t>(top_index)][k];
      if (b >= 0) {
        const int d = buffers[static_cast<size_t>(b)].donor;
        if (d >= 0 && static_cast<size_t>(d) < st.donor_ok.size() && st.donor_ok[static_cast<size_t>(d)]) {
          const Tensor& t = st.inputs[static_cast<size_t>(d)];
          if (t.nbytes() == n && t.device() == device) {  // symbolic sizes are checked here
            if (st.measured != nullptr) (*st.measured)[static_cast<size_t>(b)] = n;
            ++st.donated;
            return Tensor(t.storage(), dtype, shape, ContiguousStrides(shape), 0);
          }
        }
        if (st.measured != nullptr) (*st.measured)[static_cast<size_t>(b)] = n;
        if (st.plan != nullptr && st.plan->offsets[static_cast<size_t>(b)] >= 0 &&
            st.plan->bytes[static_cast<size_t>(b)] == n) {
          const auto& arena = st.ctx->arenas[static_cast<size_t>(buffers[static_cast<size_t>(b)].device)];
          char* base = static_cast<char*>(arena->data()) + st.plan->offsets[static_cast<size_t>(b)];
          std::vector<Tensor>& cache = st.ctx->arena_tensors;
          if (cache.size() != buffers.size()) cache.assign(buffers.size(), Tensor());
          Tensor& made = cache[static_cast<size_t>(b)];
          if (!made.defined() || made.data_ptr() != base || made.dtype() != dtype || made.shape() != shape) {
            auto storage = std::make_shared<Storage>(device, base, n, nullptr, nullptr);
            made = Tensor(std::move(storage), dtype, shape, ContiguousStrides(shape), 0);
          }
          return made;
        }
      }
    }
    return runtime::Empty(shape, dtype, device);
  }

  void RunInstr(RunState& st, const Instr& in, int top_index, std::span<const Tensor> inputs) const {
    switch (in.kind) {
      case Kind::kInput: return RunInput(st, in, top_index, inputs);
      case Kind::kTransfer: return RunTransfer(st, in, top_index);
      case Kind::kIf: return RunIf(st, in);
      case Kind::kWhile: return RunWhile(st, in);
      case Kind::kKernel:
      case Kind::kCompiled:
      case Kind::kSpecial: break;
    }
    if (top_index >= 0 && st.plan != nullptr && RunPlanned(st, in, top_index)) return;
    runtime::Stream& stream = StreamOf(st, in.stream);
    runtime::ScopedStream on(stream);
    std::vector<Tensor> args;
    args.reserve(in.in.size());
    runtime::DeviceContext& dctx = stream.context();
    for (size_t k = 0; k < in.in.size(); ++k) {
      const Tensor& t = st.values[static_cast<size_t>(in.in[k])];
      OAR_CHECK(t.defined(), kInternal, "an operand was released before its last use");
      if (t.device() == in.device) {
        // Made on another stream of this device: the allocator must not reuse it before this use completes.
        if (in.record_in[k]) dctx.allocator().RecordStream(*t.storage(), stream.handle());
        args.push_back(t);
      } else {
        args.push_back(t.to(in.device));  // as the interpreter does for op.* programs
      }
    }
    std::vector<Tensor> out;
    if (in.kind == Kind::kSpecial) {
      out = RunSpecial(st, in, top_index, args);
      if (top_index >= 0 && st.plan != nullptr && IsPlannableView(in.schema->op) &&
          st.plan->planned->Get(static_cast<size_t>(top_index)) == nullptr && args.size() == 1 && out.size() == 1) {
        auto e = std::make_unique<PlannedInstructions::Entry>();
        e->view = PlanView(args[0], out[0]);
        e->refused = e->view == nullptr;
        st.plan->planned->Publish(static_cast<size_t>(top_index), std::move(e));
      }
    } else {
      size_t k = 0;
      ops::ScopedOutputAllocator alloc([&](const Dims& shape, DType dtype, Device device) {
        return Output(st, in, top_index, k++, shape, dtype, device);
      });
      out = in.kind == Kind::kCompiled ? in.compiled->Run(args) : ops::Run(in.schema->op, args, in.attrs, in.device);
    }
    OAR_CHECK(out.size() == in.out.size(), kInternal, "{} gave {} results for {}", in.name, out.size(), in.out.size());
    for (size_t k = 0; k < out.size(); ++k) st.values[static_cast<size_t>(in.out[k])] = std::move(out[k]);
  }

  // A Tensor-method op. clone, copy and slice_scatter write fresh bytes: the instruction's planned output
  // (Output), filled as Tensor::clone and SliceScatter fill theirs (the same kernels). Under capture (a tracer
  // records the Tensor methods) and for views: the methods themselves.
  std::vector<Tensor> RunSpecial(RunState& st, const Instr& in, int top_index, std::span<const Tensor> args) const {
    const ops::Op op = in.schema->op;
    if (ops::ActiveTracer() != nullptr || args.size() != 1 ||
        (op != ops::Op::kClone && op != ops::Op::kCopy && op != ops::Op::kSliceScatter)) {
      return RunTensorMethodOp(*in.schema, args, in.attrs);
    }
    if (op != ops::Op::kSliceScatter) {
      Tensor out = Output(st, in, top_index, 0, args[0].shape(), args[0].dtype(), in.device);
      out.copy_(args[0]);
      return {std::move(out)};
    }
    // SliceScatter's zeros come from the output allocator (a fill kernel through ops::Run).
    ops::ScopedOutputAllocator alloc([&](const Dims& shape, DType dtype, Device device) {
      return Output(st, in, top_index, 0, shape, dtype, device);
    });
    return RunTensorMethodOp(*in.schema, args, in.attrs);
  }

  // The planned launch of a kernel or view instruction (planned_launch.h): false, having done nothing, when
  // the instruction takes the general path (not plannable, operands not as planned, under capture).
  bool RunPlanned(RunState& st, const Instr& in, int top_index) const {
    if (in.kind == Kind::kCompiled || in.in.size() > 16 || ops::ActiveTracer() != nullptr) return false;
    const PlannedInstructions& planned = *st.plan->planned;
    const PlannedInstructions::Entry* e = planned.Get(static_cast<size_t>(top_index));
    if (e != nullptr && e->refused) return false;
    if (in.kind == Kind::kSpecial && e == nullptr) return false;  // the general path plans it
    TensorSlots args(in.in.size());
    for (size_t k = 0; k < in.in.size(); ++k) {
      const Tensor& t = st.values[static_cast<size_t>(in.in[k])];
      if (!t.defined() || t.device() != in.device) return false;
      args[k] = t;
    }
    const std::span<const Tensor> operands = args.span();
    if (e == nullptr) {
      auto made = std::make_unique<PlannedInstructions::Entry>();
      try {
        made->kernel = PlanKernel(*in.schema, operands, in.attrs, in.device);
        for (size_t k = 0; k < in.in.size(); ++k) {  // parameters and constants: the same tensor on every run
          if (presets[static_cast<size_t>(in.in[k])].defined()) FixOperand(*made->kernel, k, operands[k]);
        }
      } catch (const Error&) {
        made->kernel.reset();
        made->refused = true;  // the general path reports it
      }
      e = planned.Publish(static_cast<size_t>(top_index), std::move(made));
      if (e->refused) return false;
    }
    Tensor view;
    if (e->view != nullptr) {
      view = ApplyView(*e->view, args[0]);
      if (!view.defined()) return false;
    } else if (!Matches(*e->kernel, operands)) {
      return false;
    }
    runtime::Stream& stream = StreamOf(st, in.stream);
    runtime::DeviceContext& dctx = stream.context();
    for (size_t k = 0; k < in.in.size(); ++k) {
      // Made on another stream of this device: the allocator must not reuse it before this use completes.
      if (in.record_in[k]) dctx.allocator().RecordStream(*args[k].storage(), stream.handle());
    }
    ++st.planned;
    if (e->view != nullptr) {
      st.values[static_cast<size_t>(in.out[0])] = std::move(view);
      return true;
    }
    OAR_CHECK(e->kernel->results.size() == in.out.size(), kInternal, "{} gives {} results for {}", in.name,
              e->kernel->results.size(), in.out.size());
    std::optional<runtime::ScopedStream> local;
    if (st.held != nullptr) {
      EnterStream(st, in.stream);
    } else {
      local.emplace(stream);
    }
    OAR_CHECK(in.out.size() <= TensorSlots::kCapacity, kInternal, "{}: more than 16 results", in.name);
    TensorSlots results(in.out.size());
    LaunchPlanned(
        *e->kernel, operands,
        [&](size_t k, const Dims& shape, DType dtype) { return Output(st, in, top_index, k, shape, dtype, in.device); },
        std::span<Tensor>(results.data(), in.out.size()));
    for (size_t k = 0; k < in.out.size(); ++k) st.values[static_cast<size_t>(in.out[k])] = std::move(results[k]);
    return true;
  }

  void RunInput(RunState& st, const Instr& in, int top_index, std::span<const Tensor> inputs) const {
    const int64_t index = in.input_index;
    OAR_CHECK_ARG(index >= 0 && static_cast<size_t>(index) < inputs.size(),
                  "the program's input '{}' is input {} but {} inputs were given", in.input_name, index, inputs.size());
    const Tensor& t = inputs[static_cast<size_t>(index)];
    OAR_CHECK_ARG(t.defined() && t.dtype() == in.input_dtype && t.rank() == static_cast<int>(in.input_dims.size()),
                  "input {} ('{}') must be {}, got {}{}", index, in.input_name, in.input_type,
                  t.defined() ? DTypeName(t.dtype()) : "undefined", t.defined() ? t.shape().ToString() : "");
    for (size_t d = 0; d < in.input_dims.size(); ++d) {
      const int64_t e = in.input_dims[d];
      if (ir::SymDim::IsStatic(e)) {
        OAR_CHECK_ARG(t.dim(static_cast<int>(d)) == e, "input {} ('{}') must be {}, got shape {}", index,
                      in.input_name, in.input_type, t.shape().ToString());
      } else if (ir::SymDim::IsSymbol(e)) {
        auto [it, fresh] = st.symbols.emplace(e, t.dim(static_cast<int>(d)));
        const std::string& sym = symbol_names.at(e);
        OAR_CHECK_ARG(fresh || it->second == t.dim(static_cast<int>(d)),
                      "input {} ('{}') has extent {} for symbol {} in dimension {}, but an earlier input bound {} = {}",
                      index, in.input_name, t.dim(static_cast<int>(d)), sym, d, sym, it->second);
      }
    }
    if (t.device() == device) {
      st.values[static_cast<size_t>(in.out[0])] = t;
      st.idle = true;
      return;
    }
    st.values[static_cast<size_t>(in.out[0])] = Copy(st, in, top_index, t);
  }

  void RunTransfer(RunState& st, const Instr& in, int top_index) const {
    const Tensor& src = st.values[static_cast<size_t>(in.in[0])];
    st.idle = src.device() == in.device;
    st.values[static_cast<size_t>(in.out[0])] = st.idle ? src : Copy(st, in, top_index, src);
  }

  // `src` on in.device: an asynchronous copy on the instruction's copy stream where the devices allow it.
  Tensor Copy(RunState& st, const Instr& in, int top_index, const Tensor& src) const {
    runtime::Runtime& rt = runtime::Runtime::Get();
    runtime::DeviceContext& sctx = rt.Context(src.device());
    runtime::DeviceContext& dctx = rt.Context(in.device);
    runtime::Stream& stream = StreamOf(st, in.stream);
    runtime::DeviceContext& owner = stream.context();
    std::string& copy_name = st.copy_names.empty() ? scratch_name_ : st.copy_names[static_cast<size_t>(in.global)];
    if (!src.is_contiguous() || (&owner != &sctx && &owner != &dctx)) {
      // A strided view, or a device pair the plan did not expect: the synchronous path (Tensor::to).
      runtime::ScopedStream on(stream);
      return src.to(in.device);
    }
    Tensor dst;
    {
      runtime::ScopedStream on(stream);
      dst = Output(st, in, top_index, 0, src.shape(), src.dtype(), in.device);
    }
    const size_t n = src.nbytes();
    if (&owner == &sctx) owner.allocator().RecordStream(*src.storage(), stream.handle());
    if (&owner == &dctx) owner.allocator().RecordStream(*dst.storage(), stream.handle());
    copy_name = runtime::CopyBytesOn(stream, dctx, dst.data_ptr(), sctx, src.data_ptr(), n);
    // The other device's allocator knows nothing of this stream: both ends stay alive until the run ends.
    st.hold.push_back(src);
    st.hold.push_back(dst);
    return dst;
  }

  bool Truth(RunState& st, const Tensor& t) const {
    const int slot = FindDeviceSlot(t.device());
    if (slot >= 0) {
      runtime::ScopedStream on(StreamOf(st, 2 * slot));
      return cast(t, DType::kFloat64).reshape(Dims{}).item<double>() != 0;
    }
    return cast(t, DType::kFloat64).reshape(Dims{}).item<double>() != 0;
  }
  int FindDeviceSlot(Device d) const {
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].device == d) return static_cast<int>(i);
    }
    return -1;
  }

  std::vector<Tensor> RunRegion(RunState& st, const CBlock& b, const std::vector<Tensor>& args) const {
    for (size_t i = 0; i < b.args.size(); ++i) st.values[static_cast<size_t>(b.args[i])] = args[i];
    RunBlock(st, b, b.schedule, {});
    SynchronizeAll(st);
    std::vector<Tensor> out;
    for (int s : b.yields) out.push_back(st.values[static_cast<size_t>(s)]);
    return out;
  }

  void RunIf(RunState& st, const Instr& in) const {
    SynchronizeAll(st);
    const bool cond = Truth(st, st.values[static_cast<size_t>(in.in[0])]);
    std::vector<Tensor> out = RunRegion(st, *in.regions[cond ? 0 : 1], {});
    for (size_t i = 0; i < in.out.size(); ++i) st.values[static_cast<size_t>(in.out[i])] = out[i];
  }

  void RunWhile(RunState& st, const Instr& in) const {
    SynchronizeAll(st);
    std::vector<Tensor> carried;
    for (int s : in.in) carried.push_back(st.values[static_cast<size_t>(s)]);
    for (;;) {
      std::vector<Tensor> c = RunRegion(st, *in.regions[0], carried);
      carried.assign(c.begin() + 1, c.end());
      if (!Truth(st, c[0])) break;
      carried = RunRegion(st, *in.regions[1], carried);
    }
    for (size_t i = 0; i < in.out.size(); ++i) st.values[static_cast<size_t>(in.out[i])] = carried[i];
  }

  // ---- profiles -------------------------------------------------------------------------------------------
  void StartProfile() const {
    for (const DeviceSlot& d : devices) {
      runtime::DeviceContext& c = runtime::Runtime::Get().Context(d.device);
      c.Synchronize();
      c.allocator().ResetPeakStats();
    }
    runtime::Profiler::Get().Start();
  }

  void AddProfile(RunState& st, const Instr& in, Clock::time_point t0, Clock::time_point t1) const {
    InstructionProfile p;
    p.index = in.global;
    p.name = in.name;
    const bool copy = in.kind == Kind::kTransfer || in.kind == Kind::kInput;
    p.copy = copy;
    p.device = in.stream >= 0 ? devices[static_cast<size_t>(in.stream / 2)].device.str() : in.device.str();
    p.stream = in.stream < 0 ? "host" : in.stream % 2 == 0 ? "compute" : "copy";
    p.host_start_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t0 - st.t0).count());
    p.host_end_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - st.t0).count());
    st.profile->instructions.push_back(std::move(p));
  }

  void FinishProfile(RunState& st) const {
    RunProfile& prof = *st.profile;
    prof.host_total_ns =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - st.t0).count());
    runtime::Profiler::Get().Stop();
    // Match each device's activities to the instructions in issue order: a stream completes in order, kernels
    // of a device all go to its compute stream and copies to its copy stream, so the k-th activity named N on
    // a device is the k-th instruction issuing N there. Activities no instruction issued (format casts the
    // runtime adds, fallback copies) are left out.
    std::map<std::pair<std::string, std::string>, std::deque<runtime::Profiler::Activity>> acts;
    for (runtime::Profiler::Activity& a : runtime::Profiler::Get().activities()) {
      acts[{a.device, a.name}].push_back(std::move(a));
    }
    for (InstructionProfile& p : prof.instructions) {
      std::string name = p.name.starts_with("kernel.") ? p.name.substr(7) : p.name.starts_with("op.") ? p.name.substr(3) : p.name;
      if (p.copy) {
        name = st.copy_names[static_cast<size_t>(p.index)];
        if (name.empty()) continue;  // no copy made (already there), or a synchronous one
      }
      auto it = acts.find({p.device, name});
      if (it == acts.end() || it->second.empty()) continue;
      const runtime::Profiler::Activity& a = it->second.front();
      p.device_start_ns = a.start_ns;
      p.device_end_ns = a.end_ns;
      p.simulated = a.simulated;
      it->second.pop_front();
    }
    prof.ComputeOverlap();
    for (size_t d = 0; d < devices.size(); ++d) {
      const runtime::AllocatorStats a = runtime::Runtime::Get().Context(devices[d].device).allocator().stats();
      const std::string name = devices[d].device.str();
      prof.peak_device_memory[name] = a.peak_reserved_bytes;
      prof.peak_allocated_memory[name] = a.peak_allocated_bytes;
      prof.arena_bytes[name] = st.plan != nullptr ? st.plan->arena_bytes[d] : 0;
    }
    prof.donated_outputs = st.donated;
  }
};

Executor::Executor(const ir::Program& program, Device device, ExecutorOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->options = options;
  NoGradGuard no_grad;
  impl_->Compile(program);
}

Executor::~Executor() = default;

std::vector<Tensor> Executor::Run(std::span<const Tensor> inputs, RunProfile* profile, bool donate) const {
  return impl_->Run(inputs, profile, donate);
}

size_t Executor::num_instructions() const { return static_cast<size_t>(impl_->num_global); }

size_t Executor::num_cross_stream_edges() const { return impl_->top.schedule.edges; }

std::vector<InputOutputAlias> Executor::donations() const { return impl_->donations; }

ExecutorStats Executor::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

std::vector<MemoryPlanSummary> Executor::MemoryPlan(std::span<const Tensor> inputs) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->plans.find(impl_->Signature(inputs));
  return it == impl_->plans.end() ? std::vector<MemoryPlanSummary>{} : it->second->summaries;
}

std::string Executor::Describe() const {
  std::string out;
  const Impl& m = *impl_;
  auto stream_name = [&](int s) {
    return s < 0 ? std::string("host") : m.devices[static_cast<size_t>(s / 2)].device.str() + (s % 2 ? "/copy" : "/compute");
  };
  std::function<void(const CBlock&, int)> describe = [&](const CBlock& b, int depth) {
    for (size_t i = 0; i < b.instrs.size(); ++i) {
      const Instr& in = b.instrs[i];
      std::string waits;
      for (const Schedule::Wait& w : b.schedule.waits[i]) {
        waits += fmt::format("{}{}{}", waits.empty() ? "" : ",", b.instrs[static_cast<size_t>(w.producer)].global,
                             w.same_device ? "" : "(host)");
      }
      out += fmt::format("{}{:>3} {:<22} on {:<22} waits [{}]{}{}\n", std::string(2 * depth, ' '), in.global, in.name,
                         stream_name(in.stream), waits, b.schedule.record[i] ? " records" : "",
                         in.inplace >= 0 ? fmt::format(" in-place over operand {}", in.inplace) : "");
      for (const auto& r : in.regions) describe(*r, depth + 1);
    }
  };
  describe(m.top, 0);
  return out;
}

}  // namespace oar::scheduler
