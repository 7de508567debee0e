// Subcommand registry (see command.h). A function-local static, so registrations made during
// static initialization of other translation units find it constructed.
#include "command.h"

#include <algorithm>

namespace ds4::tools {

namespace {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace

bool register_command(Command c) {
  auto& r = registry();
  auto at = std::lower_bound(r.begin(), r.end(), c.name, [](const Command& a, const std::string& n) { return a.name < n; });
  r.insert(at, std::move(c));
  return true;
}

const std::vector<Command>& commands() { return registry(); }

}  // namespace ds4::tools
