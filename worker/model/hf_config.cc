#include "worker/model/hf_config.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace verl {
namespace {

namespace fs = std::filesystem;

constexpr char kTransformersVersion[] = "4.46.0";

std::string TypeName(const nlohmann::json& v) { return v.type_name(); }

std::string SupportedModelTypes() {
  std::string out;
  for (std::string_view t : kSupportedDecoderModelTypes) {
    if (!out.empty()) out += ", ";
    out += t;
  }
  return out;
}

// Typed access to the keys of one JSON object, with errors naming the file and the key. A key whose value is null
// counts as absent, as transformers treats it.
class JsonReader {
 public:
  JsonReader(const nlohmann::json& object, std::string path) : object_(object), path_(std::move(path)) {}

  const nlohmann::json* Find(const std::string& key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool Has(const std::string& key) const { return Find(key) != nullptr; }

  absl::Status Error(const std::string& key, std::string_view problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": key '", key, "' ", absl::string_view(problem.data(), problem.size())));
  }

  absl::StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> fallback) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return absl::InvalidArgumentError(absl::StrCat(path_, ": missing required key '", key, "'"));
    }
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Error(key, "is out of range");
      }
      return static_cast<int64_t>(v->get<uint64_t>());
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    return Error(key, absl::StrCat("must be an integer, got ", TypeName(*v), " ", v->dump()));
  }

  absl::StatusOr<int64_t> PositiveInt(const std::string& key, std::optional<int64_t> fallback) const {
    ASSIGN_OR_RETURN(int64_t value, Int(key, fallback));
    if (value <= 0) return Error(key, absl::StrCat("must be positive, got ", value));
    return value;
  }

  absl::StatusOr<double> Double(const std::string& key, double fallback) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) return Error(key, absl::StrCat("must be a number, got ", TypeName(*v), " ", v->dump()));
    return v->get<double>();
  }

  absl::StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(key, absl::StrCat("must be true or false, got ", TypeName(*v), " ", v->dump()));
    return v->get<bool>();
  }

  absl::StatusOr<std::optional<std::string>> String(const std::string& key) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return Error(key, absl::StrCat("must be a string, got ", TypeName(*v), " ", v->dump()));
    return std::optional<std::string>(v->get<std::string>());
  }

  // A token id: a non-negative integer that fits int32.
  absl::StatusOr<int32_t> TokenIdValue(const std::string& key, const nlohmann::json& v) const {
    if (!v.is_number_integer()) {
      return Error(key, absl::StrCat("must be a token id (integer), got ", TypeName(v), " ", v.dump()));
    }
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                               : (v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())) {
      return Error(key, absl::StrCat("token id ", v.dump(), " is out of range"));
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  absl::StatusOr<std::optional<int32_t>> TokenId(const std::string& key) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return std::optional<int32_t>();
    ASSIGN_OR_RETURN(int32_t id, TokenIdValue(key, *v));
    return std::optional<int32_t>(id);
  }

  // pad_token_id: a token id, or -1 for "no pad token" (early Llama conversions write it; transformers reads it so).
  absl::StatusOr<std::optional<int32_t>> PadTokenId() const {
    const nlohmann::json* v = Find("pad_token_id");
    if (v != nullptr && v->is_number_integer() && !v->is_number_unsigned() && v->get<int64_t>() == -1) {
      return std::optional<int32_t>();
    }
    return TokenId("pad_token_id");
  }

  // An int or a list of ints; nullopt when absent.
  absl::StatusOr<std::optional<std::vector<int32_t>>> TokenIds(const std::string& key) const {
    const nlohmann::json* v = Find(key);
    if (v == nullptr) return std::optional<std::vector<int32_t>>();
    std::vector<int32_t> ids;
    if (v->is_array()) {
      for (const auto& e : *v) {
        ASSIGN_OR_RETURN(int32_t id, TokenIdValue(key, e));
        ids.push_back(id);
      }
    } else {
      ASSIGN_OR_RETURN(int32_t id, TokenIdValue(key, *v));
      ids.push_back(id);
    }
    return std::optional<std::vector<int32_t>>(std::move(ids));
  }

  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& object_;
  std::string path_;
};

// Parses `path` as a JSON object. NotFound when it does not exist.
absl::StatusOr<nlohmann::json> ReadJsonObject(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not valid JSON"));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
  return j;
}

// config.json's non-null "rope_scaling" object, as transformers validates it (rope_config_validation).
// `key`: rope_scaling, or transformers 5's rope_parameters (the same fields, plus rope_theta).
absl::StatusOr<RopeScaling> ParseRopeScaling(const nlohmann::json& v, const std::string& path,
                                             const std::string& key) {
  if (!v.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key '", key, "' must be null or an object, got ", TypeName(v), " ", v.dump()));
  }
  JsonReader r(v, absl::StrCat(path, " (", key, ")"));
  ASSIGN_OR_RETURN(std::optional<std::string> type, r.String("rope_type"));
  if (!type) {
    ASSIGN_OR_RETURN(type, r.String("type"));  // the older name
  }
  RopeScaling s;
  if (!type) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": key '", key, "' has no 'rope_type' (or 'type'): ", v.dump()));
  }
  if (*type == "default") return s;
  if (*type != "linear" && *type != "llama3") {
    return absl::UnimplementedError(absl::StrCat(path, ": key '", key, "' has rope_type '", *type,
                                                 "', which is not supported (supported: default, linear, llama3)"));
  }
  s.rope_type = *type;
  if (!r.Has("factor")) return r.Error("factor", absl::StrCat("is required for rope_type ", *type));
  ASSIGN_OR_RETURN(s.factor, r.Double("factor", 1.0));
  if (!(s.factor >= 1.0)) return r.Error("factor", absl::StrCat("must be >= 1, got ", v.at("factor").dump()));
  if (*type == "llama3") {
    for (const char* key : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
      if (!r.Has(key)) return r.Error(key, "is required for rope_type llama3");
    }
    ASSIGN_OR_RETURN(s.low_freq_factor, r.Double("low_freq_factor", 1.0));
    ASSIGN_OR_RETURN(s.high_freq_factor, r.Double("high_freq_factor", 4.0));
    if (!(s.low_freq_factor > 0)) return r.Error("low_freq_factor", "must be positive");
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      return r.Error(
          "high_freq_factor",
          absl::StrCat("(", s.high_freq_factor, ") must be greater than low_freq_factor (", s.low_freq_factor, ")"));
    }
    ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                     r.PositiveInt("original_max_position_embeddings", std::nullopt));
  }
  return s;
}

absl::StatusOr<DecoderConfig> ParseDecoderConfig(const nlohmann::json& j, const std::string& path) {
  JsonReader r(j, path);
  DecoderConfig c;
  c.raw = j;

  ASSIGN_OR_RETURN(std::optional<std::string> model_type, r.String("model_type"));
  if (!model_type) return absl::InvalidArgumentError(absl::StrCat(path, ": missing required key 'model_type'"));
  const bool is_qwen2 = *model_type == "qwen2";
  const bool is_llama = *model_type == "llama";
  if (!is_qwen2 && !is_llama) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": key 'model_type' is '", *model_type,
                                                   "', which is not supported (supported: ",
                                                   SupportedModelTypes(), ")"));
  }
  c.model_type = *model_type;

  ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size", std::nullopt));
  ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt("hidden_size", std::nullopt));
  ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveInt("intermediate_size", std::nullopt));
  ASSIGN_OR_RETURN(c.num_hidden_layers, r.PositiveInt("num_hidden_layers", std::nullopt));
  ASSIGN_OR_RETURN(c.num_attention_heads, r.PositiveInt("num_attention_heads", std::nullopt));
  ASSIGN_OR_RETURN(c.num_key_value_heads, r.PositiveInt("num_key_value_heads", c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return r.Error("num_key_value_heads", absl::StrCat("(", c.num_key_value_heads,
                                                       ") must divide num_attention_heads (", c.num_attention_heads,
                                                       ")"));
  }
  if (!r.Has("head_dim") && c.hidden_size % c.num_attention_heads != 0) {
    return r.Error("hidden_size", absl::StrCat("(", c.hidden_size, ") must be divisible by num_attention_heads (",
                                               c.num_attention_heads, ") when head_dim is not given"));
  }
  ASSIGN_OR_RETURN(c.head_dim, r.PositiveInt("head_dim", c.hidden_size / c.num_attention_heads));
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   r.PositiveInt("max_position_embeddings", is_qwen2 ? int64_t{32768} : int64_t{2048}));
  ASSIGN_OR_RETURN(c.rope_theta, r.Double("rope_theta", 10000.0));
  // transformers >= 5 writes rope_theta and the scaling together as rope_parameters (rope_type "default" for plain
  // RoPE) instead of the top-level rope_theta and rope_scaling.
  if (r.Has("rope_parameters")) {
    const nlohmann::json& rp = j.at("rope_parameters");
    if (!rp.is_object()) {
      return r.Error("rope_parameters", absl::StrCat("must be null or an object, got ", TypeName(rp), " ", rp.dump()));
    }
    JsonReader pr(rp, absl::StrCat(path, " (rope_parameters)"));
    ASSIGN_OR_RETURN(double theta, pr.Double("rope_theta", c.rope_theta));
    if (r.Has("rope_theta") && theta != c.rope_theta) {
      return r.Error("rope_parameters", absl::StrCat("has rope_theta ", rp.at("rope_theta").dump(),
                                                     " but the top-level rope_theta is ", j.at("rope_theta").dump()));
    }
    c.rope_theta = theta;
    if (r.Has("rope_scaling")) {
      return r.Error("rope_parameters", "and 'rope_scaling' are both given; give one of them");
    }
    ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(rp, path, "rope_parameters"));
  }
  if (!(c.rope_theta > 0)) return r.Error("rope_theta", "must be positive");
  ASSIGN_OR_RETURN(c.rms_norm_eps, r.Double("rms_norm_eps", 1e-6));
  if (!(c.rms_norm_eps > 0)) return r.Error("rms_norm_eps", "must be positive");
  ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  if (is_qwen2) {
    c.attention_bias = true;  // Qwen2Attention always has q/k/v biases
  } else {
    ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
  }

  ASSIGN_OR_RETURN(std::optional<std::string> torch_dtype, r.String("torch_dtype"));
  if (!torch_dtype) {
    ASSIGN_OR_RETURN(torch_dtype, r.String("dtype"));  // the newer name in transformers >= 4.56
  }
  c.torch_dtype = torch_dtype.value_or("float32");

  if (r.Has("rope_scaling")) {
    ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(j.at("rope_scaling"), path, "rope_scaling"));
  }

  // Features the decoder does not implement yet.
  ASSIGN_OR_RETURN(std::optional<std::string> hidden_act, r.String("hidden_act"));
  if (hidden_act && *hidden_act != "silu") {
    return absl::UnimplementedError(
        absl::StrCat(path, ": key 'hidden_act' is '", *hidden_act, "'; only 'silu' is supported"));
  }
  if (is_qwen2) {
    ASSIGN_OR_RETURN(bool sliding, r.Bool("use_sliding_window", false));
    if (sliding) {
      return absl::UnimplementedError(
          absl::StrCat(path, ": key 'use_sliding_window' is true; sliding-window attention is not supported"));
    }
  } else {
    ASSIGN_OR_RETURN(bool mlp_bias, r.Bool("mlp_bias", false));
    if (mlp_bias) return absl::UnimplementedError(absl::StrCat(path, ": key 'mlp_bias' is true; not supported"));
  }

  ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> eos, r.TokenIds("eos_token_id"));
  ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id"));
  ASSIGN_OR_RETURN(c.pad_token_id, r.PadTokenId());
  if (eos) {
    c.eos_token_ids = *eos;
  } else if (is_llama && !j.contains("eos_token_id")) {
    c.eos_token_ids = {2};  // LlamaConfig's defaults
  }
  if (is_llama && !c.bos_token_id && !j.contains("bos_token_id")) c.bos_token_id = 1;
  return c;
}

}  // namespace

absl::StatusOr<DecoderConfig> LoadDecoderConfig(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path config_path = dir / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec)) {
    return absl::NotFoundError(absl::StrCat("model directory ", model_dir, " has no config.json (", config_path.string(),
                                            ")"));
  }
  ASSIGN_OR_RETURN(nlohmann::json config_json, ReadJsonObject(config_path));
  ASSIGN_OR_RETURN(DecoderConfig config, ParseDecoderConfig(config_json, config_path.string()));

  const fs::path gen_path = dir / "generation_config.json";
  if (fs::is_regular_file(gen_path, ec)) {
    ASSIGN_OR_RETURN(nlohmann::json gen_json, ReadJsonObject(gen_path));
    JsonReader g(gen_json, gen_path.string());
    ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> eos, g.TokenIds("eos_token_id"));
    ASSIGN_OR_RETURN(std::optional<int32_t> bos, g.TokenId("bos_token_id"));
    ASSIGN_OR_RETURN(std::optional<int32_t> pad, g.PadTokenId());
    if (eos) config.eos_token_ids = *eos;
    if (bos) config.bos_token_id = bos;
    if (pad) config.pad_token_id = pad;
  }
  return config;
}

namespace {

nlohmann::json TokenIdsJson(const std::vector<int32_t>& ids) {
  if (ids.size() == 1) return ids[0];
  return ids;
}

}  // namespace

std::string DecoderConfigToJson(const DecoderConfig& config) {
  nlohmann::json j = config.raw.is_object() ? config.raw : nlohmann::json::object();
  const bool is_qwen2 = config.model_type == "qwen2";
  j["architectures"] = {is_qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = config.model_type;
  j["vocab_size"] = config.vocab_size;
  j["hidden_size"] = config.hidden_size;
  j["intermediate_size"] = config.intermediate_size;
  j["num_hidden_layers"] = config.num_hidden_layers;
  j["num_attention_heads"] = config.num_attention_heads;
  j["num_key_value_heads"] = config.num_key_value_heads;
  j["head_dim"] = config.head_dim;
  j["max_position_embeddings"] = config.max_position_embeddings;
  const RopeScaling& rs = config.rope_scaling;
  nlohmann::json scaling = nullptr;
  if (rs.rope_type == "linear") {
    scaling = {{"rope_type", "linear"}, {"factor", rs.factor}};
  } else if (!rs.rope_type.empty()) {
    scaling = {{"rope_type", rs.rope_type},
               {"factor", rs.factor},
               {"low_freq_factor", rs.low_freq_factor},
               {"high_freq_factor", rs.high_freq_factor},
               {"original_max_position_embeddings", rs.original_max_position_embeddings}};
  }
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {  // the source's transformers 5 form
    if (scaling.is_null()) scaling = {{"rope_type", "default"}};
    scaling["rope_theta"] = config.rope_theta;
    j["rope_parameters"] = scaling;
    j.erase("rope_theta");
    j.erase("rope_scaling");
  } else {
    j["rope_theta"] = config.rope_theta;
    j["rope_scaling"] = scaling;
  }
  j["rms_norm_eps"] = config.rms_norm_eps;
  j["tie_word_embeddings"] = config.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["attention_dropout"] = 0.0;
  if (!j.contains("initializer_range")) j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = config.torch_dtype;
  if (j.contains("dtype")) j["dtype"] = config.torch_dtype;
  j["transformers_version"] = kTransformersVersion;
  if (is_qwen2) {
    j["use_sliding_window"] = false;
    if (!j.contains("sliding_window") || j["sliding_window"].is_null()) {
      j["sliding_window"] = config.max_position_embeddings;
    }
    if (!j.contains("max_window_layers")) j["max_window_layers"] = config.num_hidden_layers;
    j.erase("attention_bias");
  } else {
    j["attention_bias"] = config.attention_bias;
    j["mlp_bias"] = false;
    if (!j.contains("pretraining_tp")) j["pretraining_tp"] = 1;
  }
  // Token ids: absent stays absent (null for llama, whose config class would otherwise default them to 1 and 2).
  auto set_or_null = [&](const char* key, const nlohmann::json& value, bool present) {
    if (present) {
      j[key] = value;
    } else if (!is_qwen2) {
      j[key] = nullptr;
    } else {
      j.erase(key);
    }
  };
  set_or_null("bos_token_id", config.bos_token_id.value_or(0), config.bos_token_id.has_value());
  set_or_null("eos_token_id", TokenIdsJson(config.eos_token_ids), !config.eos_token_ids.empty());
  set_or_null("pad_token_id", config.pad_token_id.value_or(0), config.pad_token_id.has_value());
  return j.dump(2) + "\n";
}

std::string GenerationConfigToJson(const DecoderConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  if (config.bos_token_id) j["bos_token_id"] = *config.bos_token_id;
  if (!config.eos_token_ids.empty()) j["eos_token_id"] = TokenIdsJson(config.eos_token_ids);
  if (config.pad_token_id) j["pad_token_id"] = *config.pad_token_id;
  j["transformers_version"] = kTransformersVersion;
  return j.dump(2) + "\n";
}

std::string TorchDTypeName(DType dtype) { return DTypeName(dtype); }

std::optional<DType> ParseTorchDType(std::string_view name) {
  if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kFloat16, DType::kInt64, DType::kInt32, DType::kUInt8,
                  DType::kBool}) {
    if (TorchDTypeName(d) == name) return d;
  }
  if (name == "float") return DType::kFloat32;
  if (name == "half") return DType::kFloat16;
  return std::nullopt;
}

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ParamSpec> DecoderParamSpecs(const DecoderConfig& c) {
  const int64_t v = c.vocab_size, h = c.hidden_size, inter = c.intermediate_size;
  const int64_t q_out = c.num_attention_heads * c.head_dim, kv_out = c.num_key_value_heads * c.head_dim;
  std::vector<ParamSpec> specs;
  specs.reserve(static_cast<size_t>(c.num_hidden_layers) * 13 + 3);
  specs.push_back({"model.embed_tokens.weight", {v, h}, ParamInit::kNormal});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    specs.push_back({p + "input_layernorm.weight", {h}, ParamInit::kOnes});
    specs.push_back({p + "self_attn.q_proj.weight", {q_out, h}, ParamInit::kNormal});
    if (c.attention_bias) specs.push_back({p + "self_attn.q_proj.bias", {q_out}, ParamInit::kZeros});
    specs.push_back({p + "self_attn.k_proj.weight", {kv_out, h}, ParamInit::kNormal});
    if (c.attention_bias) specs.push_back({p + "self_attn.k_proj.bias", {kv_out}, ParamInit::kZeros});
    specs.push_back({p + "self_attn.v_proj.weight", {kv_out, h}, ParamInit::kNormal});
    if (c.attention_bias) specs.push_back({p + "self_attn.v_proj.bias", {kv_out}, ParamInit::kZeros});
    specs.push_back({p + "self_attn.o_proj.weight", {h, q_out}, ParamInit::kNormal});
    // Llama's o_proj has a bias too when attention_bias is set; Qwen2's never does.
    if (c.attention_bias && c.model_type == "llama") {
      specs.push_back({p + "self_attn.o_proj.bias", {h}, ParamInit::kZeros});
    }
    specs.push_back({p + "post_attention_layernorm.weight", {h}, ParamInit::kOnes});
    specs.push_back({p + "mlp.gate_proj.weight", {inter, h}, ParamInit::kNormal});
    specs.push_back({p + "mlp.up_proj.weight", {inter, h}, ParamInit::kNormal});
    specs.push_back({p + "mlp.down_proj.weight", {h, inter}, ParamInit::kNormal});
  }
  specs.push_back({"model.norm.weight", {h}, ParamInit::kOnes});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {v, h}, ParamInit::kNormal});
  return specs;
}

}  // namespace verl
