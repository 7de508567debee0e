#pragma once
// The agent's tools: read_file, write_file, edit, list, glob, grep, run_command. File tools
// are confined to the workdir (workdir.h); writes and commands ask for confirmation
// (y / n / always) unless the agent runs with --yes. Every failure becomes a result the model
// reads ("error: ..."), never an exception out of run().
#include <atomic>
#include <string>
#include <vector>

#include "agent/workdir.h"
#include "chat/conversation.h"

namespace ds4::agent {

enum class Answer { Yes, No, Always };

// What the tools need from the user interface.
class ToolHost {
 public:
  virtual ~ToolHost() = default;
  // Asks the user; `question` is one line ("Run `make test`?").
  virtual Answer confirm(const std::string& question) = 0;
  // A unified diff of a pending edit or overwrite (shown before confirm).
  virtual void show_diff(const std::string& diff) = 0;
  // A command starts / ends (for a "running..." line).
  virtual void command_started(const std::string& command) {}
};

struct ToolOutcome {
  bool ok = true;
  std::string text;          // what the model reads
  bool interrupted = false;  // Ctrl+C stopped it
  bool declined = false;     // the user said no
};

struct ToolLimits {
  size_t read_max_lines = 2000;
  size_t read_max_bytes = 100000;
  size_t list_max = 500;
  size_t grep_max_matches = 200;
  size_t command_max_output = 30000;
  double command_timeout_s = 120;     // default when the call gives none
  double command_max_timeout_s = 1800;
};

class Tools {
 public:
  Tools(Workdir workdir, bool yes, ToolLimits limits = {});

  // OpenAI-style function schemas, rendered into the system prompt.
  static std::vector<chat::Json> schemas();

  ToolOutcome run(const chat::ToolCall& call, ToolHost& host, const std::atomic<bool>* cancel);
  const Workdir& workdir() const { return wd_; }

 private:
  ToolOutcome read_file(const chat::Json& a);
  ToolOutcome write_file(const chat::Json& a, ToolHost& host);
  ToolOutcome edit(const chat::Json& a, ToolHost& host);
  ToolOutcome list(const chat::Json& a);
  ToolOutcome glob(const chat::Json& a);
  ToolOutcome grep(const chat::Json& a);
  ToolOutcome command(const chat::Json& a, ToolHost& host, const std::atomic<bool>* cancel);
  bool approve(bool& always, const std::string& question, ToolHost& host, ToolOutcome& declined);

  Workdir wd_;
  bool yes_;
  ToolLimits lim_;
  bool always_write_ = false, always_command_ = false;
};

// Glob matching of a '/'-separated relative path: '*' and '?' and [...] within one segment
// (fnmatch), "**" as a whole segment matches any number of segments (also none).
bool glob_match(std::string_view pattern, std::string_view path);

}  // namespace ds4::agent
