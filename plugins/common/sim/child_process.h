// Test helper: run a scenario in a forked child process and get back what it reports. Used where the
// set-up is read once per process (environment variables read at plugin initialize, the core's
// runtime): the parent never loads the plugin, each child loads it fresh. Header-only, for tests.
#ifndef OAR_PLUGINS_COMMON_SIM_CHILD_PROCESS_H_
#define OAR_PLUGINS_COMMON_SIM_CHILD_PROCESS_H_

#include <sys/wait.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <string>

namespace oar::simtest {

/// Run `fn` in a forked child and return what it returns ("" = success) or how the child died. The
/// child never returns into the test framework (it leaves with _exit).
inline std::string RunInChild(const std::function<std::string()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    close(fds[0]);
    std::string result;
    try {
      result = fn();
    } catch (const std::exception& e) {
      result = std::string("exception: ") + e.what();
    }
    size_t off = 0;
    while (off < result.size()) {
      const ssize_t n = write(fds[1], result.data() + off, result.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(fds[1]);
    _exit(result.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "child killed by signal " + std::to_string(WTERMSIG(status)) + " " + out;
  if (WEXITSTATUS(status) != 0 && out.empty()) return "child exited with " + std::to_string(WEXITSTATUS(status));
  return out;
}

/// Builds "expected X, got Y" failures inside a child (no gtest assertions there).
class Checker {
 public:
  void operator()(bool ok, const std::string& what) {
    if (!ok && failures_.size() < 2000) failures_ += what + "\n";
  }
  const std::string& failures() const { return failures_; }

 private:
  std::string failures_;
};

}  // namespace oar::simtest

#endif  // OAR_PLUGINS_COMMON_SIM_CHILD_PROCESS_H_
