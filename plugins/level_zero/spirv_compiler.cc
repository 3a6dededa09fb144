#include "plugins/level_zero/spirv_compiler.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <tuple>

#include "oar/plugin/cpp/status.hpp"
#include "oar/plugin/plugin.h"
#include "plugins/common/jit_cache.h"

namespace oar::level_zero {
namespace {

namespace fs = std::filesystem;
using host::Env;
using host::JitCache;
using host::ProcessResult;
using sdk::StatusError;

constexpr char kPlugin[] = "level_zero";

const JitCache& Cache() {
  static const JitCache cache(kPlugin, "OARSPV01");
  return cache;
}

const std::vector<std::string>& ClangFlags() {
  static const std::vector<std::string> f = {"-cl-std=CL2.0", "-target", "spir64", "-O0", "-Xclang",
                                             "-disable-O0-optnone", "-emit-llvm", "-c"};
  return f;
}
const std::vector<std::string>& SpirvFlags() {
  static const std::vector<std::string> f = {"--spirv-max-version=1.0"};
  return f;
}

/// The first of `names` that resolves and answers --version (its path and output); `tried` collects failures.
std::pair<std::string, std::string> FirstUsable(const std::vector<std::string>& names, std::string* tried) {
  for (const std::string& name : names) {
    const std::string path = host::ResolveProgram(name);
    if (path.empty()) continue;
    const ProcessResult v = host::RunProcess({path, "--version"});
    if (v.exit_code == 0) return {path, v.output};
    *tried += (tried->empty() ? "" : "; ") + path + " --version failed" +
              (v.error.empty() ? " (exit " + std::to_string(v.exit_code) + ")" : ": " + v.error);
  }
  return {};
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

SpirvToolchain Find(const std::string& clang_override, const std::string& spirv_override) {
  SpirvToolchain t;
  std::string tried;
  const std::vector<std::string> clangs =
      clang_override.empty() ? std::vector<std::string>{"clang-15", "clang"} : std::vector<std::string>{clang_override};
  const auto [clang, clang_version] = FirstUsable(clangs, &tried);
  if (clang.empty()) {
    t.why = "no clang for OpenCL C: " +
            (clang_override.empty() ? "none of " + Join(clangs) + " is on PATH" : "OAR_CLANG=" + clang_override +
                                                                                  " is not an executable file (nor a program on PATH)") +
            (tried.empty() ? "" : " (" + tried + ")") + "; install clang-15 or set OAR_CLANG";
    return t;
  }
  std::vector<std::string> spirvs;
  if (!spirv_override.empty()) {
    spirvs = {spirv_override};
  } else {
    std::smatch m;
    static const std::regex kMajor("clang version ([0-9]+)\\.");
    if (std::regex_search(clang_version, m, kMajor)) spirvs.push_back("llvm-spirv-" + m[1].str());
    spirvs.push_back("llvm-spirv");
  }
  const auto [spirv, spirv_version] = FirstUsable(spirvs, &tried);
  if (spirv.empty()) {
    t.why = "no llvm-spirv for " + clang + ": " +
            (spirv_override.empty() ? "none of " + Join(spirvs) + " is on PATH" : "OAR_LLVM_SPIRV=" + spirv_override +
                                                                                  " is not an executable file (nor a program on PATH)") +
            (tried.empty() ? "" : " (" + tried + ")") +
            "; install the llvm-spirv matching clang's LLVM (llvm-spirv-15 for clang-15) or set OAR_LLVM_SPIRV";
    return t;
  }
  t.clang = clang;
  t.llvm_spirv = spirv;
  t.identity = clang_version + "\n" + spirv_version;
  return t;
}

[[noreturn]] void Fail(oar_status_code code, const std::string& message) {
  throw StatusError(code, std::string(kPlugin) + ": " + message);
}

/// Run one step; a tool that cannot start is UNAVAILABLE, a failing one INVALID_ARGUMENT with its log.
void Step(const std::vector<std::string>& argv, const std::string& what, const fs::path& source_path) {
  const ProcessResult r = host::RunProcess(argv);
  if (r.exit_code == 0) return;
  if (!r.error.empty()) Fail(OAR_STATUS_UNAVAILABLE, "cannot " + what + ": " + r.error + "\n" + r.output);
  Fail(OAR_STATUS_INVALID_ARGUMENT, what + " failed (exit " + std::to_string(r.exit_code) +
                                        "); source: " + source_path.string() + "\ncommand: " +
                                        host::CommandLine(argv) + "\nlog:\n" + r.output);
}

bool IsSpirv(const std::string& bytes) {
  uint32_t magic = 0;
  if (bytes.size() < 20 || bytes.size() % 4 != 0) return false;
  std::memcpy(&magic, bytes.data(), 4);
  return magic == 0x07230203;
}

}  // namespace

SpirvToolchain FindSpirvToolchain() {
  static std::mutex mu;
  static std::map<std::tuple<std::string, std::string, std::string>, SpirvToolchain> memo;
  const std::string clang = Env("OAR_CLANG"), spirv = Env("OAR_LLVM_SPIRV");
  const auto key = std::make_tuple(clang, spirv, Env("PATH"));
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  return memo.emplace(key, Find(clang, spirv)).first->second;
}

std::string CompileOpenClToSpirv(const std::string& source, const std::vector<std::string>& flags,
                                 const std::string& name) {
  const SpirvToolchain tc = FindSpirvToolchain();
  if (!tc.ok()) Fail(OAR_STATUS_UNAVAILABLE, "cannot compile OpenCL C module '" + name + "': " + tc.why);
  std::string material = "oar OpenCL C -> SPIR-V module\n";
  material += "abi " + std::to_string(OAR_PLUGIN_ABI_MAJOR) + "." + std::to_string(OAR_PLUGIN_ABI_MINOR) + "\n";
  material += "clang " + tc.clang + "\nllvm-spirv " + tc.llvm_spirv + "\n" + tc.identity + "\n";
  for (const std::string& f : ClangFlags()) material += "flag " + f + "\n";
  for (const std::string& f : flags) material += "flag " + f + "\n";
  for (const std::string& f : SpirvFlags()) material += "spirv-flag " + f + "\n";
  material += "source\n" + source;
  const std::string key = Cache().Sha256Hex(material);
  const fs::path dir = JitCache::Dir();
  const fs::path entry = dir / (key + ".spv");
  const fs::path source_path = dir / (key + ".cl");

  std::error_code ec;
  if (fs::exists(entry, ec)) {
    std::string spirv;
    if (Cache().Intact(entry, &spirv) && IsSpirv(spirv)) return spirv;
    Cache().Discard(entry, "its checksum trailer does not match (truncated or modified)");
  }
  Cache().CreateDir();
  Cache().WriteAtomically(source_path, source);
  const fs::path bc = JitCache::TemporaryFor(dir / (key + ".bc"));
  const fs::path spv = JitCache::TemporaryFor(entry);
  std::vector<std::string> cl = {tc.clang};
  cl.insert(cl.end(), ClangFlags().begin(), ClangFlags().end());
  cl.insert(cl.end(), flags.begin(), flags.end());
  cl.insert(cl.end(), {"-o", bc.string(), source_path.string()});
  std::vector<std::string> ls = {tc.llvm_spirv};
  ls.insert(ls.end(), SpirvFlags().begin(), SpirvFlags().end());
  ls.insert(ls.end(), {bc.string(), "-o", spv.string()});
  std::string spirv;
  try {
    Step(cl, "compiling OpenCL C module '" + name + "'", source_path);
    Step(ls, "translating OpenCL C module '" + name + "' to SPIR-V", source_path);
    if (!host::ReadFile(spv, &spirv) || !IsSpirv(spirv)) {
      Fail(OAR_STATUS_INTERNAL, tc.llvm_spirv + " wrote no SPIR-V module to " + spv.string());
    }
  } catch (...) {
    fs::remove(bc, ec);
    fs::remove(spv, ec);
    throw;
  }
  fs::remove(bc, ec);
  fs::remove(spv, ec);
  Cache().Store(entry, spirv);
  return spirv;
}

}  // namespace oar::level_zero
