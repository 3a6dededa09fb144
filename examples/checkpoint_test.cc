// A checkpoint is written as a unit: a full disk, a failed write or a kill at any step leaves either the
// previous checkpoint or the new one, whole; every failure is an error (the CLI exits non-zero).
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/base/files.h"
#include "core/ops/ops.h"
#include "examples/models.h"

namespace oar::examples {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("oar_ckpt_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Entries of `dir` other than the named ones (temporaries left behind show up here).
std::vector<std::string> Extra(const fs::path& dir, std::initializer_list<std::string> expected) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) out.push_back(name);
  }
  return out;
}

// The checkpoint at `dir` loads and is exactly `kind` from `seed`: config and weights from one save.
void ExpectCheckpointOf(const fs::path& dir, const std::string& kind, uint64_t seed, const std::string& context) {
  std::unique_ptr<Example> loaded;
  try {
    loaded = LoadCheckpoint(dir, Device("cpu:0"));
  } catch (const Error& e) {
    ADD_FAILURE() << context << ": the checkpoint does not load: " << e.what();
    return;
  }
  EXPECT_EQ(loaded->kind(), kind) << context;
  EXPECT_EQ(loaded->seed(), seed) << context;
  auto fresh = MakeExample(kind, Device("cpu:0"), seed);
  const auto want = fresh->module().StateDict(), got = loaded->module().StateDict();
  ASSERT_EQ(want.size(), got.size()) << context;
  for (const auto& [name, t] : want) {
    EXPECT_EQ(cast(t, DType::kFloat64).ToVector<double>(), cast(got.at(name), DType::kFloat64).ToVector<double>())
        << context << ": tensor " << name;
  }
}

struct ProcessResult {
  int exit_code = -1;  // -1: killed by a signal
  int signal = 0;
  std::string output;
};

// Run `argv` with its output captured (through a pipe: RLIMIT_FSIZE does not apply to it); RLIMIT_FSIZE
// set to `file_size_limit` bytes when nonzero.
ProcessResult Spawn(std::vector<std::string> argv, rlim_t file_size_limit = 0) {
  std::vector<char*> args;  // built before fork: the child may only make async-signal-safe calls
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    if (file_size_limit != 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // get EFBIG from write() instead of a signal
      const rlimit limit{file_size_limit, file_size_limit};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  ProcessResult r;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    r.output.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

TEST(Checkpoint, ReplacesThePreviousOneAndLeavesNothingElse) {
  const fs::path root = TempDir("replace");
  const fs::path dir = root / "ckpt";
  auto mlp = MakeExample("mlp", Device("cpu:0"), 1);
  SaveCheckpoint(*mlp, dir);
  ExpectCheckpointOf(dir, "mlp", 1, "first save");
  auto cnn = MakeExample("cnn", Device("cpu:0"), 2);
  std::vector<std::string> steps;
  SaveCheckpoint(*cnn, root / "ckpt/", [&](const char* s) { steps.push_back(s); });  // a trailing '/' is fine
  ExpectCheckpointOf(dir, "cnn", 2, "second save");
  EXPECT_EQ(steps, (std::vector<std::string>(std::begin(kCheckpointSteps), std::end(kCheckpointSteps))));
  EXPECT_EQ(Extra(root, {"ckpt"}), std::vector<std::string>{});
  EXPECT_EQ(Extra(dir, {"config.json", "model.safetensors"}), std::vector<std::string>{});
  fs::remove_all(root);
}

TEST(Checkpoint, RefusesToReplaceAFolderHoldingOtherFiles) {
  const fs::path root = TempDir("foreign");
  std::ofstream(root / "notes.txt") << "mine";
  auto mlp = MakeExample("mlp", Device("cpu:0"), 1);
  try {
    SaveCheckpoint(*mlp, root);
    FAIL() << "replaced a folder holding notes.txt";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(std::string(e.what()).find("notes.txt"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(root / "notes.txt"));
  fs::remove_all(root);
}

// A kill after each step: what is on disk is one whole checkpoint, the previous one until the new one
// is complete; the next save cleans up what the killed one left.
TEST(Checkpoint, AKillAtEveryStepLeavesOneWholeCheckpoint) {
  for (const char* step : kCheckpointSteps) {
    const fs::path root = TempDir(std::string("kill_") + step);
    const fs::path dir = root / "ckpt";
    auto mlp = MakeExample("mlp", Device("cpu:0"), 1);
    SaveCheckpoint(*mlp, dir);
    const ProcessResult r = Spawn({OAR_CHECKPOINT_HELPER, dir.string(), "cnn", "2", step});
    ASSERT_EQ(r.signal, SIGKILL) << step << ": the helper was not killed: " << r.output;
    const bool replaced = std::string(step) == "replaced";
    if (replaced) {
      ExpectCheckpointOf(dir, "cnn", 2, std::string("killed after ") + step);
    } else {
      ExpectCheckpointOf(dir, "mlp", 1, std::string("killed after ") + step);
    }
    auto next = MakeExample("mlp", Device("cpu:0"), 3);
    SaveCheckpoint(*next, dir);  // and the next save works, removing the dead one's temporary folder
    ExpectCheckpointOf(dir, "mlp", 3, std::string("saved after a kill after ") + step);
    EXPECT_EQ(Extra(root, {"ckpt"}), std::vector<std::string>{}) << step;
    fs::remove_all(root);
  }
}

// Injected write failure (always runs): a file-size limit makes write() fail with EFBIG, as a full disk
// or quota does. `oar train --out` must fail, keep the previous checkpoint and leave no temporary file.
TEST(Checkpoint, AFailedWriteIsAnErrorExitAndKeepsThePreviousCheckpoint) {
  const fs::path root = TempDir("fsize");
  const fs::path dir = root / "ckpt";
  auto mlp = MakeExample("mlp", Device("cpu:0"), 1);
  SaveCheckpoint(*mlp, dir);
  const rlim_t weights = fs::file_size(dir / "model.safetensors");
  for (const rlim_t limit : {rlim_t{64}, weights / 2}) {
    const ProcessResult r =
        Spawn({OAR_CLI, "train", "mlp", "--steps", "1", "--seed", "5", "--out", dir.string()}, limit);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.find("checkpoint written"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
    ExpectCheckpointOf(dir, "mlp", 1, "after a failed write");
    EXPECT_EQ(Extra(root, {"ckpt"}), std::vector<std::string>{}) << "limit " << limit;
    EXPECT_EQ(Extra(dir, {"config.json", "model.safetensors"}), std::vector<std::string>{}) << "limit " << limit;
  }
  fs::remove_all(root);
}

// A real full file system: a small tmpfs, filled so that every amount of free space from none to enough
// is tried. Each `oar train --out` either succeeds with the whole new checkpoint or fails (non-zero exit,
// no "checkpoint written") leaving the previous one whole and no temporary behind. Before, one of these
// exited 0 with a 0-byte config.json.
TEST(Checkpoint, AFullFileSystemNeverLosesTheCheckpoint) {
  const fs::path mnt = TempDir("tmpfs");
  if (::mount("oar_ckpt_test", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    const int error = errno;
    fs::remove_all(mnt);
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(error)
                 << "; needs root or CAP_SYS_ADMIN); AFailedWriteIsAnErrorExitAndKeepsThePreviousCheckpoint "
                    "covers the injected failure";
  }
  const fs::path dir = mnt / "ckpt";
  auto mlp = MakeExample("mlp", Device("cpu:0"), 1);
  SaveCheckpoint(*mlp, dir);
  const uintmax_t needed = fs::file_size(dir / "model.safetensors") + fs::file_size(dir / "config.json");
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(mnt.c_str(), &vfs), 0);
  const uintmax_t page = vfs.f_bsize;
  int failures = 0, successes = 0;
  for (uintmax_t free_pages = 0; free_pages <= needed / page + 4; ++free_pages) {
    fs::remove(mnt / "filler");
    ASSERT_EQ(::statvfs(mnt.c_str(), &vfs), 0);
    const uintmax_t avail = vfs.f_bavail * page;
    if (avail > free_pages * page) {
      std::ofstream filler(mnt / "filler", std::ios::binary);
      const std::string chunk(page, 'x');
      for (uintmax_t i = 0; i < avail / page - free_pages; ++i) filler.write(chunk.data(), chunk.size());
    }
    const uint64_t seed = 10 + free_pages;
    const ProcessResult r = Spawn({OAR_CLI, "train", "mlp", "--steps", "1", "--seed", std::to_string(seed), "--out",
                         dir.string()});
    const std::string context = std::to_string(free_pages) + " free pages";
    if (r.exit_code == 0) {
      ++successes;
      EXPECT_NE(r.output.find("checkpoint written"), std::string::npos) << context << ": " << r.output;
      // --steps 1 trained the weights: check the pair came from one save rather than from the seed.
      auto loaded = LoadCheckpoint(dir, Device("cpu:0"));
      EXPECT_EQ(loaded->seed(), seed) << context;
      EXPECT_GT(fs::file_size(dir / "config.json"), 0u) << context;
    } else {
      ++failures;
      EXPECT_EQ(r.exit_code, 1) << context << ": " << r.output;
      EXPECT_EQ(r.output.find("checkpoint written"), std::string::npos) << context << ": " << r.output;
      EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << context << ": " << r.output;
      auto loaded = LoadCheckpoint(dir, Device("cpu:0"));  // the previous one, whole
      EXPECT_GT(fs::file_size(dir / "config.json"), 0u) << context;
      EXPECT_EQ(Extra(mnt, {"ckpt", "filler"}), std::vector<std::string>{}) << context;
    }
  }
  EXPECT_GT(failures, 0);
  EXPECT_GT(successes, 0);
  ::umount(mnt.c_str());
  fs::remove_all(mnt);
}

// Loading names the file and the cause.
TEST(Checkpoint, LoadErrorsNameTheFileAndTheCause) {
  const fs::path root = TempDir("load");
  const fs::path dir = root / "ckpt";
  auto mlp = MakeExample("mlp", Device("cpu:0"), 1);
  SaveCheckpoint(*mlp, dir);
  auto expect = [&](ErrorCode code, std::vector<std::string> parts) {
    try {
      LoadCheckpoint(dir, Device("cpu:0"));
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  // Weights of another shape (cnn) and other names under an mlp config.
  auto cnn = MakeExample("cnn", Device("cpu:0"), 1);
  cnn->module().Save(root / "cnn.safetensors");
  fs::copy_file(dir / "model.safetensors", root / "mlp.safetensors");
  fs::copy_file(root / "cnn.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  expect(ErrorCode::kInvalidArgument, {(dir / "model.safetensors").string(), "does not match the module"});
  fs::copy_file(root / "mlp.safetensors", dir / "model.safetensors", fs::copy_options::overwrite_existing);
  // A symbolic-link loop used to give "internal error".
  fs::rename(dir / "config.json", root / "config.json");
  fs::create_symlink(dir / "config.json", dir / "config.json");
  expect(ErrorCode::kDataLoss, {(dir / "config.json").string(), "Too many levels of symbolic links"});
  fs::remove(dir / "config.json");
  // A config nested 100,000 deep.
  std::ofstream(dir / "config.json") << std::string(100000, '[') << std::string(100000, ']');
  expect(ErrorCode::kDataLoss, {(dir / "config.json").string(), "nest deeper than"});
  fs::remove_all(root);
}

}  // namespace
}  // namespace oar::examples
