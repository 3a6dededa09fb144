// The tape and the backward engine.
//
// Recording: ops::Run (and every metadata view) hands each op applied to a tensor that requires grad to
// RecordOp, which makes a Node holding the op, its attributes and its inputs, and marks the outputs as
// produced by it. Nodes point only at the nodes of their inputs, so the graph is a DAG owned from its
// outputs and freed with them.
//
// Backward: count, for every reachable node, how many consumers will send it gradient; start from the
// roots; run a node once all its consumers have (highest sequence number first, i.e. reverse recording
// order among ready nodes); call the op's VJP (under grad mode = create_graph, so with create_graph the
// gradient computation is itself recorded); pass each input's gradient to the input's node or leaf.
#include <atomic>
#include <map>
#include <string>
#include <queue>
#include <unordered_map>

#include "core/autograd/autograd.h"
#include "core/base/error.h"
#include "core/ops/trace.h"

namespace oar::autograd {

class Node {
 public:
  struct Edge {
    std::shared_ptr<Node> node;  // the producer of this input, or null
    int output_nr = 0;
    Tensor leaf;                 // the input itself when it is a leaf that requires grad
  };

  ops::Op op;
  ops::AttrValues attrs;
  std::vector<Tensor> inputs;                // saved for the VJP; cleared when the graph is released
  std::vector<ops::TensorMeta> outputs;      // dtype and shape of each output
  Device device;
  std::vector<Edge> next;                    // one per input
  uint64_t sequence = 0;
  bool released = false;
  CustomVjp custom;         // set for RecordCustom nodes (op is then unused)
  std::string custom_name;
};

namespace {

std::atomic<uint64_t> g_sequence{0};

void RecordOp(ops::Op op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const ops::AttrValues& attrs) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->attrs = attrs;
  node->sequence = g_sequence.fetch_add(1);
  for (const Tensor& t : inputs) {
    node->inputs.push_back(t);
    Node::Edge e;
    if (t.requires_grad()) {
      AutogradMeta* m = t.autograd_meta();
      if (m->grad_fn) {
        e.node = m->grad_fn;
        e.output_nr = m->output_nr;
      } else {
        e.leaf = t;
      }
    }
    node->next.push_back(std::move(e));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    node->outputs.push_back({out.dtype(), out.shape()});
    node->device = out.device();
    if (!IsFloating(out.dtype())) continue;  // integer and bool results carry no gradient
    AutogradMeta& m = out.mutable_autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<int>(i);
  }
}

Node::Edge EdgeTo(const Tensor& t) {
  Node::Edge e;
  if (t.requires_grad()) {
    AutogradMeta* m = t.autograd_meta();
    if (m->grad_fn) {
      e.node = m->grad_fn;
      e.output_nr = m->output_nr;
    } else {
      e.leaf = t;
    }
  }
  return e;
}

void RecordView(const Tensor& base, Tensor& view, ViewOp op, std::span<const int64_t> args) {
  const ops::ViewCall call = ops::ViewCallOf(view, op, args);
  RecordOp(call.op, {&base, 1}, {&view, 1}, call.attrs);
}

// Installs the recorders before main(): this file is linked whenever backward() or grad() is used.
const bool g_installed = [] {
  ops::SetRecorder(RecordOp);
  SetViewRecorder(RecordView);
  return true;
}();

Tensor Accumulate(const Tensor& a, const Tensor& b) { return a.defined() ? a + b : b; }

struct Target {
  const AutogradMeta* leaf = nullptr;  // leaf input
  const Node* node = nullptr;          // or a non-leaf input: its producer and output number
  int output_nr = 0;
};

struct ByLatest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence < b->sequence; }
};

// Runs backward from `roots`; returns the gradients of `targets` (accumulating into leaves' grad()
// instead when `accumulate` is set).
std::vector<Tensor> Execute(const std::vector<Tensor>& roots, const std::vector<Tensor>& root_grads,
                            const std::vector<Target>& targets, bool accumulate, bool create_graph,
                            bool retain_graph) {
  std::vector<Tensor> captured(targets.size());
  auto capture_leaf = [&](const Tensor& leaf, const Tensor& g) {
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].leaf != nullptr && targets[i].leaf == leaf.autograd_meta()) captured[i] = Accumulate(captured[i], g);
    }
    if (accumulate) {
      AutogradMeta& m = const_cast<Tensor&>(leaf).mutable_autograd_meta();
      const Tensor add = create_graph ? g : g.detach().contiguous();
      m.grad = m.grad.defined() ? (create_graph ? m.grad + add : (m.grad + add).detach()) : add;
    }
  };

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<Node*> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    OAR_CHECK_ARG(r.requires_grad(),
                  "backward: output {} does not require grad and has no grad_fn (was it computed under "
                  "NoGradGuard, from tensors that do not require grad, or by a non-differentiable op?)",
                  i);
    AutogradMeta* m = r.autograd_meta();
    if (!m->grad_fn) {
      capture_leaf(r, root_grads[i]);
      continue;
    }
    Node* n = m->grad_fn.get();
    auto& buf = buffers[n];
    buf.resize(n->outputs.size());
    buf[m->output_nr] = Accumulate(buf[m->output_nr], root_grads[i]);
    starts.push_back(n);
  }

  // Dependencies: how many consumers each reachable node waits for.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack(starts.begin(), starts.end());
  std::unordered_map<Node*, bool> seen;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (seen[n]) continue;
    seen[n] = true;
    OAR_CHECK(!n->released, kFailedPrecondition,
              "backward: trying to backward through the graph a second time (op '{}' has already freed its saved "
              "tensors); pass retain_graph=true to the first backward/grad",
              ops::Schema(n->op).name);
    for (const Node::Edge& e : n->next) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      stack.push_back(e.node.get());
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  for (Node* n : starts) {
    if (deps[n] == 0 && seen[n]) {
      ready.push(n);
      seen[n] = false;  // pushed once
    }
  }
  GradModeGuard mode(create_graph);
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor>& grads = buffers[n];
    grads.resize(n->outputs.size());
    bool any = false;
    for (const Tensor& g : grads) any |= g.defined();
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].node == n && grads[targets[i].output_nr].defined()) {
        captured[i] = Accumulate(captured[i], grads[targets[i].output_nr]);
      }
    }
    std::vector<Tensor> input_grads;
    if (any && n->custom) {
      input_grads = n->custom(grads);
      OAR_CHECK(input_grads.size() == n->inputs.size(), kInternal, "VJP of '{}' returned {} gradients for {} inputs",
                n->custom_name, input_grads.size(), n->inputs.size());
      for (size_t i = 0; i < input_grads.size(); ++i) {
        const Tensor& g = input_grads[i];
        OAR_CHECK(!g.defined() || g.shape() == n->inputs[i].shape(), kInternal,
                  "VJP of '{}' returned a gradient of shape {} for input {} of shape {}", n->custom_name,
                  g.shape().ToString(), i, n->inputs[i].shape().ToString());
      }
    } else if (any) {
      for (size_t i = 0; i < grads.size(); ++i) {
        if (!grads[i].defined()) grads[i] = zeros(n->outputs[i].shape, n->outputs[i].dtype, n->device);
      }
      const ops::OpSchema& s = ops::Schema(n->op);
      input_grads = s.vjp({n->inputs, n->attrs, n->outputs, grads});
      OAR_CHECK(input_grads.size() == n->inputs.size(), kInternal, "VJP of '{}' returned {} gradients for {} inputs",
                s.name, input_grads.size(), n->inputs.size());
      for (size_t i = 0; i < input_grads.size(); ++i) {
        const Tensor& g = input_grads[i];
        if (!g.defined() || !n->next[i].node) continue;
        OAR_CHECK(g.shape() == n->inputs[i].shape(), kInternal,
                  "VJP of '{}' returned a gradient of shape {} for input {} of shape {}", s.name,
                  g.shape().ToString(), i, n->inputs[i].shape().ToString());
      }
    }
    buffers.erase(n);
    for (size_t i = 0; i < n->next.size(); ++i) {
      const Node::Edge& e = n->next[i];
      const Tensor g = i < input_grads.size() ? input_grads[i] : Tensor();
      if (e.node) {
        Node* next = e.node.get();
        if (g.defined()) {
          auto& buf = buffers[next];
          buf.resize(next->outputs.size());
          buf[e.output_nr] = Accumulate(buf[e.output_nr], g);
        }
        if (--deps[next] == 0) ready.push(next);
      } else if (e.leaf.defined() && g.defined()) {
        capture_leaf(e.leaf, g);
      }
    }
    if (!retain_graph) {
      n->inputs.clear();
      n->custom = nullptr;  // frees what the VJP captured
      n->released = true;
    }
  }
  return captured;
}

Tensor SeedFor(const Tensor& output, const Tensor& given, size_t i) {
  if (given.defined()) {
    OAR_CHECK_ARG(given.shape() == output.shape(), "backward: grad_outputs[{}] has shape {} but the output has shape {}",
                  i, given.shape().ToString(), output.shape().ToString());
    return given;
  }
  OAR_CHECK_ARG(output.numel() == 1,
                "backward: output {} has shape {}; a gradient is only implied for scalar outputs, pass "
                "grad_outputs",
                i, output.shape().ToString());
  return ones(output.shape(), output.dtype(), output.device());
}

}  // namespace
}  // namespace oar::autograd

namespace oar {

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::Execute({*this}, {autograd::SeedFor(*this, gradient, 0)}, {}, /*accumulate=*/true, create_graph,
                    retain_graph || create_graph);
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  OAR_CHECK_ARG(grad_outputs.size() == outputs.size(), "backward: got {} grad_outputs for {} outputs",
                grad_outputs.size(), outputs.size());
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    OAR_CHECK_ARG(grad_outputs[i].defined(), "backward: grad_outputs[{}] is undefined", i);
    seeds.push_back(autograd::SeedFor(outputs[i], grad_outputs[i], i));
  }
  autograd::Execute(outputs, seeds, {}, /*accumulate=*/true, /*create_graph=*/false, retain_graph);
}

namespace autograd {

void RecordCustom(std::string_view name, std::span<const Tensor> inputs, std::span<Tensor> outputs, CustomVjp vjp) {
  if (!GradModeEnabled()) return;
  bool needed = false;
  for (const Tensor& t : inputs) needed |= t.defined() && t.requires_grad();
  if (!needed) return;
  auto node = std::make_shared<Node>();
  node->custom = std::move(vjp);
  node->custom_name = std::string(name);
  node->sequence = g_sequence.fetch_add(1);
  for (const Tensor& t : inputs) {
    node->inputs.push_back(t);
    node->next.push_back(EdgeTo(t));
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    node->outputs.push_back({out.dtype(), out.shape()});
    node->device = out.device();
    if (!IsFloating(out.dtype())) continue;
    AutogradMeta& m = out.mutable_autograd_meta();
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<int>(i);
  }
}

}  // namespace autograd

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool create_graph, bool retain_graph,
                         bool allow_unused) {
  OAR_CHECK_ARG(grad_outputs.empty() || grad_outputs.size() == outputs.size(),
                "grad: got {} grad_outputs for {} outputs", grad_outputs.size(), outputs.size());
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    seeds.push_back(autograd::SeedFor(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i], i));
  }
  std::vector<autograd::Target> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    OAR_CHECK_ARG(inputs[i].requires_grad(), "grad: input {} does not require grad", i);
    const AutogradMeta* m = inputs[i].autograd_meta();
    targets.push_back(m->grad_fn ? autograd::Target{nullptr, m->grad_fn.get(), m->output_nr}
                                 : autograd::Target{m, nullptr, 0});
  }
  std::vector<Tensor> result =
      autograd::Execute(outputs, seeds, targets, /*accumulate=*/false, create_graph, retain_graph || create_graph);
  for (size_t i = 0; i < result.size(); ++i) {
    OAR_CHECK_ARG(result[i].defined() || allow_unused,
                  "grad: input {} is not used to compute the outputs (pass allow_unused=true to get an undefined "
                  "gradient instead)",
                  i);
  }
  return result;
}

}  // namespace oar
