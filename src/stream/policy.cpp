#include "stream/policy.h"

#include "core/error.h"

namespace ds4::stream {

PolicyKind parse_policy(std::string_view s) {
  if (s == "lru") return PolicyKind::Lru;
  if (s == "hot") return PolicyKind::Hot;
  fail("unknown cache policy '{}' (expected lru or hot)", s);
}

const char* policy_name(PolicyKind k) { return k == PolicyKind::Lru ? "lru" : "hot"; }

}  // namespace ds4::stream
