// jinja::Template: a parsed Jinja-subset template that renders like Python's
// jinja2 with Hugging Face apply_chat_template's environment
// (trim_blocks=True, lstrip_blocks=True, loop controls, tojson as
// json.dumps(ensure_ascii=False), raise_exception / strftime_now globals).
// The supported subset is listed in docs/chat-templates.md.
//
//   OMNIBUS_ASSIGN_OR_RETURN(jinja::Template t, jinja::Template::parse(text));
//   ValueMap vars;  vars.set("messages", ...);
//   OMNIBUS_ASSIGN_OR_RETURN(std::string out, t.render(vars));
//
// Errors are Status values (kInvalidArgument for syntax errors, template
// type errors and raise_exception; kUnsupported for constructs omnibus does
// not implement; kResourceExhausted when a render exceeds its limits) whose
// message names the template line and column. No template text, however
// malformed, crashes the parser or the renderer.
//
// Thread-safety: a Template is immutable after parse(); render() is const and
// may run on many threads at once. Copies share the parsed tree.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "template/jinja_value.h"
#include "util/status.h"

namespace omnibus::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t(64) << 20;
  int64_t max_steps = 10'000'000;  // statements executed + loop iterations
  int max_call_depth = 64;         // nested macro calls
};

class Template {
 public:
  static StatusOr<Template> parse(std::string_view source);

  // Renders with `variables` as the template's globals (plus range,
  // namespace, dict, raise_exception, strftime_now unless overridden).
  StatusOr<std::string> render(const ValueMap& variables, const RenderLimits& limits = {}) const;

  // The normalised source (line endings "\n", one trailing newline dropped).
  const std::string& source() const;

 private:
  struct Parsed;
  explicit Template(std::shared_ptr<const Parsed> p) : parsed_(std::move(p)) {}
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace omnibus::jinja
