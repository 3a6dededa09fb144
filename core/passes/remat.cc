// remat: lower the most bytes a program's own buffers hold at once by recomputing cheap results where they are
// read late, rather than keeping them alive in between (rematerialisation, as XLA's HloRematerialization and
// PyTorch's activation checkpointing do for a training step: the forward's elementwise results the backward
// reads). Model of the program's memory: every result of a top-level op the program owns (not an input,
// parameter, literal, output or control-flow result; a view belongs to the buffer it views) holds its bytes
// from its op through its last use. The pass repeats: find the position where the owned bytes peak; among the
// results alive across it but not used there, pick an elementwise, side-effect-free op's result whose operands
// are all still used at or after the first use past the peak (so recomputing it there lengthens no other
// buffer's life); clone the op right before that use and give it every later use (views of the result made
// before it are cloned too). Each step lowers the bytes alive at the peak and raises them nowhere; it stops
// when no result alive across the peak can be recomputed. Recomputing runs the same kernel on the same
// operands, so results are unchanged bit for bit. Run it after kernel selection and before `inplace`
// (whose marks it would otherwise have to respect), never before `cse` (which would merge the copies back).
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/ir/dialect.h"
#include "core/passes/pass.h"
#include "core/passes/transforms.h"

namespace oar::passes {
namespace {

constexpr int kForever = std::numeric_limits<int>::max();  // the last use of an output
constexpr int64_t kMaxRecomputed = 256;                     // bounds the compile time of a huge program

struct Model {
  std::vector<ir::Operation*> ops;                       // the top-level block, in order
  std::unordered_map<const ir::Operation*, int> pos;     // top-level op -> position
  std::unordered_map<ir::Value, ir::Value, ir::ValueHash> root;  // value -> the buffer it views (itself)
  std::unordered_map<ir::Value, int, ir::ValueHash> last;        // buffer root -> last use position
  std::unordered_map<ir::Value, std::vector<ir::Value>, ir::ValueHash> aliases;  // root -> it and its views
  std::vector<int64_t> live;                             // owned bytes alive at each position
};

bool IsView(const ir::Operation& op) {
  return op.info().Has(ir::kView) && op.num_operands() == 1 && op.num_results() == 1 && op.num_regions() == 0;
}

// A buffer the program owns, as the scheduler's plan sees it.
bool Owned(ir::Value root) {
  const ir::Operation* def = root.defining_op();
  if (def == nullptr || def->num_regions() > 0) return false;
  const std::string_view n = def->name();
  return !(n == "builtin.data" || n == "builtin.parameter" || n == "builtin.constant" || n == "builtin.split");
}

int64_t StaticBytes(ir::Value v) {
  const ir::Type t = v.type();
  if (!t.IsTensor() || !t.HasStaticShape()) return 0;
  int64_t n = static_cast<int64_t>(DTypeSize(t.dtype()));
  for (int64_t d : t.dims()) n *= d;
  return n;
}

// The position of the top-level op holding `op` (itself, or the op whose regions it is nested in).
int TopPosition(const Model& m, const ir::Operation* op) {
  while (op != nullptr) {
    if (auto it = m.pos.find(op); it != m.pos.end()) return it->second;
    op = op->parent_op();
  }
  return -1;
}

Model Build(ir::Program& program) {
  Model m;
  for (ir::Operation* op : program.block()) {
    m.pos[op] = static_cast<int>(m.ops.size());
    m.ops.push_back(op);
  }
  for (ir::Operation* op : m.ops) {
    for (uint32_t r = 0; r < op->num_results(); ++r) {
      const ir::Value v = op->result(r);
      ir::Value root = v;
      if (IsView(*op)) {
        if (auto it = m.root.find(op->operand(0)); it != m.root.end()) root = it->second;
      }
      m.root[v] = root;
      m.aliases[root].push_back(v);
      m.last.emplace(root, m.pos[op]);
    }
  }
  for (auto& [v, root] : m.root) {
    int& last = m.last[root];
    for (ir::OpOperand* u = v.first_use(); u != nullptr; u = u->next_use()) {
      const bool output = u->owner()->name() == "builtin.output" && u->owner()->parent_block() == &program.block();
      last = output ? kForever : std::max(last, TopPosition(m, u->owner()));
    }
  }
  std::vector<int64_t> delta(m.ops.size() + 1, 0);
  for (const auto& [root, last] : m.last) {
    if (last == kForever || !Owned(root)) continue;
    const int64_t bytes = StaticBytes(root);
    delta[static_cast<size_t>(m.pos[root.defining_op()])] += bytes;
    delta[static_cast<size_t>(last) + 1] -= bytes;
  }
  m.live.assign(m.ops.size(), 0);
  int64_t run = 0;
  for (size_t i = 0; i < m.ops.size(); ++i) m.live[i] = run += delta[i];
  return m;
}

struct Candidate {
  ir::Value value;
  int late = -1;  // the first use past the peak
  int64_t bytes = 0;
};

// `root` (an owned buffer alive across `peak`, not used there) may be recomputed before its first use past the
// peak: its op is elementwise and side-effect free, and every operand's buffer is used at or after that use.
bool Recomputable(const Model& m, ir::Value root, int peak, Candidate* c) {
  const ir::Operation* def = root.defining_op();
  if (def == nullptr || !m.pos.contains(def) || m.pos.at(def) >= peak) return false;
  if (!def->info().Has(ir::kElementwise) || !def->info().Has(ir::kPure) || def->num_results() != 1 ||
      def->num_regions() > 0 || def->num_operands() == 0 || def->attr("oar.inplace")) {
    return false;
  }
  int late = kForever;
  for (ir::Value a : m.aliases.at(root)) {
    for (ir::OpOperand* u = a.first_use(); u != nullptr; u = u->next_use()) {
      const int p = TopPosition(m, u->owner());
      if (p == peak) return false;  // read at the peak itself: recomputing there lowers nothing
      if (p > peak) late = std::min(late, p);
    }
  }
  if (late == kForever) return false;
  for (uint32_t i = 0; i < def->num_operands(); ++i) {
    const ir::Value o = def->operand(i);
    const ir::Operation* od = o.defining_op();
    if (od != nullptr && (od->name() == "builtin.parameter" || od->name() == "builtin.constant")) continue;
    auto r = m.root.find(o);
    if (r == m.root.end()) return false;  // a block argument or a value from elsewhere
    if (m.last.at(r->second) < late) return false;
  }
  c->value = root;
  c->late = late;
  c->bytes = StaticBytes(root);
  return c->bytes > 0;
}

// Clone `c.value`'s op (and the views of it made before the late use that are read from there on) right before
// the op at `c.late`, move every use from there on to the clones, and erase what is left unused.
void Recompute(Model& m, const Candidate& c) {
  ir::Operation* at = m.ops[static_cast<size_t>(c.late)];
  ir::Block* block = at->parent_block();
  std::unordered_map<ir::Value, ir::Value, ir::ValueHash> mapping;
  ir::Operation* def = c.value.defining_op();
  ir::Operation* copy = def->Clone(mapping);
  block->Insert(at, copy);
  const std::vector<ir::Value>& aliases = m.aliases.at(c.value);
  // The clones have no position (-1): their operands are never moved.
  auto late_use = [&](const ir::OpOperand& u) { return TopPosition(m, u.owner()) >= c.late; };
  // A view made before the late use and read from there on (directly or through later views) is made again
  // from the recomputed value; aliases are in program order, each view after the value it views.
  std::vector<char> needed(aliases.size(), 0);
  for (size_t k = aliases.size(); k-- > 1;) {
    const ir::Value a = aliases[k];
    if (m.pos.at(a.defining_op()) >= c.late) continue;
    for (ir::OpOperand* u = a.first_use(); u != nullptr && !needed[k]; u = u->next_use()) needed[k] = late_use(*u);
    if (!needed[k]) {
      for (size_t j = k + 1; j < aliases.size() && !needed[k]; ++j) {
        needed[k] = needed[j] && aliases[j].defining_op()->operand(0) == a;
      }
    }
  }
  for (size_t k = 1; k < aliases.size(); ++k) {
    if (needed[k]) block->Insert(at, aliases[k].defining_op()->Clone(mapping));
  }
  for (ir::Value a : aliases) {
    auto it = mapping.find(a);
    if (it == mapping.end()) continue;
    a.ReplaceUsesWithIf(it->second, [&](ir::OpOperand& u) { return late_use(u); });
  }
  for (size_t k = aliases.size(); k-- > 0;) {
    ir::Operation* op = aliases[k].defining_op();
    if (!op->HasUses()) op->Erase();
  }
}

class RematPass : public Pass {
 public:
  std::string_view name() const override { return "remat"; }
  void Run(ir::Program& program) override { RecomputeAtPeak(program); }
};

}  // namespace

int64_t RecomputeAtPeak(ir::Program& program) {
  int64_t done = 0;
  while (done < kMaxRecomputed) {
    Model m = Build(program);
    if (m.ops.empty()) break;
    const int peak = static_cast<int>(std::max_element(m.live.begin(), m.live.end()) - m.live.begin());
    if (m.live[static_cast<size_t>(peak)] == 0) break;
    std::vector<Candidate> candidates;
    for (const auto& [root, last] : m.last) {
      Candidate c;
      if (last != kForever && last > peak && Owned(root) && Recomputable(m, root, peak, &c)) candidates.push_back(c);
    }
    if (candidates.empty()) break;
    // The largest first; of equal ones the earliest late use (a result recomputed from another recomputable
    // result must be recomputed first, while that one is still alive there).
    const Candidate& best = *std::min_element(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
      if (a.bytes != b.bytes) return a.bytes > b.bytes;
      if (a.late != b.late) return a.late < b.late;
      return m.pos.at(a.value.defining_op()) < m.pos.at(b.value.defining_op());
    });
    Recompute(m, best);
    ++done;
  }
  return done;
}

void RegisterRematPass() {
  RegisterPass("remat",
               "recompute elementwise results before their late uses where that lowers the program's peak bytes",
               [](const PassOptions& o) {
                 CheckPassOptions("remat", o, {});
                 return std::make_unique<RematPass>();
               });
}

}  // namespace oar::passes
