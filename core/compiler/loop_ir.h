// The loop IR of CINN: what a fusion group becomes before code generation. A Kernel is a tree of
// statements (loops, local scalars, stores, block-wide reductions) over expressions (loads, arithmetic,
// math functions) on typed scalars. Extents are expressions of the kernel's run-time int64 parameters
// (the group's extents and strides), so one kernel serves every shape of its symbolic signature.
//
// Loop kinds carry the schedule: the one kTask loop at the top is spread over the device's parallelism
// (C: chunks of tasks over the plugin's kernel threads; GPU: one block per task); a kThreads loop is a
// vectorised serial loop in C and the block's threads (strided) on a GPU, and a kBlockReduce after it
// combines each thread's partial accumulator (a no-op where the loop was serial). Code generators
// (codegen.h) print a Kernel as C or CUDA/HIP; the loop interpreter (loop_interpreter.h) runs it directly
// and is the oracle generated code is tested against.
#ifndef OAR_CORE_COMPILER_LOOP_IR_H_
#define OAR_CORE_COMPILER_LOOP_IR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor/dtype.h"

namespace oar::compiler {

enum class ExprOp {
  kIntImm, kFloatImm, kVar, kLoad,
  // unary
  kNeg, kExp, kLog, kLog1p, kSqrt, kRsqrt, kSin, kCos, kTanh, kSigmoid, kErf, kAbs, kSign, kRelu, kReciprocal,
  kNot, kIsNan, kIsInf,
  // binary
  kAdd, kSub, kMul, kDiv, kMod, kMax, kMin, kPow, kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr,
  kSelect,  // args: condition, then, else
  kCast,    // to `dtype`
};

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;

struct ExprNode {
  ExprOp op;
  DType dtype;             ///< the value's type (kBool for predicates)
  int64_t int_value = 0;   ///< kIntImm
  double float_value = 0;  ///< kFloatImm
  std::string var;         ///< kVar: a parameter, loop variable or local
  int buffer = -1;         ///< kLoad: index into Kernel::buffers; args[0] is the element offset
  std::vector<Expr> args;
};

Expr IntImm(int64_t v);
Expr FloatImm(double v, DType dtype);
Expr Var(std::string name, DType dtype = DType::kInt64);
Expr Load(int buffer, DType dtype, Expr offset);
Expr Unary(ExprOp op, Expr a);
/// Arithmetic (result type of `a`) or comparison/logic (bool).
Expr Binary(ExprOp op, Expr a, Expr b);
Expr Select(Expr cond, Expr a, Expr b);
Expr Cast(Expr a, DType to);
/// a + b, a * b on int64 index expressions, folding immediates (0 + x, 1 * x, 0 * x).
Expr IndexAdd(Expr a, Expr b);
Expr IndexMul(Expr a, Expr b);

bool IsComparison(ExprOp op);
const char* ExprOpName(ExprOp op);

enum class LoopKind { kSerial, kTask, kThreads };
enum class ReduceOp { kSum, kProd, kMax, kMin, kOr };

enum class StmtOp {
  kSeq,          ///< body in order
  kFor,          ///< for var in [0, extent) of `loop`: body
  kLocal,        ///< declare mutable scalar `var` of `dtype` = value
  kAssign,       ///< var = value
  kStore,        ///< buffer[offset] = value
  kBlockReduce,  ///< combine `var` over the threads of a kThreads loop that just ended (reduce)
  kSingle,       ///< body run once per task (by one thread on a GPU)
};

struct StmtNode;
using Stmt = std::shared_ptr<StmtNode>;

struct StmtNode {
  StmtOp op;
  std::vector<Stmt> body;  ///< kSeq, kFor, kSingle
  std::string var;         ///< kFor, kLocal, kAssign, kBlockReduce
  DType dtype = DType::kInt64;  ///< kLocal, kBlockReduce
  Expr extent;             ///< kFor
  LoopKind loop = LoopKind::kSerial;
  /// kFor of kind kThreads: the locals this loop accumulates into, and how (for vectorisation pragmas).
  std::vector<std::pair<std::string, ReduceOp>> reductions;
  Expr value;              ///< kLocal, kAssign, kStore
  int buffer = -1;         ///< kStore
  Expr offset;             ///< kStore
  ReduceOp reduce = ReduceOp::kSum;  ///< kBlockReduce
};

Stmt Seq(std::vector<Stmt> body = {});
Stmt For(std::string var, Expr extent, LoopKind kind, std::vector<Stmt> body = {});
Stmt Local(std::string var, DType dtype, Expr value);
Stmt Assign(std::string var, Expr value);
Stmt Store(int buffer, Expr offset, Expr value);
Stmt BlockReduce(std::string var, DType dtype, ReduceOp op);
Stmt Single(std::vector<Stmt> body);

struct KernelBuffer {
  std::string name;
  DType dtype;
  bool output = false;
};

struct Kernel {
  std::string name = "oar_kernel";
  std::vector<KernelBuffer> buffers;   ///< the first arguments, in order
  std::vector<std::string> int_params; ///< then these int64 scalars
  Stmt body;                           ///< a kFor of kind kTask (its var is the task index)
  Expr num_tasks;                      ///< the task loop's extent, from the int parameters
  int threads_per_task = 1;            ///< GPU block size for kThreads loops (a power of two)
  /// Work estimates per element of the task loop's iteration space, for the simulators' roofline time.
  double flops_per_element = 0;
};

/// Readable text of a kernel (for `oar ir opt --passes cinn{print-loops=1}`, logs and tests).
std::string PrintKernel(const Kernel& k);
/// The C spelling of a scalar type ("float", "double", "int64_t", "bool").
const char* CTypeName(DType t);

}  // namespace oar::compiler

#endif  // OAR_CORE_COMPILER_LOOP_IR_H_
