#include "common/text/chat_template.h"

#include <catch2/catch.hpp>

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
  SECTION("a non-ChatML template is unimplemented") {
    const std::string path = dir.Write(
        "llama.json", nlohmann::json{{"chat_template", "{{ bos_token }}<|start_header_id|>user<|end_header_id|>"}}
                          .dump());
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.status().code() == absl::StatusCode::kUnimplemented);
    REQUIRE_THAT(std::string(options.status().message()), Catch::Contains(path));
  }
  SECTION("malformed JSON names the file") {
    const std::string path = dir.Write("bad.json", "{\"chat_template\": ");
    absl::StatusOr<ChatTemplateOptions> options = ChatTemplateOptionsFromTokenizerConfig(path);
    REQUIRE(options.status().code() == absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(options.status().message()), Catch::Contains(path));
  }
}

}  // namespace
}  // namespace verl
