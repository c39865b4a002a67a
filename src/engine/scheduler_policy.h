// SchedulingPolicy: the order in which waiting requests are admitted.
//
//   fcfs         by (priority, arrival): first come, first served.
//   cache-aware  by priority, then the longest cached prefix first (most
//                prompt tokens served from the prefix cache), ties by arrival;
//                a request that has waited max_wait_steps engine steps or more
//                ("aged") goes before every non-aged one of its priority, in
//                arrival order, so none starves. The default.
//
// Thread-safety: values and pure functions.
#pragma once

#include <string_view>

#include "util/status.h"

namespace omnibus {

enum class SchedulingPolicy { kFcfs, kCacheAware };

const char* scheduling_policy_name(SchedulingPolicy p);  // "fcfs", "cache-aware"
// "fcfs" or "cache-aware"; kInvalidArgument otherwise.
StatusOr<SchedulingPolicy> parse_scheduling_policy(std::string_view text);

}  // namespace omnibus
