// Tests only: holds a rendering to Python jinja2's answer for the same case,
// as tools/golden/gen_chat_golden.py writes them into tests/golden/chat/
// (golden.json for chat templates, jinja_cases.json for interpreter cases).
// A case has "output" (what jinja2 rendered) or "error" (its message) with
// "raised" (true when the template's raise_exception raised it, so that the
// message is the template's own and must appear in ours).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "util/status.h"
#include "util/testdata.h"

namespace omnibus::jinja2_golden {

inline std::string chat_dir() { return testdata::source_dir() + "/tests/golden/chat"; }
inline std::string templates_dir() { return chat_dir() + "/templates"; }

// `what` names the case in failure messages. Json: nlohmann::json or
// nlohmann::ordered_json.
template <typename Json>
void expect_matches(const StatusOr<std::string>& out, const Json& c, const std::string& what) {
  if (c.contains("error")) {
    const std::string error = c["error"].template get<std::string>();
    EXPECT_FALSE(out.is_ok()) << what << ": jinja2 failed with '" << error
                              << "' but omnibus rendered:\n"
                              << *out;
    if (!out.is_ok() && c["raised"].template get<bool>()) {
      EXPECT_NE(out.status().message().find(error), std::string::npos)
          << what << ": " << out.status().message();
    }
    return;
  }
  EXPECT_TRUE(out.is_ok()) << what << ": " << out.status().to_string();
  if (out.is_ok()) {
    EXPECT_EQ(*out, c["output"].template get<std::string>()) << what;
  }
}

}  // namespace omnibus::jinja2_golden
