// oar_gen_op_header: writes sdk/include/oar/plugin/ops.h, the C names of every op and attribute, from the
// op schemas. `oar_gen_op_header FILE` rewrites FILE; `--check FILE` exits 1 when FILE differs (a test
// keeps the committed header in sync with the table).
#include <cctype>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "core/ops/schema.h"

namespace {

std::string Upper(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::string CommentSafe(std::string_view s) {
  std::string out(s);
  for (size_t at = out.find("*/"); at != std::string::npos; at = out.find("*/")) out.replace(at, 2, "* /");
  return out;
}

std::string Header() {
  std::string h =
      "/* Generated from the op schemas (core/ops/schema*.cc) by oar_gen_op_header: do not edit.\n"
      " * The test sdk.op_header_in_sync fails when this file and the schema table differ; regenerate with\n"
      " *   build/bin/oar_gen_op_header sdk/include/oar/plugin/ops.h\n"
      " *\n"
      " * The name of every op the core dispatches (the `op` of oar_kernel_def_t and oar_kernel_call_t) and of\n"
      " * each of its attributes, so a plugin never spells them by hand. Pure C99, no includes. */\n"
      "#ifndef OAR_PLUGIN_OPS_H_\n"
      "#define OAR_PLUGIN_OPS_H_\n\n";
  for (const oar::ops::OpSchema& s : oar::ops::AllSchemas()) {
    std::string in, out;
    for (auto n : s.inputs) in += (in.empty() ? "" : ", ") + std::string(n);
    for (auto n : s.outputs) out += (out.empty() ? "" : ", ") + std::string(n);
    h += fmt::format("/* {}({}{}) -> {}: {} */\n", s.name, in, s.variadic ? "..." : "", out, CommentSafe(s.doc));
    h += fmt::format("#define OAR_OP_{} \"{}\"\n", Upper(s.name), s.name);
    for (const oar::ops::AttrSpec& a : s.attrs) {
      h += fmt::format("#define OAR_OP_{}_ATTR_{} \"{}\"\n", Upper(s.name), Upper(a.name), a.name);
    }
  }
  h += fmt::format("\n/* Number of ops above. */\n#define OAR_OP_COUNT {}\n\n#endif /* OAR_PLUGIN_OPS_H_ */\n",
                   oar::ops::AllSchemas().size());
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc == 3 && std::string(argv[1]) == "--check";
  if (!(argc == 2 || check)) {
    std::fprintf(stderr, "usage: oar_gen_op_header [--check] FILE\n");
    return 2;
  }
  const std::string path = argv[argc - 1];
  const std::string want = Header();
  if (check) {
    std::ifstream in(path, std::ios::binary);
    const std::string have((std::istreambuf_iterator<char>(in)), {});
    if (have == want) return 0;
    std::fprintf(stderr, "%s is out of date with the op schemas; run: build/bin/oar_gen_op_header %s\n", path.c_str(),
                 path.c_str());
    return 1;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << want;
  out.flush();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  return 0;
}
