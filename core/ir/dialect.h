// Dialects: named groups of ops. Each op is described once by an OpInfo — its operand/result/region
// counts, its attributes, its traits and its interfaces (result-type inference, extra verification, the
// op schema it comes from). The `op` dialect is generated from the op schemas in core/ops; it never keeps a
// second op list.
#ifndef OAR_CORE_IR_DIALECT_H_
#define OAR_CORE_IR_DIALECT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/operation.h"
#include "core/ir/types.h"

namespace oar::ops {
struct OpSchema;
}  // namespace oar::ops

namespace oar::ir {

class IrContext;

/// Op traits, as a bit set.
enum Trait : uint32_t {
  kPure = 1u << 0,              ///< no side effects: may be removed when unused, deduplicated, hoisted
  kCommutative = 1u << 1,       ///< the first two operands may be swapped
  kSameShape = 1u << 2,         ///< the result has the shape of the first operand
  kTerminator = 1u << 3,        ///< ends a block
  kIsolatedFromAbove = 1u << 4, ///< regions may not use values defined outside the op
  kConstantLike = 1u << 5,      ///< has no operands and produces a value known at compile time
  kElementwise = 1u << 6,       ///< computes each output element from the same-index input elements
  kReduction = 1u << 7,         ///< reduces over axes
  kView = 1u << 8,              ///< a metadata change of its input (reshape, permute, slice, ...)
};

/// How one attribute of an op is declared.
struct AttrDef {
  std::string_view name;
  AttrKind kind;
  /// Omitted attributes take this value (null: the attribute is required).
  Attribute default_value;
  /// kArray attributes: the kind every element must have.
  AttrKind element_kind = AttrKind::kInt;
  /// kArray attributes whose elements may be of any kind (checked by the op's verifier).
  bool any_elements = false;
};

/// What result-type inference and verification see.
struct OpSignature {
  std::span<const Type> operand_types;
  const std::vector<NamedAttribute>& attributes;
};

/// Result types from operand types and attributes; throws oar::Error (kInvalidArgument) naming the op
/// and the rule broken.
using InferFn = std::vector<Type> (*)(IrContext& ctx, const OpInfo& info, const OpSignature& sig);
/// Extra structural checks; throws oar::Error describing the problem.
using VerifyFn = void (*)(const Operation& op);

struct OpInfo {
  std::string name;          ///< "dialect.op"
  const class Dialect* dialect = nullptr;
  uint32_t traits = 0;
  int num_operands = 0;      ///< -1: variadic
  int num_results = 0;       ///< -1: variadic
  int num_regions = 0;
  std::vector<AttrDef> attrs;
  InferFn infer = nullptr;   ///< optional: result types (used by the Builder and checked by the verifier)
  VerifyFn verify = nullptr; ///< optional
  const ops::OpSchema* schema = nullptr;  ///< the op schema of an `op` dialect op

  bool Has(Trait t) const { return (traits & t) != 0; }
  const AttrDef* FindAttr(std::string_view n) const;
};

class Dialect {
 public:
  Dialect(IrContext& ctx, std::string name) : ctx_(ctx), name_(std::move(name)) {}
  virtual ~Dialect() = default;
  const std::string& name() const { return name_; }
  IrContext& context() const { return ctx_; }
  /// Register an op; `info.name` is the short name ("add"), stored as "dialect.add".
  const OpInfo& AddOp(OpInfo info);
  const std::vector<std::unique_ptr<OpInfo>>& ops() const { return ops_; }

 private:
  IrContext& ctx_;
  std::string name_;
  std::vector<std::unique_ptr<OpInfo>> ops_;
};

/// Register the built-in dialects into `ctx` (called by IrContext's constructor).
void RegisterBuiltinDialect(IrContext& ctx);  // builtin.*: module, data, parameter, constant, output, combine, split
void RegisterControlFlowDialect(IrContext& ctx);  // cf.*: if, while, condition, yield
void RegisterOpDialect(IrContext& ctx);       // op.*: one op per op schema
void RegisterKernelDialect(IrContext& ctx);   // kernel.*: op.* bound to a device and format; transfer, format_cast

/// Attributes whose name contains a '.' ("oar.inplace") are discardable annotations that passes attach to
/// any op (as in MLIR): they are kept, printed and parsed, but not declared or checked by the op.
bool IsDiscardableAttr(std::string_view name);

/// `attrs` completed with the defaults of `info` and checked against its declarations (unknown names, wrong
/// kinds, missing required ones); sorted by name. Throws oar::Error naming the op.
std::vector<NamedAttribute> CompleteAttributes(IrContext& ctx, const OpInfo& info, std::vector<NamedAttribute> attrs);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_DIALECT_H_
