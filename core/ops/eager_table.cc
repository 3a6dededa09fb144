// The eager functions of the plain elementwise ops, one per line of schema.h's op lists (OAR_BINARY_OPS,
// OAR_COMPARE_OPS, OAR_PREDICATE_OPS, OAR_UNARY_OPS): each runs its op's schema record and nothing more.
#include "core/ops/ops.h"

namespace oar {
namespace {

Tensor RunBinary(ops::Op op, const Tensor& a, const Tensor& b) {
  const Tensor in[] = {a, b};
  return ops::RunOne(op, in);
}
Tensor RunUnary(ops::Op op, const Tensor& x) { return ops::RunOne(op, {&x, 1}); }

}  // namespace

#define OAR_DEFINE_BINARY_(e, name) \
  Tensor name(const Tensor& a, const Tensor& b) { return RunBinary(ops::Op::e, a, b); }
#define OAR_DEFINE_UNARY_(e, name) \
  Tensor name(const Tensor& x) { return RunUnary(ops::Op::e, x); }
OAR_BINARY_OPS(OAR_DEFINE_BINARY_)
OAR_COMPARE_OPS(OAR_DEFINE_BINARY_)
OAR_PREDICATE_OPS(OAR_DEFINE_UNARY_)
OAR_UNARY_OPS(OAR_DEFINE_UNARY_)

}  // namespace oar
