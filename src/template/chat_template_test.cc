// ChatTemplate against Python jinja2: every case of tests/golden/chat/golden.json
// (made by tools/golden/gen_chat_golden.py from tests/golden/chat/templates/)
// must render byte for byte, or fail where jinja2 raised. Plus the GGUF
// lookup and its built-in fallbacks.
#include "template/chat_template.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "gguf/gguf_file.h"
#include "template/jinja2_golden_testing.h"
#include "util/testdata.h"

namespace omnibus {
namespace {

using jinja2_golden::templates_dir;
using testdata::read_file;

nlohmann::json load_golden() {
  std::ifstream in(jinja2_golden::chat_dir() + "/golden.json");
  EXPECT_TRUE(in.good()) << "tests/golden/chat/golden.json missing";
  if (!in.good()) return nlohmann::json::array();
  return nlohmann::json::parse(in);
}

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j)
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

TEST(ChatTemplateGolden, EveryCaseMatchesJinja2) {
  const nlohmann::json golden = load_golden();
  ASSERT_GE(golden.size(), 100u);
  std::map<std::string, ChatTemplate> parsed;
  std::set<std::string> seen_templates;
  std::set<std::string> unparsable;
  int n_checked = 0;
  for (const auto& c : golden) {
    const std::string name = c["template"].get<std::string>();
    seen_templates.insert(name);
    auto it = parsed.find(name);
    if (it == parsed.end()) {
      StatusOr<ChatTemplate> t = ChatTemplate::parse(read_file(templates_dir() + "/" + name));
      if (!unparsable.count(name)) {
        EXPECT_TRUE(t.is_ok()) << name << ": " << t.status().to_string();
      }
      if (!t.is_ok()) {
        unparsable.insert(name);
        continue;
      }
      it = parsed.emplace(name, *t).first;
    }
    const std::string what =
        name + " / " + c["conversation"].get<std::string>() +
        " / add_generation_prompt=" + (c["add_generation_prompt"].get<bool>() ? "1" : "0");
    StatusOr<std::string> out =
        it->second.render(messages_of(c["messages"]), c["add_generation_prompt"].get<bool>(),
                          c["bos_token"].get<std::string>(), c["eos_token"].get<std::string>());
    jinja2_golden::expect_matches(out, c, what);
    ++n_checked;
  }
  // The families the acceptance asks for are all covered.
  for (const char* need :
       {"smollm2.jinja", "gemma3.jinja", "chatml.jinja", "llama3.jinja", "llama3.1.jinja"}) {
    EXPECT_TRUE(seen_templates.count(need)) << need;
  }
  EXPECT_EQ(n_checked, int(golden.size()));
  EXPECT_TRUE(unparsable.empty());
}

TEST(ChatTemplateGolden, EveryTemplateFileHasGoldenCases) {
  const nlohmann::json golden = load_golden();
  std::set<std::string> in_golden;
  for (const auto& c : golden) in_golden.insert(c["template"].get<std::string>());
  for (const auto& e : std::filesystem::directory_iterator(templates_dir())) {
    if (e.path().extension() == ".jinja") {
      EXPECT_TRUE(in_golden.count(e.path().filename().string()))
          << e.path().filename() << " has no golden cases: rerun tools/golden/gen_chat_golden.py";
    }
  }
}

TEST(ChatTemplate, BuiltinsMatchTheirGoldenFiles) {
  EXPECT_EQ(std::string(gemma_template_source()), read_file(templates_dir() + "/gemma3.jinja"));
  EXPECT_EQ(std::string(chatml_template_source()), read_file(templates_dir() + "/chatml.jinja"));
}

TEST(ChatTemplate, RendersChatml) {
  StatusOr<ChatTemplate> t = ChatTemplate::parse(chatml_template_source());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  StatusOr<std::string> out = t->render({{"system", "S"}, {"user", "U"}}, true, "", "");
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(
      *out,
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, RaiseExceptionIsAnError) {
  StatusOr<ChatTemplate> t = ChatTemplate::parse(gemma_template_source());
  ASSERT_TRUE(t.is_ok());
  StatusOr<std::string> out = t->render({{"user", "a"}, {"user", "b"}}, true, "<bos>", "<eos>");
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos)
      << out.status().message();
  EXPECT_NE(out.status().message().find("line "), std::string::npos) << out.status().message();
}

TEST(ChatTemplate, ParseErrorNamesThePosition) {
  StatusOr<ChatTemplate> t = ChatTemplate::parse("hello\n{% for m in messages %}{{ m.content }");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().message();
}

TEST(ChatTemplate, RendersConcurrently) {
  StatusOr<ChatTemplate> t = ChatTemplate::parse(read_file(templates_dir() + "/llama3.1.jinja"));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  const std::vector<ChatMessage> conv = {
      {"system", "sys"}, {"user", "hi"}, {"assistant", "yo"}, {"user", "q"}};
  StatusOr<std::string> expected = t->render(conv, true, "<|begin_of_text|>", "<|eot_id|>");
  ASSERT_TRUE(expected.is_ok());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        StatusOr<std::string> out = t->render(conv, true, "<|begin_of_text|>", "<|eot_id|>");
        if (!out.is_ok() || *out != *expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

class ChatTemplateGguf : public ::testing::Test {
 protected:
  static std::unique_ptr<GgufFile> open(const std::string& name) {
    const std::string path = testdata::model_path(name);
    if (!testdata::file_exists(path)) return nullptr;
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    return f.is_ok() ? std::move(f).value() : nullptr;
  }
};

TEST_F(ChatTemplateGguf, SmolLm2UsesItsOwnTemplate) {
  auto f = open("smollm2-135m.gguf");
  if (!f) GTEST_SKIP() << "models/smollm2-135m.gguf not found";
  StatusOr<ChatTemplate> t = chat_template_from_gguf(*f);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->source(), read_file(templates_dir() + "/smollm2.jinja"));
  StatusOr<std::string> out = t->render({{"user", "Hi"}}, true, "<|im_start|>", "<|im_end|>");
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(ChatTemplateGguf, GemmaWithoutTemplateFallsBackToGemma) {
  auto f = open("gemma3-270m.gguf");
  if (!f) GTEST_SKIP() << "models/gemma3-270m.gguf not found";
  StatusOr<ChatTemplate> t = chat_template_from_gguf(*f);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  if (f->find("tokenizer.chat_template") == nullptr) {
    StatusOr<std::string> out = t->render({{"user", "Hi"}}, true, "<bos>", "<eos>");
    ASSERT_TRUE(out.is_ok());
    EXPECT_EQ(*out, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  }
}

}  // namespace
}  // namespace omnibus
