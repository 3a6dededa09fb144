// The PIR text form: a printer and a parser that round-trip exactly (print(parse(text)) == text for every
// printed program). The syntax is MLIR's generic form:
//
//   %2, %3 = op.max_pool2d(%1) {dilation = [1, 1], kernel = [2, 2], ...} : (tensor<[B, 3, 8, 8], f32>) ->
//            (tensor<[B, 3, 4, 4], f32>, tensor<[B, 3, 4, 4], i64>)
//   %5 = cf.if(%4) ({
//     cf.yield(%2) : (tensor<[2], f32>) -> ()
//   }, {
//     cf.yield(%3) : (tensor<[2], f32>) -> ()
//   }) : (tensor<[], i1>) -> tensor<[2], f32>
//
// Types: tensor<[extents], dtype> with extents static (8), dynamic (?) or symbolic (an identifier);
// scalars (f32, i64, i1, ...); vec<T, ...>. Attributes: true/false, integers, floats (always with a '.',
// an exponent, inf or nan), "strings", [arrays], dtypes (f32), device<"cpu:0">, shape<[B, 8]>, type<T>.
// Attributes are printed sorted by name; those equal to the op's declared default are left out. A block with arguments starts with ^bb(%a: T, ...):
// and `//` starts a comment that runs to the end of the line.
#ifndef OAR_CORE_IR_TEXT_H_
#define OAR_CORE_IR_TEXT_H_

#include <memory>
#include <string>
#include <string_view>

#include "core/ir/builder.h"

namespace oar::ir {

std::string PrintType(const IrContext& ctx, Type t);
std::string PrintAttribute(const IrContext& ctx, Attribute a);
/// `op` and everything nested in it; values are numbered %0, %1, ... in order of definition.
std::string Print(const Operation& op);
std::string Print(const Program& program);

/// Parse a program (one builtin.module op). Errors are oar::Error(kInvalidArgument) with the message
/// "<file>:<line>:<col>: error: expected ..., got ...". The result is not verified (call Verify).
std::unique_ptr<Program> ParseProgram(IrContext& ctx, std::string_view text, std::string_view file = "<input>");
/// Parse a type ("tensor<[B, 8], f32>").
Type ParseType(IrContext& ctx, std::string_view text);

}  // namespace oar::ir

#endif  // OAR_CORE_IR_TEXT_H_
