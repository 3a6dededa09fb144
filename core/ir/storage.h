// The uniqued storage behind Type and Attribute handles (private to core/ir).
#ifndef OAR_CORE_IR_STORAGE_H_
#define OAR_CORE_IR_STORAGE_H_

#include <string>
#include <vector>

#include "core/ir/types.h"

namespace oar::ir::detail {

struct TypeStorage {
  const IrContext* ctx = nullptr;
  TypeKind kind = TypeKind::kTensor;
  DType dtype = DType::kInvalid;
  Dims dims;
  std::vector<Type> elements;
};

struct AttrStorage {
  const IrContext* ctx = nullptr;
  AttrKind kind = AttrKind::kBool;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<Attribute> elements;
  DType dtype = DType::kInvalid;
  Dims dims;
  Type type;
};

}  // namespace oar::ir::detail

#endif  // OAR_CORE_IR_STORAGE_H_
