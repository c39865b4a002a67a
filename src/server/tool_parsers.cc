#include "server/tool_parsers.h"

#include <nlohmann/json.hpp>

namespace omnibus::server {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";
constexpr std::string_view kPythonStart = "<|python_start|>";
constexpr std::string_view kPythonEnd = "<|python_end|>";
constexpr std::string_view kXmlFunction = "<function=";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

bool all_ws(std::string_view s) {
  for (char c : s) {
    if (!is_ws(c)) return false;
  }
  return true;
}

size_t first_non_ws(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!is_ws(s[i])) return i;
  }
  return std::string_view::npos;
}

// How text that starts with no whitespace stands against a leading `tag`:
// starts with it whole, is a proper prefix of it (more text may complete it),
// or neither.
enum class TagMatch { kWhole, kPrefix, kNone };
TagMatch match_tag(std::string_view rest, std::string_view tag) {
  if (rest.substr(0, tag.size()) == tag) return TagMatch::kWhole;
  if (rest.size() < tag.size() && tag.substr(0, rest.size()) == rest) return TagMatch::kPrefix;
  return TagMatch::kNone;
}

// The longest proper prefix of `marker` that `s` ends with (its length).
size_t partial_marker_suffix(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k) {
    if (s.substr(s.size() - k) == marker.substr(0, k)) return k;
  }
  return 0;
}

// {"name": string, "arguments" | "parameters": object (or JSON text of one)}.
std::optional<ParsedToolCall> call_from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  nlohmann::ordered_json a = nlohmann::ordered_json::object();
  if (args != j.end()) {
    if (args->is_string()) {
      a = nlohmann::ordered_json::parse(args->get<std::string>(), nullptr,
                                        /*allow_exceptions=*/false);
    } else {
      a = *args;
    }
  }
  if (!a.is_object()) return std::nullopt;
  return ParsedToolCall{name->get<std::string>(), a.dump()};
}

// One call object, or (list_ok) a list of them; false when any is not a call.
bool parse_calls(std::string_view text, bool list_ok, std::vector<ParsedToolCall>& out) {
  const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return false;
  if (j.is_array() && list_ok && !j.empty()) {
    for (const auto& x : j) {
      std::optional<ParsedToolCall> c = call_from_json(x);
      if (!c) return false;
      out.push_back(std::move(*c));
    }
    return true;
  }
  std::optional<ParsedToolCall> c = call_from_json(j);
  if (!c) return false;
  out.push_back(std::move(*c));
  return true;
}

}  // namespace

size_t json_value_end(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth <= 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

void StreamingToolParser::add_call(ParsedToolCall c, ToolParseOutput& out) {
  out.calls.push_back(std::move(c));
  ++n_calls_;
}

ToolParseOutput StreamingToolParser::push(std::string_view delta) {
  ToolParseOutput out;
  if (finished_) return out;
  buf_.append(delta);
  run(false, out);
  return out;
}

ToolParseOutput StreamingToolParser::finish() {
  ToolParseOutput out;
  if (finished_) return out;
  run(true, out);
  finished_ = true;
  return out;
}

void StreamingToolParser::run(bool final, ToolParseOutput& out) {
  if (kind_ == ToolParserKind::kLlama3Json) {
    run_llama3(final, out);
  } else if (kind_ == ToolParserKind::kPythonic) {
    run_pythonic(final, out);
  } else {
    run_marked(final, out);
  }
}

void StreamingToolParser::run_marked(bool final, ToolParseOutput& out) {
  const bool xml = kind_ == ToolParserKind::kQwen3Coder;
  const bool hermes = kind_ == ToolParserKind::kHermes || xml;  // closed by </tool_call>
  const std::string_view marker = hermes ? kHermesOpen : kMistralMarker;
  while (true) {
    if (state_ == State::kInCall) {
      size_t begin = 0, body_end = 0, consumed = 0;
      if (hermes) {
        // A JSON body ends where its value ends, then </tool_call>: a string
        // argument may itself hold "</tool_call>" (a sampled model wrote
        // {"city": "Paris}}</tool_call> ..."} under the tool grammar, and
        // cutting at the first marker turned the call into text).
        const size_t first = xml ? std::string::npos : first_non_ws(buf_);
        const bool json_body =
            first != std::string::npos && (buf_[first] == '{' || buf_[first] == '[');
        const size_t value_end =
            json_body ? json_value_end(std::string_view(buf_).substr(first)) : std::string::npos;
        if (json_body && value_end == std::string::npos && !final) return;  // the value goes on
        size_t end = std::string::npos;
        if (value_end != std::string::npos) {
          const size_t after = first + value_end;
          const size_t ws = first_non_ws(std::string_view(buf_).substr(after));
          const size_t close = ws == std::string::npos ? buf_.size() : after + ws;
          const TagMatch m = match_tag(std::string_view(buf_).substr(close), kHermesClose);
          if (m == TagMatch::kPrefix && !final) return;  // the marker may follow
          if (m == TagMatch::kWhole) end = close;
        }
        if (end == std::string::npos) end = buf_.find(kHermesClose);  // not one JSON value
        if (end == std::string::npos && !final) return;
        body_end = end == std::string::npos ? buf_.size() : end;
        consumed = end == std::string::npos ? buf_.size() : end + kHermesClose.size();
      } else {
        begin = first_non_ws(buf_);
        if (begin == std::string::npos && !final) return;
        const bool bracket =
            begin != std::string::npos && (buf_[begin] == '[' || buf_[begin] == '{');
        const size_t end =
            bracket ? json_value_end(std::string_view(buf_).substr(begin)) : std::string::npos;
        if (bracket && end == std::string::npos && !final) return;
        if (!bracket || end == std::string::npos) {  // not a call list: the marker was text
          out.content += marker;
          state_ = State::kText;
          continue;
        }
        body_end = begin + end;
        consumed = body_end;
      }
      std::vector<ParsedToolCall> calls;
      const std::string_view body = std::string_view(buf_).substr(begin, body_end - begin);
      ParsedToolCall xml_call;
      const bool parsed = xml ? parse_xml_function_call(body, types_.get(), xml_call)
                              : parse_calls(body, !hermes, calls);
      if (xml && parsed) calls.push_back(std::move(xml_call));
      if (parsed) {
        for (ParsedToolCall& c : calls) add_call(std::move(c), out);
        state_ = State::kAfterCall;
      } else {
        out.content += marker;
        out.content += buf_.substr(0, consumed);
        state_ = State::kText;
      }
      buf_.erase(0, consumed);
      continue;
    }
    // kStart, kText, kAfterCall: text until a marker.
    const bool after_call = state_ == State::kAfterCall;
    const size_t pos = buf_.find(marker);
    if (pos != std::string::npos) {
      const std::string_view pre = std::string_view(buf_).substr(0, pos);
      if (!(after_call && all_ws(pre))) out.content += pre;
      buf_.erase(0, pos + marker.size());
      state_ = State::kInCall;
      continue;
    }
    if (final) {
      if (!(after_call && all_ws(buf_))) out.content += buf_;
      buf_.clear();
      return;
    }
    const size_t n = buf_.size() - partial_marker_suffix(buf_, marker);
    if (after_call) {
      if (all_ws(std::string_view(buf_).substr(0, n))) return;
      state_ = State::kText;
    }
    out.content += buf_.substr(0, n);
    buf_.erase(0, n);
    return;
  }
}

// Start state, only whitespace so far: it is the content once the output ends.
void StreamingToolParser::flush_blank(bool final, ToolParseOutput& out) {
  if (!final) return;
  out.content += buf_;
  buf_.clear();
}

void StreamingToolParser::run_llama3(bool final, ToolParseOutput& out) {
  while (true) {
    const size_t i = first_non_ws(buf_);
    switch (state_) {
      case State::kStart: {
        if (i == std::string::npos) return flush_blank(final, out);
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (const TagMatch m = match_tag(rest, kPythonTag); m == TagMatch::kWhole) {
          buf_.erase(0, i + kPythonTag.size());
          state_ = State::kInCall;
        } else if (m == TagMatch::kPrefix) {
          if (!final) return;
          state_ = State::kText;
        } else if (rest[0] == '{') {
          buf_.erase(0, i);
          state_ = State::kInCall;
        } else {
          state_ = State::kText;
        }
        continue;
      }
      case State::kText:
        out.content += buf_;
        buf_.clear();
        return;
      case State::kInCall: {
        if (i == std::string::npos) {
          if (final) buf_.clear();
          return;
        }
        buf_.erase(0, i);
        if (buf_[0] != '{') {
          state_ = State::kText;
          continue;
        }
        const size_t end = json_value_end(buf_);
        if (end == std::string::npos) {
          if (!final) return;
          state_ = State::kText;
          continue;
        }
        std::vector<ParsedToolCall> calls;
        if (!parse_calls(std::string_view(buf_).substr(0, end), /*list_ok=*/false, calls)) {
          state_ = State::kText;
          continue;
        }
        add_call(std::move(calls[0]), out);
        buf_.erase(0, end);
        state_ = State::kAfterCall;
        continue;
      }
      case State::kAfterCall:
        if (i == std::string::npos) {
          if (final) buf_.clear();
          return;
        }
        if (buf_[i] == ';') {
          buf_.erase(0, i + 1);
          state_ = State::kInCall;
        } else if (buf_[i] == '{') {
          buf_.erase(0, i);
          state_ = State::kInCall;
        } else {
          buf_.erase(0, i);
          state_ = State::kText;
        }
        continue;
    }
  }
}

void StreamingToolParser::run_pythonic(bool final, ToolParseOutput& out) {
  while (true) {
    const size_t i = first_non_ws(buf_);
    switch (state_) {
      case State::kStart: {
        if (i == std::string::npos) return flush_blank(final, out);
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (const TagMatch m = match_tag(rest, kPythonStart); m == TagMatch::kWhole) {
          buf_.erase(0, i + kPythonStart.size());
          state_ = State::kInCall;
        } else if (m == TagMatch::kPrefix) {
          if (!final) return;
          state_ = State::kText;
        } else {
          state_ = rest[0] == '[' ? State::kInCall : State::kText;
        }
        continue;
      }
      case State::kText:
        out.content += buf_;
        buf_.clear();
        return;
      case State::kInCall: {
        if (i == std::string::npos || buf_[i] != '[') {
          if (i == std::string::npos && !final) return;
          state_ = State::kText;  // the tag without a list: text
          continue;
        }
        const size_t end = pythonic_list_end(std::string_view(buf_).substr(i));
        if (end == std::string::npos && !final) return;
        std::vector<ParsedToolCall> calls;
        if (end == std::string::npos ||
            !parse_pythonic_calls(std::string_view(buf_).substr(i, end), calls)) {
          state_ = State::kText;
          continue;
        }
        for (ParsedToolCall& c : calls) add_call(std::move(c), out);
        buf_.erase(0, i + end);
        state_ = State::kAfterCall;
        continue;
      }
      case State::kAfterCall: {
        // <|python_end|> and whitespace after the list are dropped; other text is content.
        if (i == std::string::npos) {
          if (final) buf_.clear();
          return;
        }
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (rest.substr(0, kPythonEnd.size()) == kPythonEnd) {
          buf_.erase(0, i + kPythonEnd.size());
          continue;
        }
        if (rest.size() < kPythonEnd.size() && kPythonEnd.substr(0, rest.size()) == rest && !final)
          return;
        buf_.erase(0, i);
        state_ = State::kText;
        continue;
      }
    }
  }
}

ToolParseOutput parse_tool_calls(ToolParserKind kind, std::string_view text) {
  StreamingToolParser p(kind);
  ToolParseOutput out = p.push(text);
  ToolParseOutput rest = p.finish();
  out.content += rest.content;
  for (ParsedToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

ToolParserKind tool_parser_for_template(std::string_view source) {
  if (source.find(kXmlFunction) != std::string_view::npos) return ToolParserKind::kQwen3Coder;
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolParserKind::kHermes;
  if (source.find(kPythonStart) != std::string_view::npos ||
      source.find("[func_name1(") != std::string_view::npos) {
    return ToolParserKind::kPythonic;
  }
  if (source.find(kPythonTag) != std::string_view::npos) return ToolParserKind::kLlama3Json;
  if (source.find(kMistralMarker) != std::string_view::npos) return ToolParserKind::kMistral;
  return ToolParserKind::kHermes;
}

std::optional<ToolParserKind> tool_parser_from_name(std::string_view name) {
  if (name == "hermes") return ToolParserKind::kHermes;
  if (name == "llama3_json") return ToolParserKind::kLlama3Json;
  if (name == "mistral") return ToolParserKind::kMistral;
  if (name == "qwen3_coder") return ToolParserKind::kQwen3Coder;
  if (name == "pythonic") return ToolParserKind::kPythonic;
  return std::nullopt;
}

const char* tool_parser_name(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kHermes:
      return "hermes";
    case ToolParserKind::kLlama3Json:
      return "llama3_json";
    case ToolParserKind::kMistral:
      return "mistral";
    case ToolParserKind::kQwen3Coder:
      return "qwen3_coder";
    case ToolParserKind::kPythonic:
      return "pythonic";
  }
  return "hermes";
}

}  // namespace omnibus::server
