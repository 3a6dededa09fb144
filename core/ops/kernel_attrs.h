// How an op's attribute values reach its kernel, shared by eager dispatch (eager.cc) and kernel selection's
// supports() query (core/passes/kernel_select.cc), so that a plugin is asked about exactly the call it will
// get: the same names, types and values.
#ifndef OAR_CORE_OPS_KERNEL_ATTRS_H_
#define OAR_CORE_OPS_KERNEL_ATTRS_H_

#include <cstddef>

#include "core/ops/schema.h"
#include "core/runtime/dispatch.h"
#include "oar/plugin/kernel.h"

namespace oar::ops {

/// The dtype a FLOAT `value` attribute is headed for: a fill's result (or any op without inputs), else the
/// first input's.
DType KernelValueDType(const OpSchema& s, DType first_input, DType first_output);

/// A FLOAT value headed for an integer or bool tensor, converted with the cast rules (docs/ops.md):
/// truncated toward zero and saturated to the dtype's range (±inf too), NaN -> 0; for bool, nonzero (NaN
/// included) -> 1.
int64_t IntegralValue(double v, DType dtype);

/// Attribute `i` of `s` with value `v` as the kernel sees it: a FLOAT `value` headed for an integer or bool
/// tensor (`value_dtype`) becomes INT (IntegralValue); an INTS payload points into `v`.
runtime::KernelAttr ToKernelAttr(const OpSchema& s, size_t i, const AttrValue& v, DType value_dtype);

/// The plugin ABI's form of a kernel attribute: the runtime's, the one Launch uses.
using runtime::ToAbiAttr;

}  // namespace oar::ops

#endif  // OAR_CORE_OPS_KERNEL_ATTRS_H_
