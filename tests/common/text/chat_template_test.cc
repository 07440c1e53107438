#include "common/text/chat_template.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/common/text/text_test_util.h"

namespace verl {
namespace {

constexpr char kQwenSystem[] = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// The relevant part of Qwen2.5-Instruct's chat_template (as stored in tokenizer_config.json, i.e. after JSON
// decoding: Jinja string literals keep their "\n" escapes).
constexpr char kQwen25Template[] =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n"
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + "
    "'\\n' }}{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";

TEST_CASE("ChatML without a default system prompt") {
  const std::vector<ChatMessage> messages = {{"user", "What is 2+2?"}};
  REQUIRE(ApplyChatTemplate(messages, false) == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
  REQUIRE(ApplyChatTemplate(messages, true) ==
          "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  REQUIRE(ApplyChatTemplate({}, true) == "<|im_start|>assistant\n");
}

TEST_CASE("ChatML with a default system prompt") {
  const ChatTemplateOptions options{kQwenSystem};
  REQUIRE(ApplyChatTemplate({{"user", "Hi"}}, true, options) ==
          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
          "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // An explicit system message replaces the default one.
  REQUIRE(ApplyChatTemplate({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}}, false, options) ==
          "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
          "<|im_start|>assistant\nHello!<|im_end|>\n");
}

TEST_CASE("options from tokenizer_config.json") {
  testing::TempDir dir;
  SECTION("Qwen2.5 template gives Qwen's default system prompt") {
    const std::string path =
        dir.Write("tokenizer_config.json", nlohmann::json{{"chat_template", kQwen25Template}}.dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.ok());
    REQUIRE(options->default_system == kQwenSystem);
  }
  SECTION("Qwen2.5-Math style escapes are undone") {
    const std::string tmpl =
        "{{- '<|im_start|>system\\nPlease reason step by step, and put your final answer within \\\\boxed{}."
        "<|im_end|>\\n' }}";
    const std::string path = dir.Write("tokenizer_config.json", nlohmann::json{{"chat_template", tmpl}}.dump());
    REQUIRE(ChatTemplateOptionsFromTokenizerConfig(path)->default_system ==
            "Please reason step by step, and put your final answer within \\boxed{}.");
  }
  SECTION("Qwen's prompt written outside one literal still counts") {
    const std::string tmpl =
        "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\n' + 'You are Qwen, created by Alibaba "
        "Cloud. You are a helpful assistant.' + '<|im_end|>\\n' }}{%- endif %}";
    const std::string path = dir.Write("tokenizer_config.json", nlohmann::json{{"chat_template", tmpl}}.dump());
    REQUIRE(ChatTemplateOptionsFromTokenizerConfig(path)->default_system == kQwenSystem);
  }
  SECTION("plain ChatML template has no default system prompt") {
    const std::string tmpl =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}";
    const std::string path = dir.Write("tokenizer_config.json", nlohmann::json{{"chat_template", tmpl}}.dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.ok());
    REQUIRE(options->default_system.empty());
  }
  SECTION("missing file or missing chat_template gives defaults") {
    REQUIRE(ChatTemplateOptionsFromTokenizerConfig(dir.Path("absent.json"))->default_system.empty());
    const std::string path = dir.Write("tokenizer_config.json", R"({"model_max_length": 32768})");
    REQUIRE(ChatTemplateOptionsFromTokenizerConfig(path)->default_system.empty());
  }
  SECTION("a non-ChatML template is rendered by the Jinja interpreter") {
    const std::string path = dir.Write(
        "llama.json", nlohmann::json{{"chat_template", "{{ bos_token }}{% for m in messages %}<|start_header_id|>"
                                                       "{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}"
                                                       "<|eot_id|>{% endfor %}"},
                                     {"bos_token", {{"content", "<|begin_of_text|>"}, {"special", true}}}}
                          .dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    INFO(options.status().ToString());
    REQUIRE(options.ok());
    REQUIRE(options->jinja_template.has_value());
    CHECK(options->default_system.empty());
    CHECK(options->bos_token == "<|begin_of_text|>");
    CHECK(ApplyChatTemplate({{"user", " Hi "}}, false, *options) ==
          "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  }
  SECTION("the list form uses the \"default\" template") {
    const nlohmann::json list = nlohmann::json::array(
        {{{"name", "tool_use"}, {"template", "TOOLS"}}, {{"name", "default"}, {"template", "D{{ messages | length }}"}}});
    const std::string path = dir.Write("list.json", nlohmann::json{{"chat_template", list}}.dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.ok());
    CHECK(ApplyChatTemplate({{"user", "a"}, {"assistant", "b"}}, false, *options) == "D2");
    const std::string bad = dir.Write(
        "bad_list.json", nlohmann::json{{"chat_template", nlohmann::json::array({{{"name", "rag"}, {"template", "x"}}})}}
                             .dump());
    CHECK_THAT(std::string(ChatTemplateOptionsFromTokenizerConfig(bad).status().message()),
               Catch::Contains(bad) && Catch::Contains("default"));
  }
  SECTION("a template outside the supported subset is kUnimplemented, naming the file, line and column") {
    const std::string path =
        dir.Write("ext.json", nlohmann::json{{"chat_template", "{% for m in messages %}\n{% include 'x' %}{% endfor %}"}}
                                  .dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.status().code() == absl::StatusCode::kUnimplemented);
    REQUIRE_THAT(std::string(options.status().message()), Catch::Contains(path + ":2:4"));
  }
  SECTION("a template with a syntax error names the file, line and column") {
    const std::string path =
        dir.Write("syntax.json", nlohmann::json{{"chat_template", "{% if messages %}\n  {{ messages[0]. }}"}}.dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(options.status().message()), Catch::Contains(path + ":2:"));
  }
  SECTION("a template that cannot render one user message is an error when loaded") {
    const std::string path = dir.Write(
        "raises.json",
        nlohmann::json{{"chat_template", "{% if messages[0].role != 'system' %}{{ raise_exception('need a system "
                                         "message') }}{% endif %}"}}
            .dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(!options.ok());
    REQUIRE_THAT(std::string(options.status().message()), Catch::Contains(path) && Catch::Contains("need a system"));
  }
  SECTION("a chat_template.jinja next to the config takes priority, and errors name it") {
    const std::string path = dir.Write(
        "tokenizer_config.json", nlohmann::json{{"chat_template", "from config"}, {"eos_token", "</s>"}}.dump());
    dir.Write("chat_template.jinja", "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}\n");
    CHECK(ApplyChatTemplate({{"user", "a"}}, true, ChatTemplateOptionsFromTokenizerConfig(path).value()) == "a</s>");
    const std::string jinja = dir.Write("chat_template.jinja", "ok\n{{ messages[0].content + 1 }}");
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE_THAT(std::string(options.status().message()), Catch::Contains(jinja + ":2:"));
  }
  SECTION("malformed JSON names the file") {
    const std::string path = dir.Write("bad.json", "{\"chat_template\": ");
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(options.status().message()), Catch::Contains(path));
  }
}

const std::string kTestData = std::string(VERL_SOURCE_DIR) + "/tests/common/text/testdata/";

ChatTemplateOptions LoadOptions(const std::string& path) {
  absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
  INFO(options.status().ToString());
  REQUIRE(options.ok());
  return *options;
}

TEST_CASE("real templates: hand-checked renderings") {
  SECTION("Llama 3.1: default date, a given date_string, the system message trimmed") {
    ChatTemplateOptions options = LoadOptions(kTestData + "llama3_1_tokenizer_config.json");
    CHECK(ApplyChatTemplate({{"user", "Hi"}}, true, options) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
          "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\n");
    options.date_string = "05 Mar 2025";
    CHECK(ApplyChatTemplate({{"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "Hello "}}, false, options) ==
          "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
          "Today Date: 05 Mar 2025\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
          "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|>");
  }
  SECTION("Qwen2.5: the template and the built-in ChatML with its default system prompt agree") {
    const ChatTemplateOptions options = LoadOptions(kTestData + "qwen2_5_tokenizer_config.json");
    CHECK(options.default_system == kQwenSystem);
    const ChatTemplateOptions chatml{kQwenSystem};
    const std::vector<std::vector<ChatMessage>> conversations = {
        {{"user", "What is 2+2?"}},
        {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}}};
    for (const auto& messages : conversations) {
      for (const bool gen : {false, true}) {
        CHECK(ApplyChatTemplate(messages, gen, options) == ApplyChatTemplate(messages, gen, chatml));
      }
    }
  }
  SECTION("a render error is an error of RenderChatTemplate and an empty ApplyChatTemplate") {
    testing::TempDir dir;
    const std::string path = dir.Write(
        "alternate.json",
        nlohmann::json{{"chat_template",
                        "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
                        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
                        "{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}"}}
            .dump());
    const ChatTemplateOptions options = LoadOptions(path);
    CHECK(*RenderChatTemplate({{"user", "a"}, {"assistant", "b"}}, false, options) == "[user]a[assistant]b");
    absl::StatusOr<std::string> bad = RenderChatTemplate({{"user", "a"}, {"user", "b"}}, false, options);
    REQUIRE(!bad.ok());
    CHECK_THAT(std::string(bad.status().message()), Catch::Contains(path + ":1:") && Catch::Contains("alternate"));
    CHECK(ApplyChatTemplate({{"user", "a"}, {"user", "b"}}, false, options).empty());
  }
}

// transformers' apply_chat_template(tokenize=False) output, written by tools/hf/chat_template_reference.py (run by
// tools/hf/setup_assets.sh) for every conversation of testdata/chat_template_cases.json through each
// testdata/*_tokenizer_config.json and SmolLM2-135M-Instruct's own. Skips (with a warning) when it is absent.
TEST_CASE("real templates: rendering equals transformers' apply_chat_template", "[hf]") {
  const std::string path = std::string(VERL_HF_ASSETS_DIR) + "/reference/chat-templates/reference.json";
  std::ifstream in(path);
  if (!in) {
    WARN("skipped: no " << path << " (run tools/hf/setup_assets.sh)");
    return;
  }
  const nlohmann::json ref = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE(!ref.is_discarded());
  std::map<std::string, ChatTemplateOptions> loaded;
  std::set<std::string> names;
  int compared = 0;
  for (const nlohmann::json& c : ref["cases"]) {
    const std::string config = c["config"].get<std::string>();
    if (!std::filesystem::exists(config)) continue;  // a stale reference naming a moved file
    if (!loaded.count(config)) loaded.emplace(config, LoadOptions(config));
    ChatTemplateOptions options = loaded.at(config);
    if (c.contains("date_string")) options.date_string = c["date_string"].get<std::string>();
    std::vector<ChatMessage> messages;
    for (const nlohmann::json& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    const bool gen = c["add_generation_prompt"].get<bool>();
    absl::StatusOr<std::string> ours = RenderChatTemplate(messages, gen, options);
    INFO(c["name"].get<std::string>() << " " << c["messages"].dump() << " add_generation_prompt=" << gen);
    if (c.contains("error")) {
      INFO("transformers: " << c["error"].get<std::string>());
      CHECK(!ours.ok());
    } else {
      INFO(ours.status().ToString());
      REQUIRE(ours.ok());
      CHECK(*ours == c["text"].get<std::string>());
    }
    names.insert(c["name"].get<std::string>());
    ++compared;
  }
  CHECK(compared >= 64);
  for (const char* name : {"qwen2_5_tokenizer_config.json", "qwen3_tokenizer_config.json",
                           "llama3_1_tokenizer_config.json", "synthetic_tokenizer_config.json",
                           "smollm2-135m-instruct/tokenizer_config.json"}) {
    INFO(name);
    CHECK(names.count(name) == 1);
  }
}

}  // namespace
}  // namespace verl
