#pragma once
// run_command: a shell command in its own process group, stdin from /dev/null, stdout and
// stderr merged. Ends at exit, at the timeout, or when `cancel` is set (Ctrl+C): the whole
// group gets SIGTERM, then SIGKILL one second later.
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <string>

namespace ds4::agent {

struct CommandResult {
  enum class End { Exited, Signaled, TimedOut, Cancelled } end = End::Exited;
  int exit_code = 0;    // End::Exited
  int signal = 0;       // End::Signaled
  std::string output;   // head and tail kept when longer than max_output
  size_t total_bytes = 0;
  size_t omitted_bytes = 0;
  double seconds = 0;
};

struct CommandOptions {
  double timeout_s = 120;
  size_t max_output = 30000;  // bytes kept: the first and the last half
  const std::atomic<bool>* cancel = nullptr;
};

// Throws ds4::Error when the process cannot be started.
CommandResult run_command(const std::string& command, const std::filesystem::path& cwd, const CommandOptions& o);

// What the model reads: "exit code N" (or how it ended), then the output with a note where
// bytes were omitted.
std::string describe(const CommandResult& r, double timeout_s);

}  // namespace ds4::agent
