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
  const json& fn = call["function"];
  return {{"type", "function_call"},
          {"id", call_item_id(id, i)},
          {"call_id", call.value("id", "")},
          {"name", fn.value("name", "")},
          {"arguments", with_args ? fn.value("arguments", "{}") : ""},
          {"status", status}};
}

json usage_of(const json& u) {
  if (!u.is_object()) return nullptr;
  const int64_t in = u.value("prompt_tokens", int64_t(0));
  const int64_t out = u.value("completion_tokens", int64_t(0));
  int64_t cached = 0, reasoning = 0;
  if (u.contains("prompt_tokens_details"))
    cached = u["prompt_tokens_details"].value("cached_tokens", int64_t(0));
  if (u.contains("completion_tokens_details")) {
    reasoning = u["completion_tokens_details"].value("reasoning_tokens", int64_t(0));
  }
  return {{"input_tokens", in},
          {"input_tokens_details", {{"cached_tokens", cached}, {"cache_write_tokens", 0}}},
          {"output_tokens", out},
          {"output_tokens_details", {{"reasoning_tokens", reasoning}}},
          {"total_tokens", in + out}};
}

std::string text_of(const json& v) { return v.is_string() ? v.get<std::string>() : std::string(); }

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
  const json& choice = chat["choices"][0];
  const json& msg = choice["message"];
  const std::string reasoning = text_of(msg.value("reasoning_content", json(nullptr)));
  const std::string content = text_of(msg.value("content", json(nullptr)));
  const json calls = msg.value("tool_calls", json::array());
  json output = json::array();
  if (!reasoning.empty()) output.push_back(reasoning_item(id, reasoning, "completed"));
  if (!content.empty() || calls.empty())
    output.push_back(message_item(id, content, "completed", true));
  for (size_t i = 0; i < calls.size(); ++i)
    output.push_back(call_item(id, i, calls[i], "completed", true));
  r["output"] = std::move(output);
  const std::string finish = text_of(choice.value("finish_reason", json(nullptr)));
  const bool cut = finish == "length";
  r["status"] = cut || finish == "abort" ? "incomplete" : "completed";
  r["incomplete_details"] = cut ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  r["usage"] = usage_of(chat.value("usage", json(nullptr)));
  return r;
}

nlohmann::json assistant_message_of(const nlohmann::json& chat) {
  const json& msg = chat["choices"][0]["message"];
  json m = {{"role", "assistant"}, {"content", text_of(msg.value("content", json(nullptr)))}};
  const std::string reasoning = text_of(msg.value("reasoning_content", json(nullptr)));
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (msg.contains("tool_calls") && !msg["tool_calls"].empty()) m["tool_calls"] = msg["tool_calls"];
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
  if (chunk.contains("usage") && chunk["usage"].is_object()) usage_ = chunk["usage"];
  if (!chunk.contains("choices") || !chunk["choices"].is_array()) return out;
  for (const json& ch : chunk["choices"]) {
    const json d = ch.value("delta", json::object());
    const std::string r = text_of(d.value("reasoning_content", json(nullptr)));
    if (!r.empty()) {
      if (open_ != Open::kReasoning) out += open_item(Open::kReasoning);
      reasoning_ += r;
      item_text_ += r;
      out += event("response.reasoning_text.delta", {{"item_id", reasoning_id(id_)},
                                                     {"output_index", output_index_},
                                                     {"content_index", 0},
                                                     {"delta", r}});
    }
    const std::string c = text_of(d.value("content", json(nullptr)));
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
    for (const json& call : d.value("tool_calls", json::array())) {
      out += close_open();
      ++output_index_;
      const size_t i = tool_calls_.size();
      json plain = call;
      plain.erase("index");
      tool_calls_.push_back(plain);
      const std::string item_id = call_item_id(id_, i);
      const std::string args = call["function"].value("arguments", "{}");
      out += event("response.output_item.added",
                   {{"output_index", output_index_},
                    {"item", call_item(id_, i, plain, "in_progress", false)}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", item_id}, {"output_index", output_index_}, {"delta", args}});
      out += event("response.function_call_arguments.done",
                   {{"item_id", item_id},
                    {"output_index", output_index_},
                    {"arguments", args},
                    {"name", call["function"].value("name", "")}});
      out += event(
          "response.output_item.done",
          {{"output_index", output_index_}, {"item", call_item(id_, i, plain, "completed", true)}});
    }
    if (ch.contains("finish_reason") && !ch["finish_reason"].is_null())
      finish_reason_ = ch["finish_reason"];
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
