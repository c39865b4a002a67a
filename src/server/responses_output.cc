#include "server/responses_output.h"

#include <fmt/format.h>

#include <random>

namespace omnibus::server {
namespace {

using json = nlohmann::json;

std::string suffix_of(const std::string& id) { return id.size() > 5 ? id.substr(5) : id; }
std::string reasoning_id(const std::string& id) { return "rs_" + suffix_of(id); }
std::string message_id(const std::string& id) { return "msg_" + suffix_of(id); }
std::string call_item_id(const std::string& id, size_t i) {
  return fmt::format("fc_{}_{}", suffix_of(id), i);
}

// Typed reads that never throw: a member of another type (or of no object)
// reads as absent.
const json& absent() {
  static const json kAbsent;  // null
  return kAbsent;
}
const json& member(const json& v, const char* key) {
  if (!v.is_object()) return absent();
  const auto it = v.find(key);
  return it == v.end() ? absent() : *it;
}
std::string text_of(const json& v, std::string absent = {}) {
  return v.is_string() ? v.get<std::string>() : absent;
}
int64_t count_of(const json& v) { return v.is_number_integer() ? v.get<int64_t>() : 0; }
// A chat completion's first choice, or absent.
const json& first_choice(const json& chat) {
  const json& choices = member(chat, "choices");
  return choices.is_array() && !choices.empty() ? choices[0] : absent();
}

json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"},
          {"id", reasoning_id(id)},
          {"summary", json::array()},
          {"content", std::move(content)},
          {"status", status}};
}

json message_item(const std::string& id, const std::string& text, const char* status,
                  bool with_part) {
  json content = json::array();
  if (with_part)
    content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", json::array()}});
  return {{"type", "message"},
          {"id", message_id(id)},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

json call_item(const std::string& id, size_t i, const json& call, const char* status,
               bool with_args) {
  const json& fn = member(call, "function");
  return {{"type", "function_call"},
          {"id", call_item_id(id, i)},
          {"call_id", text_of(member(call, "id"))},
          {"name", text_of(member(fn, "name"))},
          {"arguments", with_args ? text_of(member(fn, "arguments"), "{}") : ""},
          {"status", status}};
}

json usage_of(const json& u) {
  if (!u.is_object()) return nullptr;
  const int64_t in = count_of(member(u, "prompt_tokens"));
  const int64_t out = count_of(member(u, "completion_tokens"));
  const int64_t cached = count_of(member(member(u, "prompt_tokens_details"), "cached_tokens"));
  const int64_t reasoning =
      count_of(member(member(u, "completion_tokens_details"), "reasoning_tokens"));
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", cached}, {"cache_write_tokens", 0}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", reasoning}}},
          {"total_tokens", in + out}};
}

}  // namespace

std::string new_response_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("resp_{:016x}{:016x}", rng(), rng());
}

nlohmann::json response_from_chat(const nlohmann::json& chat, const std::string& id,
                                  int64_t created, const nlohmann::json& echo) {
  json r = echo;
  r["id"] = id;
  r["object"] = "response";
  r["created_at"] = created;
  if (chat.contains("model")) r["model"] = chat["model"];  // else the echo's (the served name)
  r["error"] = nullptr;
  const json& choice = first_choice(chat);
  const json& msg = member(choice, "message");
  const std::string reasoning = text_of(member(msg, "reasoning_content"));
  const std::string content = text_of(member(msg, "content"));
  json calls = json::array();
  if (member(msg, "tool_calls").is_array()) {
    for (const json& c : member(msg, "tool_calls")) {
      if (c.is_object()) calls.push_back(c);
    }
  }
  json output = json::array();
  if (!reasoning.empty()) output.push_back(reasoning_item(id, reasoning, "completed"));
  if (!content.empty() || calls.empty())
    output.push_back(message_item(id, content, "completed", true));
  for (size_t i = 0; i < calls.size(); ++i)
    output.push_back(call_item(id, i, calls[i], "completed", true));
  r["output"] = std::move(output);
  const std::string finish = text_of(member(choice, "finish_reason"));
  const bool cut = finish == "length";
  r["status"] = cut || finish == "abort" ? "incomplete" : "completed";
  r["incomplete_details"] = cut ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  r["usage"] = usage_of(member(chat, "usage"));
  return r;
}

nlohmann::json assistant_message_of(const nlohmann::json& chat) {
  const json& msg = member(first_choice(chat), "message");
  json m = {{"role", "assistant"}, {"content", text_of(member(msg, "content"))}};
  const std::string reasoning = text_of(member(msg, "reasoning_content"));
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  const json& calls = member(msg, "tool_calls");
  if (calls.is_array() && !calls.empty()) m["tool_calls"] = calls;
  return m;
}

ResponsesStream::ResponsesStream(std::string id, int64_t created, nlohmann::json echo)
    : id_(std::move(id)), created_(created), echo_(std::move(echo)) {}

std::string ResponsesStream::event(const char* type, nlohmann::json fields) {
  fields["type"] = type;
  fields["sequence_number"] = seq_++;
  return fmt::format("event: {}\ndata: {}\n\n", type,
                     fields.dump(-1, ' ', false, json::error_handler_t::replace));
}

nlohmann::json ResponsesStream::skeleton(const char* status) const {
  json r = echo_;
  r["id"] = id_;
  r["object"] = "response";
  r["created_at"] = created_;
  r["status"] = status;
  r["error"] = nullptr;
  r["incomplete_details"] = nullptr;
  r["output"] = json::array();
  r["usage"] = nullptr;
  return r;
}

std::string ResponsesStream::begin() {
  std::string out = event("response.created", {{"response", skeleton("in_progress")}});
  out += event("response.in_progress", {{"response", skeleton("in_progress")}});
  return out;
}

std::string ResponsesStream::open_item(Open kind) {
  std::string out = close_open();
  open_ = kind;
  item_text_.clear();
  ++output_index_;
  const bool reasoning = kind == Open::kReasoning;
  const json item = reasoning ? reasoning_item(id_, "", "in_progress")
                              : message_item(id_, "", "in_progress", false);
  out += event("response.output_item.added", {{"output_index", output_index_}, {"item", item}});
  const json part =
      reasoning ? json{{"type", "reasoning_text"}, {"text", ""}}
                : json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}};
  out += event("response.content_part.added", {{"item_id", item["id"]},
                                               {"output_index", output_index_},
                                               {"content_index", 0},
                                               {"part", part}});
  return out;
}

std::string ResponsesStream::close_open() {
  if (open_ == Open::kNone) return "";
  const bool reasoning = open_ == Open::kReasoning;
  open_ = Open::kNone;
  const std::string item_id = reasoning ? reasoning_id(id_) : message_id(id_);
  const json where = {{"item_id", item_id}, {"output_index", output_index_}, {"content_index", 0}};
  std::string out;
  json done = where;
  done["text"] = item_text_;
  if (!reasoning) done["logprobs"] = json::array();
  out += event(reasoning ? "response.reasoning_text.done" : "response.output_text.done", done);
  json part = where;
  part["part"] =
      reasoning
          ? json{{"type", "reasoning_text"}, {"text", item_text_}}
          : json{{"type", "output_text"}, {"text", item_text_}, {"annotations", json::array()}};
  out += event("response.content_part.done", part);
  const json item = reasoning ? reasoning_item(id_, item_text_, "completed")
                              : message_item(id_, item_text_, "completed", true);
  out += event("response.output_item.done", {{"output_index", output_index_}, {"item", item}});
  return out;
}

std::string ResponsesStream::on_chunk(const nlohmann::json& chunk) {
  std::string out;
  if (member(chunk, "usage").is_object()) usage_ = member(chunk, "usage");
  if (!member(chunk, "choices").is_array()) return out;
  for (const json& ch : member(chunk, "choices")) {
    if (!ch.is_object()) continue;
    const json& d = member(ch, "delta");
    const std::string r = text_of(member(d, "reasoning_content"));
    if (!r.empty()) {
      if (open_ != Open::kReasoning) out += open_item(Open::kReasoning);
      reasoning_ += r;
      item_text_ += r;
      out += event("response.reasoning_text.delta", {{"item_id", reasoning_id(id_)},
                                                     {"output_index", output_index_},
                                                     {"content_index", 0},
                                                     {"delta", r}});
    }
    const std::string c = text_of(member(d, "content"));
    if (!c.empty()) {
      if (open_ != Open::kMessage) out += open_item(Open::kMessage);
      content_ += c;
      item_text_ += c;
      out += event("response.output_text.delta", {{"item_id", message_id(id_)},
                                                  {"output_index", output_index_},
                                                  {"content_index", 0},
                                                  {"delta", c},
                                                  {"logprobs", json::array()}});
    }
    const json& calls = member(d, "tool_calls");
    for (const json& call : calls.is_array() ? calls : absent()) {  // null: no elements
      if (!call.is_object()) continue;
      out += close_open();
      ++output_index_;
      const size_t i = tool_calls_.size();
      json plain = call;
      plain.erase("index");
      tool_calls_.push_back(plain);
      const std::string item_id = call_item_id(id_, i);
      const std::string args = text_of(member(member(call, "function"), "arguments"), "{}");
      out += event("response.output_item.added",
                   {{"output_index", output_index_},
                    {"item", call_item(id_, i, plain, "in_progress", false)}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", item_id}, {"output_index", output_index_}, {"delta", args}});
      out += event("response.function_call_arguments.done",
                   {{"item_id", item_id},
                    {"output_index", output_index_},
                    {"arguments", args},
                    {"name", text_of(member(member(call, "function"), "name"))}});
      out += event(
          "response.output_item.done",
          {{"output_index", output_index_}, {"item", call_item(id_, i, plain, "completed", true)}});
    }
    if (!member(ch, "finish_reason").is_null()) finish_reason_ = member(ch, "finish_reason");
  }
  return out;
}

std::string ResponsesStream::finish() {
  std::string out = close_open();
  if (content_.empty() &&
      tool_calls_.empty()) {  // the answer was empty: its message item still exists
    out += open_item(Open::kMessage);
    out += close_open();
  }
  json msg = {{"role", "assistant"}, {"content", content_}};
  if (!reasoning_.empty()) msg["reasoning_content"] = reasoning_;
  if (!tool_calls_.empty()) msg["tool_calls"] = tool_calls_;
  completion_ = {
      {"object", "chat.completion"},
      {"choices",
       json::array({{{"index", 0}, {"message", msg}, {"finish_reason", finish_reason_}}})},
      {"usage", usage_}};
  response_ = response_from_chat(completion_, id_, created_, echo_);
  const bool done = response_["status"] == "completed";
  out += event(done ? "response.completed" : "response.incomplete", {{"response", response_}});
  return out;
}

}  // namespace omnibus::server
