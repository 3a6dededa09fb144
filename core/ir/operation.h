// SSA values, operations, blocks and regions.
//
// An Operation is one allocation holding its results, its operands and its regions. Every Value keeps an
// intrusive list of its uses (OpOperand), so replacing all uses of a value touches only those uses, and
// erasing an op unlinks its operands in O(operands). Blocks hold their operations in an intrusive list
// (O(1) insert and erase anywhere); regions hold blocks.
#ifndef OAR_CORE_IR_OPERATION_H_
#define OAR_CORE_IR_OPERATION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ir/types.h"

namespace oar::ir {

class Block;
class IrContext;
class OpOperand;
class Operation;
class Region;
struct OpInfo;

namespace detail {
/// What a Value points at: an op result or a block argument.
struct ValueImpl {
  Type type;
  OpOperand* first_use = nullptr;
  Operation* owner_op = nullptr;  // results
  Block* owner_block = nullptr;   // block arguments
  uint32_t index = 0;
};
}  // namespace detail

/// A use of a value by an operation (the i-th operand).
class OpOperand {
 public:
  Operation* owner() const { return owner_; }
  uint32_t index() const { return index_; }
  class Value get() const;
  /// Point this operand at `v` (unlinking it from its previous value's use list).
  void set(class Value v);
  OpOperand* next_use() const { return next_; }

 private:
  friend class Operation;
  friend class Value;
  void Link(detail::ValueImpl* v);
  void Unlink();

  detail::ValueImpl* value_ = nullptr;
  OpOperand* next_ = nullptr;
  OpOperand** prev_ = nullptr;  // the pointer that points at this operand
  Operation* owner_ = nullptr;
  uint32_t index_ = 0;
};

/// An SSA value: a handle to an op result or a block argument. A null Value is "none".
class Value {
 public:
  Value() = default;
  explicit Value(detail::ValueImpl* impl) : impl_(impl) {}
  explicit operator bool() const { return impl_ != nullptr; }
  friend bool operator==(Value a, Value b) { return a.impl_ == b.impl_; }
  detail::ValueImpl* impl() const { return impl_; }

  Type type() const { return impl_->type; }
  void set_type(Type t) { impl_->type = t; }
  /// The op that defines this value; nullptr for block arguments.
  Operation* defining_op() const { return impl_->owner_op; }
  /// The block whose argument this is; nullptr for op results.
  Block* owner_block() const { return impl_->owner_block; }
  /// Result number or argument number.
  uint32_t index() const { return impl_->index; }
  /// The block this value is defined in.
  Block* parent_block() const;

  bool use_empty() const { return impl_->first_use == nullptr; }
  size_t use_count() const;
  bool HasOneUse() const { return impl_->first_use && !impl_->first_use->next_use(); }
  OpOperand* first_use() const { return impl_->first_use; }
  /// Every use of this value now uses `other`.
  void ReplaceAllUsesWith(Value other);
  /// The uses for which `pred` holds now use `other`.
  void ReplaceUsesWithIf(Value other, const std::function<bool(OpOperand&)>& pred);

 private:
  detail::ValueImpl* impl_ = nullptr;
};

struct ValueHash {
  size_t operator()(Value v) const { return std::hash<const void*>()(v.impl()); }
};

/// Where an op was parsed from (line 0: built in memory).
struct Location {
  uint32_t line = 0;
  uint32_t col = 0;
};

/// One named attribute of an op.
struct NamedAttribute {
  std::string_view name;  // interned in the context
  Attribute value;
};

/// A list of blocks owned by an operation.
class Region {
 public:
  explicit Region(Operation* parent) : parent_(parent) {}
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  Operation* parent_op() const { return parent_; }
  bool empty() const { return blocks_.empty(); }
  size_t size() const { return blocks_.size(); }
  Block& front() const { return *blocks_.front(); }
  Block& block(size_t i) const { return *blocks_[i]; }
  const std::vector<std::unique_ptr<Block>>& blocks() const { return blocks_; }
  /// Append a new empty block.
  Block& AddBlock();
  /// Drop every block (their ops are erased; no value defined inside may still be used outside).
  void Clear();

 private:
  Operation* parent_;
  std::vector<std::unique_ptr<Block>> blocks_;
};

/// An operation: `results = name(operands) (regions) {attributes}`.
class Operation {
 public:
  /// Create a detached operation. Operands may be null Values only while being built (the verifier refuses
  /// them). Attributes are kept sorted by name.
  static Operation* Create(const OpInfo& info, std::span<const Value> operands, std::span<const Type> result_types,
                           std::vector<NamedAttribute> attributes, int num_regions);
  /// Erase this op: unlink it from its block, drop its operand uses and free it. Its results must be unused.
  void Erase();
  /// Unlink from the parent block without destroying (it can be inserted elsewhere).
  void RemoveFromParent();

  const OpInfo& info() const { return *info_; }
  std::string_view name() const;
  IrContext& context() const;

  // ---- operands ----
  uint32_t num_operands() const { return num_operands_; }
  Value operand(uint32_t i) const { return operands()[i].get(); }
  std::span<OpOperand> operands() const { return {operands_, num_operands_}; }
  void SetOperand(uint32_t i, Value v) { operands_[i].set(v); }
  std::vector<Value> OperandValues() const;

  // ---- results ----
  uint32_t num_results() const { return num_results_; }
  Value result(uint32_t i) const { return Value(&results_[i]); }
  std::vector<Value> results() const;
  /// Any result has a use.
  bool HasUses() const;

  // ---- attributes ----
  const std::vector<NamedAttribute>& attributes() const { return attrs_; }
  /// Null when absent.
  Attribute attr(std::string_view name) const;
  void SetAttr(std::string_view name, Attribute value);
  void RemoveAttr(std::string_view name);

  // ---- regions ----
  uint32_t num_regions() const { return num_regions_; }
  Region& region(uint32_t i) const { return regions_[i]; }

  // ---- position ----
  const Location& location() const { return loc_; }
  void set_location(Location loc) { loc_ = loc; }
  Block* parent_block() const { return parent_; }
  Operation* parent_op() const;
  Operation* next() const { return next_; }
  Operation* prev() const { return prev_; }
  /// This op is `other` or nested in one of its regions.
  bool IsAncestor(const Operation* other) const;

  /// Visit this op and every op nested in its regions, parents before children (pre-order). The callback
  /// may erase the op it is given only in post-order walks.
  void Walk(const std::function<void(Operation*)>& fn);
  void WalkPostOrder(const std::function<void(Operation*)>& fn);

  /// A deep copy (regions included). Operands defined outside are looked up in `mapping` (old -> new) and
  /// kept as they are when absent; every result and nested value is added to `mapping`.
  Operation* Clone(std::unordered_map<Value, Value, ValueHash>& mapping) const;

 private:
  friend class Block;
  Operation() = default;
  ~Operation() = default;

  const OpInfo* info_ = nullptr;
  Block* parent_ = nullptr;
  Operation* prev_ = nullptr;
  Operation* next_ = nullptr;
  detail::ValueImpl* results_ = nullptr;
  OpOperand* operands_ = nullptr;
  Region* regions_ = nullptr;
  uint32_t num_results_ = 0, num_operands_ = 0, num_regions_ = 0;
  Location loc_;
  std::vector<NamedAttribute> attrs_;
};

/// A basic block: arguments and an ordered list of operations.
class Block {
 public:
  explicit Block(Region* parent) : parent_(parent) {}
  ~Block();
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  Region* parent_region() const { return parent_; }
  Operation* parent_op() const { return parent_ ? parent_->parent_op() : nullptr; }

  // ---- arguments ----
  Value AddArgument(Type type);
  size_t num_arguments() const { return args_.size(); }
  Value argument(size_t i) const { return Value(args_[i].get()); }

  // ---- operations ----
  Operation* front() const { return head_; }
  Operation* back() const { return tail_; }
  bool empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }
  /// Insert `op` (detached) before `before`; at the end when `before` is null.
  void Insert(Operation* before, Operation* op);
  void PushBack(Operation* op) { Insert(nullptr, op); }

  /// Iteration that tolerates erasing the current op.
  class iterator {
   public:
    explicit iterator(Operation* op) : op_(op), next_(op ? op->next() : nullptr) {}
    Operation* operator*() const { return op_; }
    iterator& operator++() {
      op_ = next_;
      next_ = op_ ? op_->next() : nullptr;
      return *this;
    }
    friend bool operator!=(const iterator& a, const iterator& b) { return a.op_ != b.op_; }

   private:
    Operation* op_;
    Operation* next_;
  };
  iterator begin() const { return iterator(head_); }
  iterator end() const { return iterator(nullptr); }

 private:
  friend class Operation;
  void Unlink(Operation* op);

  Region* parent_;
  std::vector<std::unique_ptr<detail::ValueImpl>> args_;
  Operation* head_ = nullptr;
  Operation* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace oar::ir

#endif  // OAR_CORE_IR_OPERATION_H_
