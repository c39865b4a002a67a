#include "engine/scheduler_policy.h"

#include <string>

namespace omnibus {

const char* scheduling_policy_name(SchedulingPolicy p) {
  return p == SchedulingPolicy::kFcfs ? "fcfs" : "cache-aware";
}

StatusOr<SchedulingPolicy> parse_scheduling_policy(std::string_view text) {
  if (text == "fcfs") return SchedulingPolicy::kFcfs;
  if (text == "cache-aware") return SchedulingPolicy::kCacheAware;
  return Status::invalid_argument("--scheduling-policy '{}' must be fcfs or cache-aware",
                                  std::string(text));
}

}  // namespace omnibus
