#include "agent/command.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace ds4::agent {

namespace {

using Clock = std::chrono::steady_clock;

// Keeps the first half and the last half of max bytes.
class Capture {
 public:
  explicit Capture(size_t max) : half_(max / 2) {}
  void add(const char* p, size_t n) {
    total_ += n;
    const size_t h = std::min(n, half_ - std::min(half_, head_.size()));
    head_.append(p, h);
    p += h, n -= h;
    if (n == 0) return;
    tail_.append(p, n);
    if (tail_.size() > 2 * half_ + 4096) tail_.erase(0, tail_.size() - half_);
  }
  void finish(CommandResult& r) {
    if (tail_.size() > half_) tail_.erase(0, tail_.size() - half_);
    r.total_bytes = total_;
    r.omitted_bytes = total_ - head_.size() - tail_.size();
    r.output = head_;
    if (r.omitted_bytes) r.output += fmt::format("\n[... {} bytes of output omitted ...]\n", r.omitted_bytes);
    r.output += tail_;
  }

 private:
  size_t half_;
  size_t total_ = 0;
  std::string head_, tail_;
};

}  // namespace

CommandResult run_command(const std::string& command, const std::filesystem::path& cwd, const CommandOptions& o) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) fail("run_command: pipe: {}", std::strerror(errno));
  const auto t0 = Clock::now();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    fail("run_command: fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    if (chdir(cwd.c_str()) != 0) _exit(126);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before any kill below
  close(fds[1]);
  CommandResult r;
  Capture cap(o.max_output);
  bool eof = false, exited = false;
  int status = 0;
  Clock::time_point term_at{};
  bool term_sent = false, kill_sent = false;
  char buf[65536];
  while (!exited || !eof) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!term_sent) {
      const bool cancelled = o.cancel && o.cancel->load();
      if (cancelled || elapsed > o.timeout_s) {
        r.end = cancelled ? CommandResult::End::Cancelled : CommandResult::End::TimedOut;
        kill(-pid, SIGTERM);
        term_sent = true;
        term_at = Clock::now();
      }
    } else if (!kill_sent && Clock::now() - term_at > std::chrono::seconds(1)) {
      kill(-pid, SIGKILL);
      kill_sent = true;
    }
    if (!eof) {
      pollfd p{fds[0], POLLIN, 0};
      const int pr = poll(&p, 1, 50);
      if (pr > 0) {
        const ssize_t n = read(fds[0], buf, sizeof buf);
        if (n > 0) cap.add(buf, static_cast<size_t>(n));
        else if (n == 0 || (errno != EINTR && errno != EAGAIN)) eof = true;
      }
    } else if (!exited) {
      usleep(20000);
    }
    if (!exited) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        exited = true;
        // Children that keep the pipe open after the shell exits: stop them too once the
        // command has been stopped; otherwise drain what is left.
        if (term_sent) eof = true;
      }
    }
    if (exited && !eof && term_sent) eof = true;
    if (exited && !eof && !term_sent) {
      // The shell exited; background children may still hold the pipe. Give them until the
      // timeout like the command itself.
    }
  }
  close(fds[0]);
  if (term_sent && !kill_sent) kill(-pid, SIGKILL);  // anything left in the group
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (r.end == CommandResult::End::Exited) {
    if (WIFEXITED(status)) {
      r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      r.end = CommandResult::End::Signaled;
      r.signal = WTERMSIG(status);
    }
  }
  cap.finish(r);
  return r;
}

std::string describe(const CommandResult& r, double timeout_s) {
  std::string head;
  switch (r.end) {
    case CommandResult::End::Exited: head = fmt::format("exit code {}", r.exit_code); break;
    case CommandResult::End::Signaled: head = fmt::format("killed by signal {} ({})", r.signal, strsignal(r.signal)); break;
    case CommandResult::End::TimedOut: head = fmt::format("timed out after {:g} s; the command was killed", timeout_s); break;
    case CommandResult::End::Cancelled: head = "interrupted by the user (Ctrl+C); the command was killed"; break;
  }
  if (r.total_bytes == 0) return head + "\n(no output)";
  std::string out = head + "\n" + r.output;
  if (r.omitted_bytes)
    out += fmt::format("\n[output truncated: {} of {} bytes shown]", r.total_bytes - r.omitted_bytes, r.total_bytes);
  return out;
}

}  // namespace ds4::agent
