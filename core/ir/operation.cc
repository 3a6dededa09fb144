#include "core/ir/operation.h"

#include <algorithm>
#include <new>

#include "core/base/error.h"
#include "core/ir/context.h"
#include "core/ir/dialect.h"
#include "core/ir/storage.h"

namespace oar::ir {

// ---- OpOperand / Value -----------------------------------------------------------------------------------

Value OpOperand::get() const { return Value(value_); }

void OpOperand::set(Value v) {
  Unlink();
  Link(v.impl());
}

void OpOperand::Link(detail::ValueImpl* v) {
  value_ = v;
  if (v == nullptr) return;
  next_ = v->first_use;
  if (next_) next_->prev_ = &next_;
  prev_ = &v->first_use;
  v->first_use = this;
}

void OpOperand::Unlink() {
  if (value_ == nullptr) return;
  *prev_ = next_;
  if (next_) next_->prev_ = prev_;
  value_ = nullptr;
  next_ = nullptr;
  prev_ = nullptr;
}

Block* Value::parent_block() const {
  if (impl_->owner_block) return impl_->owner_block;
  return impl_->owner_op->parent_block();
}

size_t Value::use_count() const {
  size_t n = 0;
  for (OpOperand* u = impl_->first_use; u; u = u->next_use()) ++n;
  return n;
}

void Value::ReplaceAllUsesWith(Value other) {
  if (other == *this) return;
  while (OpOperand* u = impl_->first_use) u->set(other);
}

void Value::ReplaceUsesWithIf(Value other, const std::function<bool(OpOperand&)>& pred) {
  if (other == *this) return;
  OpOperand* u = impl_->first_use;
  while (u) {
    OpOperand* next = u->next_use();
    if (pred(*u)) u->set(other);
    u = next;
  }
}

// ---- Region ----------------------------------------------------------------------------------------------

Region::~Region() { Clear(); }

Block& Region::AddBlock() {
  blocks_.push_back(std::make_unique<Block>(this));
  return *blocks_.back();
}

void Region::Clear() {
  // Drop every operand first, so ops may be destroyed in any order even when they use each other.
  for (auto& b : blocks_) {
    for (Operation* op : *b) {
      op->WalkPostOrder([](Operation* o) {
        for (OpOperand& operand : o->operands()) operand.set(Value());
      });
    }
  }
  blocks_.clear();
}

// ---- Block -----------------------------------------------------------------------------------------------

Block::~Block() {
  while (head_) {
    Operation* op = head_;
    for (OpOperand& operand : op->operands()) operand.set(Value());
    Unlink(op);
    for (uint32_t i = 0; i < op->num_results(); ++i) {
      // Uses may remain only from ops being destroyed with this block; detach them.
      while (OpOperand* u = op->result(i).first_use()) u->set(Value());
    }
    op->Erase();
  }
}

Value Block::AddArgument(Type type) {
  auto impl = std::make_unique<detail::ValueImpl>();
  impl->type = type;
  impl->owner_block = this;
  impl->index = static_cast<uint32_t>(args_.size());
  args_.push_back(std::move(impl));
  return Value(args_.back().get());
}

void Block::Insert(Operation* before, Operation* op) {
  OAR_CHECK(op->parent_ == nullptr, kInternal, "{}: inserting an op that is already in a block", op->name());
  OAR_CHECK(before == nullptr || before->parent_ == this, kInternal, "insertion point is not in this block");
  op->parent_ = this;
  op->next_ = before;
  op->prev_ = before ? before->prev_ : tail_;
  if (op->prev_) op->prev_->next_ = op;
  else head_ = op;
  if (before) before->prev_ = op;
  else tail_ = op;
  ++size_;
}

void Block::Unlink(Operation* op) {
  if (op->prev_) op->prev_->next_ = op->next_;
  else head_ = op->next_;
  if (op->next_) op->next_->prev_ = op->prev_;
  else tail_ = op->prev_;
  op->prev_ = op->next_ = nullptr;
  op->parent_ = nullptr;
  --size_;
}

// ---- Operation -------------------------------------------------------------------------------------------

namespace {
template <typename T> size_t AlignUp(size_t n) { return (n + alignof(T) - 1) / alignof(T) * alignof(T); }
}  // namespace

Operation* Operation::Create(const OpInfo& info, std::span<const Value> operands, std::span<const Type> result_types,
                             std::vector<NamedAttribute> attributes, int num_regions) {
  // One allocation: Operation | results | operands | regions.
  size_t size = sizeof(Operation);
  const size_t results_at = size = AlignUp<detail::ValueImpl>(size);
  size += result_types.size() * sizeof(detail::ValueImpl);
  const size_t operands_at = size = AlignUp<OpOperand>(size);
  size += operands.size() * sizeof(OpOperand);
  const size_t regions_at = size = AlignUp<Region>(size);
  size += static_cast<size_t>(num_regions) * sizeof(Region);
  char* mem = static_cast<char*>(::operator new(size));
  Operation* op = new (mem) Operation();
  op->info_ = &info;
  op->num_results_ = static_cast<uint32_t>(result_types.size());
  op->num_operands_ = static_cast<uint32_t>(operands.size());
  op->num_regions_ = static_cast<uint32_t>(num_regions);
  op->results_ = reinterpret_cast<detail::ValueImpl*>(mem + results_at);
  op->operands_ = reinterpret_cast<OpOperand*>(mem + operands_at);
  op->regions_ = reinterpret_cast<Region*>(mem + regions_at);
  for (size_t i = 0; i < result_types.size(); ++i) {
    detail::ValueImpl* r = new (&op->results_[i]) detail::ValueImpl();
    r->type = result_types[i];
    r->owner_op = op;
    r->index = static_cast<uint32_t>(i);
  }
  for (size_t i = 0; i < operands.size(); ++i) {
    OpOperand* o = new (&op->operands_[i]) OpOperand();
    o->owner_ = op;
    o->index_ = static_cast<uint32_t>(i);
    o->Link(operands[i].impl());
  }
  for (int i = 0; i < num_regions; ++i) new (&op->regions_[i]) Region(op);
  std::sort(attributes.begin(), attributes.end(),
            [](const NamedAttribute& a, const NamedAttribute& b) { return a.name < b.name; });
  op->attrs_ = std::move(attributes);
  return op;
}

void Operation::Erase() {
  if (parent_) parent_->Unlink(this);
  for (uint32_t i = 0; i < num_results_; ++i) {
    OAR_CHECK(results_[i].first_use == nullptr, kInternal, "erasing {} whose result {} is still used", name(), i);
  }
  for (uint32_t i = 0; i < num_regions_; ++i) regions_[i].~Region();
  for (uint32_t i = 0; i < num_operands_; ++i) {
    operands_[i].Unlink();
    operands_[i].~OpOperand();
  }
  for (uint32_t i = 0; i < num_results_; ++i) results_[i].~ValueImpl();
  this->~Operation();
  ::operator delete(static_cast<void*>(this));
}

void Operation::RemoveFromParent() {
  if (parent_) parent_->Unlink(this);
}

std::string_view Operation::name() const { return info_->name; }
IrContext& Operation::context() const { return info_->dialect->context(); }

std::vector<Value> Operation::OperandValues() const {
  std::vector<Value> v;
  v.reserve(num_operands_);
  for (uint32_t i = 0; i < num_operands_; ++i) v.push_back(operand(i));
  return v;
}

std::vector<Value> Operation::results() const {
  std::vector<Value> v;
  v.reserve(num_results_);
  for (uint32_t i = 0; i < num_results_; ++i) v.push_back(result(i));
  return v;
}

bool Operation::HasUses() const {
  for (uint32_t i = 0; i < num_results_; ++i) {
    if (results_[i].first_use) return true;
  }
  return false;
}

Attribute Operation::attr(std::string_view n) const {
  for (const NamedAttribute& a : attrs_) {
    if (a.name == n) return a.value;
  }
  return Attribute();
}

void Operation::SetAttr(std::string_view n, Attribute value) {
  for (NamedAttribute& a : attrs_) {
    if (a.name == n) {
      a.value = value;
      return;
    }
  }
  attrs_.push_back({context().Intern(n), value});
  std::sort(attrs_.begin(), attrs_.end(), [](const NamedAttribute& a, const NamedAttribute& b) { return a.name < b.name; });
}

void Operation::RemoveAttr(std::string_view n) {
  std::erase_if(attrs_, [&](const NamedAttribute& a) { return a.name == n; });
}

Operation* Operation::parent_op() const { return parent_ ? parent_->parent_op() : nullptr; }

bool Operation::IsAncestor(const Operation* other) const {
  for (const Operation* o = other; o; o = o->parent_op()) {
    if (o == this) return true;
  }
  return false;
}

void Operation::Walk(const std::function<void(Operation*)>& fn) {
  fn(this);
  for (uint32_t r = 0; r < num_regions_; ++r) {
    for (const auto& b : regions_[r].blocks()) {
      for (Operation* op : *b) op->Walk(fn);
    }
  }
}

void Operation::WalkPostOrder(const std::function<void(Operation*)>& fn) {
  for (uint32_t r = 0; r < num_regions_; ++r) {
    for (const auto& b : regions_[r].blocks()) {
      for (Operation* op : *b) op->WalkPostOrder(fn);
    }
  }
  fn(this);
}

Operation* Operation::Clone(std::unordered_map<Value, Value, ValueHash>& mapping) const {
  std::vector<Value> operands = OperandValues();
  for (Value& v : operands) {
    auto it = mapping.find(v);
    if (it != mapping.end()) v = it->second;
  }
  std::vector<Type> types;
  for (uint32_t i = 0; i < num_results_; ++i) types.push_back(results_[i].type);
  Operation* op = Create(*info_, operands, types, attrs_, static_cast<int>(num_regions_));
  for (uint32_t i = 0; i < num_results_; ++i) mapping[result(i)] = op->result(i);
  for (uint32_t r = 0; r < num_regions_; ++r) {
    for (const auto& b : regions_[r].blocks()) {
      Block& nb = op->region(r).AddBlock();
      for (size_t a = 0; a < b->num_arguments(); ++a) mapping[b->argument(a)] = nb.AddArgument(b->argument(a).type());
      for (Operation* inner : *b) nb.PushBack(inner->Clone(mapping));
    }
  }
  return op;
}

}  // namespace oar::ir
