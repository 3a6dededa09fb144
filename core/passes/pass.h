// Passes and the PassManager.
//
// A pass transforms a Program in place. The PassManager runs a pipeline given as a string of registered
// pass names ("dce,cse,canonicalize"), verifies the program after every pass (an error names the pass
// that broke it), can print the IR before/after any or all passes, and times each pass.
//
// IR printing is also switched on by OAR_IR_PRINT: "after-all", "before-all", or a comma-separated list of
// pass names to print after.
#ifndef OAR_CORE_PASSES_PASS_H_
#define OAR_CORE_PASSES_PASS_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/builder.h"

namespace oar::passes {

class Pass {
 public:
  virtual ~Pass() = default;
  /// The name used in pipelines ("cse").
  virtual std::string_view name() const = 0;
  /// Transform `program` in place. Throws oar::Error on failure.
  virtual void Run(ir::Program& program) = 0;
};

/// Options of one pass in a pipeline: `kernel-select{device=kunlun_sim:0}`.
using PassOptions = std::map<std::string, std::string, std::less<>>;
using PassFactory = std::function<std::unique_ptr<Pass>(const PassOptions&)>;

/// Register a pass under its name. The factory throws kInvalidArgument for options it does not know.
void RegisterPass(std::string_view name, std::string_view description, PassFactory make);
/// For factories: throw kInvalidArgument naming `pass` and every option not in `known`.
void CheckPassOptions(std::string_view pass, const PassOptions& options, std::initializer_list<std::string_view> known);
struct PassInfo {
  std::string name;
  std::string description;
};
/// Every registered pass, by name.
std::vector<PassInfo> RegisteredPasses();
/// A new instance of pass `name`; throws kNotFound listing the registered passes.
std::unique_ptr<Pass> CreatePass(std::string_view name, const PassOptions& options = {});

struct PassTiming {
  std::string pass;
  std::chrono::nanoseconds time{0};
};

class PassManager {
 public:
  struct Options {
    bool print_before_all = false;
    bool print_after_all = false;
    std::set<std::string, std::less<>> print_after;  ///< pass names to print after
    bool verify_each = true;
    /// Where printed IR goes (default: stderr), with a header line "// -----// IR after cse //----- //".
    std::function<void(std::string_view header, std::string_view ir)> print;
  };

  PassManager();
  /// Options from OAR_IR_PRINT (see above); throws kInvalidArgument naming a bad value.
  void ConfigureFromEnvironment();
  Options& options() { return options_; }

  void AddPass(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  /// Append the passes of "a,b{opt=v,opt2=w},c" (spaces allowed; an empty pipeline adds nothing). Throws
  /// kInvalidArgument naming the unknown pass or option and its position, listing the registered passes.
  void AddPipeline(std::string_view pipeline);
  size_t size() const { return passes_.size(); }

  /// Verify, run every pass in order (verifying after each), record timings.
  void Run(ir::Program& program);
  const std::vector<PassTiming>& timings() const { return timings_; }
  /// "pass  time  share" table of the last Run.
  std::string TimingReport() const;

 private:
  Options options_;
  std::vector<std::unique_ptr<Pass>> passes_;
  std::vector<PassTiming> timings_;
};

}  // namespace oar::passes

#endif  // OAR_CORE_PASSES_PASS_H_
