#include "qkv/cli/python_plot.h"
#include "qkv/cli/quiet.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "qkv/core/error.h"

extern char** environ;

// Throws qkv::Error with the streamed message.
#define QKV_THROW(msg)             \
  do {                             \
    std::ostringstream qkv_os_;    \
    qkv_os_ << msg;                \
    throw ::qkv::Error(qkv_os_.str()); \
  } while (0)

namespace qkv::cli {
namespace {
namespace fs = std::filesystem;

constexpr int kScriptMissingModule = 3;  // plot.py: this python3 lacks matplotlib or NumPy
constexpr const char* kScriptError = "plot.py: error: ";
constexpr const char* kSystemPython = "/usr/bin/python3";

struct Outcome {
  bool started = false;
  std::string spawn_error;  // when not started
  int exit_code = -1;       // -1: killed by a signal
  int signal = 0;
  std::string err;          // the child's stderr
};

// Runs `exe args...` (no shell), stdout inherited, stderr collected.
Outcome spawn(const std::string& exe, const std::vector<std::string>& args) {
  Outcome o;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    o.spawn_error = std::strerror(errno);
    return o;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);  // dup2 clears close-on-exec
  std::vector<std::string> words{exe};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    o.spawn_error = std::strerror(rc);
    return o;
  }
  o.started = true;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      o.err.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    o.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    o.signal = WTERMSIG(status);
  }
  return o;
}

std::optional<std::string> find_in_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate;
  }
  return std::nullopt;
}

// The text after the script's "plot.py: error: " (its last such line), or "".
std::string script_message(const std::string& err) {
  std::string message;
  std::stringstream lines(err);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(kScriptError, 0) == 0) message = line.substr(std::strlen(kScriptError));
  return message;
}

// Everything but the error line, so warnings and tracebacks reach the user.
void forward_other_lines(const std::string& err) {
  std::stringstream lines(err);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(kScriptError, 0) != 0) std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::string last_line(const std::string& text) {
  std::string last;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

std::string plot_script_path() {
  std::error_code ec;
  std::string installed;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    installed = (exe.parent_path() / ".." / "share" / "qkv" / "python" / "qkv" / "plot.py").lexically_normal().string();
    if (fs::is_regular_file(installed, ec)) return installed;
  }
#ifdef QKV_SOURCE_DIR
  const std::string source = std::string(QKV_SOURCE_DIR) + "/python/qkv/plot.py";
  if (fs::is_regular_file(source, ec)) return source;
#else
  const std::string source = "(no source tree compiled in)";
#endif
  QKV_THROW("the plotting script plot.py is missing: looked for " << (installed.empty() ? "<qkv>/../share/qkv/python/qkv/plot.py" : installed)
                                                                 << " and " << source << " (reinstall qkv)");
}

void run_plot_script(const std::vector<std::string>& args) {
  const std::string script = plot_script_path();
  std::vector<std::string> full{script};
  full.insert(full.end(), args.begin(), args.end());

  std::vector<std::string> candidates;
  const char* chosen = std::getenv("QKV_PYTHON");
  const bool explicit_python = chosen && *chosen;
  if (explicit_python) {
    candidates.push_back(chosen);
  } else {
    if (auto p = find_in_path("python3")) candidates.push_back(*p);
    if (candidates.empty() || candidates[0] != kSystemPython) candidates.push_back(kSystemPython);
  }
  std::vector<std::string> problems;  // why each candidate could not draw
  for (const std::string& python : candidates) {
    const Outcome o = spawn(python, full);
    const std::string who = explicit_python ? "QKV_PYTHON=" + python : python;
    if (!o.started) {
      if (!explicit_python && python == kSystemPython && o.spawn_error == std::strerror(ENOENT) && candidates.size() > 1)
        continue;  // no system python3 either: the first candidate's problem says it all
      problems.push_back(who + ": cannot run it (" + o.spawn_error + ")");
      continue;
    }
    if (o.exit_code == kScriptMissingModule) {
      const std::string m = script_message(o.err);
      problems.push_back(m.empty() ? who + " cannot import matplotlib" : (explicit_python ? "QKV_PYTHON=" : "") + m);
      continue;
    }
    if (o.exit_code == 0) {
      if (!quiet_requested()) std::fputs(o.err.c_str(), stderr);  // warnings, e.g. matplotlib building its font cache
      return;
    }
    forward_other_lines(o.err);
    const std::string m = script_message(o.err);
    if (!m.empty()) QKV_THROW(m);
    QKV_THROW("plotting failed: " << who << " " << script << " "
                                 << (o.signal ? "was killed by signal " + std::to_string(o.signal)
                                              : "exited with status " + std::to_string(o.exit_code))
                                 << (last_line(o.err).empty() ? "" : ": " + last_line(o.err)));
  }
  std::string why;
  for (const std::string& p : problems) why += (why.empty() ? "" : "; ") + p;
  QKV_THROW("pictures need python3 with matplotlib: "
           << (why.empty() ? "no python3 found (PATH, " + std::string(kSystemPython) + ")" : why)
           << ". Install them with 'apt-get install python3-matplotlib' (or 'pip install matplotlib' for that python3), "
              "or set QKV_PYTHON to a python3 that has matplotlib");
}

}  // namespace qkv::cli
