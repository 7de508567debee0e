#pragma once
// Subcommand registry for ds4-gguf. Each cmd_<name>.cpp registers itself at static-init time:
//
//   static const bool registered = ds4::tools::register_command(
//       {"inspect", "FILE [--json]   print metadata and tensor table", cmd_inspect});
//
// main.cpp looks the first argument up here and prints every entry for --help.
#include <string>
#include <vector>

namespace ds4::tools {

struct Command {
  std::string name;
  std::string usage;                 // one line: arguments and what it does
  int (*run)(int argc, char** argv); // argv[0] is the subcommand name
};

bool register_command(Command c);
const std::vector<Command>& commands();

}  // namespace ds4::tools
