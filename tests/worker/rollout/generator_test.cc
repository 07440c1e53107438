#include "worker/rollout/generator.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "tests/worker/torch_catch.h"
#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"
#include "worker/train/ppo_actor.h"

namespace verl {
namespace {

using testing::LoadModelOrDie;
using testing::MaxAbsDiff;
using testing::TestDir;

// The same rows, tokens and masks, and log-probs within float32 rounding.
void RequireSameRollout(const RolloutBatch& a, const RolloutBatch& b) {
  REQUIRE(at::equal(a.prompts, b.prompts));
  REQUIRE(at::equal(a.prompt_mask, b.prompt_mask));
  REQUIRE(at::equal(a.response_mask, b.response_mask));
  REQUIRE(at::equal(a.responses, b.responses));
  REQUIRE(MaxAbsDiff(a.log_probs, b.log_probs) < 1e-5);
}

const std::vector<std::vector<int32_t>> kPrompts = {{3, 4, 5, 6}, {7, 8}};

// Greedy continuation of one prompt by re-running the full (uncached) forward after every token.
std::vector<int64_t> ReferenceGreedy(const DecoderModel& model, const std::vector<int32_t>& prompt, int steps) {
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  std::vector<int64_t> out;
  for (int s = 0; s < steps; ++s) {
    const int64_t T = static_cast<int64_t>(seq.size());
    at::Tensor ids = at::tensor(seq, at::kLong).unsqueeze(0);
    at::Tensor valid = at::ones({1, T}, at::kBool);
    at::Tensor logits = model.Logits(
        model.Forward(ids, PositionIdsFromMask(valid), BuildAttentionMask(valid, 0, T), nullptr).select(1, T - 1));
    const int64_t next = logits.argmax(-1).item<int64_t>();
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

std::vector<int64_t> Row(const at::Tensor& t, int64_t i) {
  at::Tensor r = t[i].to(at::kLong).contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

SamplingOptions Greedy(int max_new_tokens) {
  SamplingOptions o;
  o.do_sample = false;
  o.max_new_tokens = max_new_tokens;
  o.pad_token_id = 0;
  return o;
}

class TinyModelFixture {
 public:
  TinyModelFixture() : dir_("rollout") {
    testing::WriteTinyModel(dir_.path(), testing::TinyDecoderConfig());
    model_ = LoadModelOrDie(dir_.path());
  }
  const DecoderModel& model() const { return *model_; }

 private:
  TestDir dir_;
  std::unique_ptr<DecoderModel> model_;
};

TEST_CASE_METHOD(TinyModelFixture, "Generate: greedy equals step-by-step argmax of the full forward",
                 "[worker][rollout]") {
  at::NoGradGuard no_grad;
  RolloutBatch r = Generate(model(), kPrompts, Greedy(6));
  REQUIRE(r.prompts.sizes() == at::IntArrayRef({2, 4}));
  REQUIRE(r.responses.sizes() == at::IntArrayRef({2, 6}));
  // Left padding with pad_token_id.
  REQUIRE(Row(r.prompts, 1) == std::vector<int64_t>{0, 0, 7, 8});
  REQUIRE(Row(r.prompt_mask, 1) == std::vector<int64_t>{0, 0, 1, 1});
  REQUIRE(r.response_mask.all().item<bool>());  // no EOS configured
  for (int64_t i = 0; i < 2; ++i) {
    INFO("prompt " << i);
    REQUIRE(Row(r.responses, i) == ReferenceGreedy(model(), kPrompts[i], 6));
  }
  // The greedy response is not trivially constant (the test would be weak otherwise).
  const std::vector<int64_t> first_row = Row(r.responses, 0);
  REQUIRE(std::set<int64_t>(first_row.begin(), first_row.end()).size() > 1);
  // Deterministic.
  RolloutBatch again = Generate(model(), kPrompts, Greedy(6));
  REQUIRE(at::equal(again.responses, r.responses));
  REQUIRE(at::equal(again.log_probs, r.log_probs));
  // top_k = 1 with sampling picks the same tokens, whatever the temperature and seed.
  SamplingOptions top1 = Greedy(6);
  top1.do_sample = true;
  top1.top_k = 1;
  top1.temperature = 0.7;
  top1.seed = 1234;
  REQUIRE(at::equal(Generate(model(), kPrompts, top1).responses, r.responses));
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: sampling is reproducible per seed", "[worker][rollout]") {
  SamplingOptions o;
  o.max_new_tokens = 8;
  o.n = 3;
  o.seed = 42;
  RolloutBatch a = Generate(model(), kPrompts, o);
  RolloutBatch b = Generate(model(), kPrompts, o);
  REQUIRE(a.responses.sizes() == at::IntArrayRef({6, 8}));
  // Row i * n + j is sample j of prompt i: each prompt is repeated n times.
  REQUIRE(Row(a.prompts, 0) == Row(a.prompts, 2));
  REQUIRE(Row(a.prompts, 3) == Row(a.prompts, 5));
  REQUIRE(at::equal(a.responses, b.responses));
  REQUIRE(at::equal(a.log_probs, b.log_probs));
  // Samples of one prompt differ from each other.
  REQUIRE_FALSE(at::equal(a.responses[0], a.responses[1]));
  o.seed = 43;
  RolloutBatch c = Generate(model(), kPrompts, o);
  REQUIRE_FALSE(at::equal(a.responses, c.responses));
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: EOS ends a sequence; the rest is padding", "[worker][rollout]") {
  const std::vector<int64_t> free0 = ReferenceGreedy(model(), kPrompts[0], 6);
  const std::vector<int64_t> free1 = ReferenceGreedy(model(), kPrompts[1], 6);
  SamplingOptions o = Greedy(6);
  o.eos_token_ids = {static_cast<int32_t>(free0[0])};  // prompt 0 emits EOS first
  o.pad_token_id = free0[0] == 49 ? 48 : 49;
  RolloutBatch r = Generate(model(), kPrompts, o);
  // Row 0: the EOS, then padding; length 1.
  REQUIRE(Row(r.responses, 0)[0] == free0[0]);
  REQUIRE(Row(r.response_mask, 0) == std::vector<int64_t>{1, 0, 0, 0, 0, 0});
  for (int64_t t = 1; t < 6; ++t) REQUIRE(Row(r.responses, 0)[t] == o.pad_token_id);
  REQUIRE(at::equal(r.log_probs[0].narrow(0, 1, 5), at::zeros({5})));
  REQUIRE(r.log_probs[0][0].item<float>() < 0.0f);
  // Row 1 follows its free greedy run up to and including its own first EOS (if any), padding after.
  const std::vector<int64_t> resp1 = Row(r.responses, 1);
  const std::vector<int64_t> mask1 = Row(r.response_mask, 1);
  bool ended = false;
  for (int64_t t = 0; t < 6; ++t) {
    INFO("t = " << t);
    REQUIRE(mask1[t] == (ended ? 0 : 1));
    REQUIRE(resp1[t] == (ended ? o.pad_token_id : free1[t]));
    if (free1[t] == free0[0]) ended = true;
  }
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: rollout log-probs equal the trainer's log-probs", "[worker][rollout]") {
  // The consistency property behind training/rollout_probs_diff_*: same sequences, same numbers.
  SamplingOptions o;
  o.max_new_tokens = 7;
  o.n = 2;
  o.temperature = 0.8;
  o.top_p = 0.9;  // filtering changes what is sampled, not the log-prob reported (of the unfiltered distribution)
  o.seed = 5;
  o.eos_token_ids = {10, 20, 30};
  o.pad_token_id = 49;
  RolloutBatch r = Generate(model(), kPrompts, o);
  SequenceBatch seq{at::cat({r.prompts, r.responses}, 1), at::cat({r.prompt_mask, r.response_mask}, 1), r.responses,
                    r.response_mask};
  at::NoGradGuard no_grad;
  at::Tensor trainer = ForwardLogProbs(model(), seq, 0, seq.size(), o.temperature, false).log_probs;
  at::Tensor mask = r.response_mask.to(at::kFloat);
  REQUIRE(MaxAbsDiff(trainer * mask, r.log_probs) < 1e-5);
  REQUIRE(r.log_probs.sum().item<double>() < -1.0);  // non-trivial values were compared
}

TEST_CASE("SampleNextTokens: filters", "[worker][rollout]") {
  at::Generator gen = at::detail::createCPUGenerator(7);
  at::Tensor logits = at::randn({64, 50}, gen) * 3.0;
  const at::Tensor argmax = logits.argmax(-1);
  auto draws = [&](int64_t n) { return at::rand({n}, gen, at::kDouble); };

  SECTION("greedy: argmax, log-prob of the plain logits") {
    SamplingOptions o;
    o.do_sample = false;
    at::Tensor lp;
    at::Tensor tok = SampleNextTokens(logits, o, draws(64), &lp);
    REQUIRE(at::equal(tok, argmax));
    at::Tensor expected = logits.log_softmax(-1).gather(-1, argmax.unsqueeze(-1)).squeeze(-1);
    REQUIRE(MaxAbsDiff(lp, expected) < 1e-6);
  }
  SECTION("a tiny top_p keeps only the most likely token") {
    SamplingOptions o;
    o.top_p = 1e-6;
    o.temperature = 2.0;
    at::Tensor lp;
    at::Tensor tok = SampleNextTokens(logits, o, draws(64), &lp);
    REQUIRE(at::equal(tok, argmax));
    // The reported log-prob is under softmax(logits / temperature), before filtering.
    at::Tensor expected = (logits / 2.0).log_softmax(-1).gather(-1, argmax.unsqueeze(-1)).squeeze(-1);
    REQUIRE(MaxAbsDiff(lp, expected) < 1e-6);
  }
  SECTION("top_k = 3 samples only among the three largest logits") {
    SamplingOptions o;
    o.top_k = 3;
    at::Tensor top3 = std::get<1>(logits.topk(3, -1));
    std::set<int64_t> seen;
    for (int rep = 0; rep < 5; ++rep) {
      at::Tensor tok = SampleNextTokens(logits, o, draws(64), nullptr);
      REQUIRE(top3.eq(tok.unsqueeze(-1)).any(-1).all().item<bool>());
      for (int64_t i = 0; i < tok.size(0); ++i) seen.insert(tok[i].item<int64_t>() == argmax[i].item<int64_t>());
    }
    REQUIRE(seen.size() == 2);  // not always the argmax
  }
  SECTION("top_p keeps the smallest prefix whose mass reaches top_p") {
    // p = [0.5, 0.3, 0.2]: top_p 0.6 needs tokens 0 and 1; token 2 is never drawn.
    at::Tensor probs = at::tensor({0.5f, 0.3f, 0.2f}).log().unsqueeze(0).expand({400, 3}).contiguous();
    SamplingOptions o;
    o.top_p = 0.6;
    at::Tensor tok = SampleNextTokens(probs, o, draws(400), nullptr);
    REQUIRE(tok.eq(2).sum().item<int64_t>() == 0);
    REQUIRE(tok.eq(0).sum().item<int64_t>() > 0);
    REQUIRE(tok.eq(1).sum().item<int64_t>() > 0);
    // Without top_p, token 2 shows up (p = 0.2 over 400 draws).
    o.top_p = 1.0;
    REQUIRE(SampleNextTokens(probs, o, draws(400), nullptr).eq(2).sum().item<int64_t>() > 0);
  }
  SECTION("top_p keeps or drops tokens of equal logit together") {
    // p ~ [0.534, 0.197, 0.197, 0.072]: tokens 1 and 2 tie. With top_p 0.6 the mass above either of them is token 0's
    // 0.534, so both stay (a cut after the first in sorted order would keep only one), and token 3 (0.927 above it)
    // goes.
    at::Tensor logits4 = at::tensor({2.0f, 1.0f, 1.0f, 0.0f}).unsqueeze(0).expand({2000, 4}).contiguous();
    SamplingOptions o;
    o.top_p = 0.6;
    const at::Tensor tok = SampleNextTokens(logits4, o, draws(2000), nullptr);
    CHECK(tok.eq(3).sum().item<int64_t>() == 0);
    CHECK(tok.eq(1).sum().item<int64_t>() > 200);
    CHECK(tok.eq(2).sum().item<int64_t>() > 200);
    // Below token 0's mass, only token 0 stays.
    o.top_p = 0.5;
    CHECK(SampleNextTokens(logits4, o, draws(2000), nullptr).eq(0).all().item<bool>());
  }
  SECTION("passes of a few rows give every row's token and log-prob unchanged") {
    SamplingOptions o;
    o.top_k = 20;
    o.top_p = 0.9;
    o.temperature = 0.7;
    const at::Tensor u = draws(64);
    at::Tensor lp_whole, lp_passes;
    o.sampler_rows_per_pass = 64;
    const at::Tensor whole = SampleNextTokens(logits, o, u, &lp_whole);
    o.sampler_rows_per_pass = 5;  // 12 x 5 + 4
    const at::Tensor passes = SampleNextTokens(logits, o, u, &lp_passes);
    REQUIRE(passes.sizes() == whole.sizes());
    REQUIRE(at::equal(passes, whole));
    REQUIRE(at::equal(lp_passes, lp_whole));
    REQUIRE(whole.ne(argmax).any().item<bool>());  // sampled, not greedy
    // Greedy passes without draws.
    SamplingOptions greedy;
    greedy.do_sample = false;
    greedy.top_k = 20;
    greedy.sampler_rows_per_pass = 5;
    REQUIRE(at::equal(SampleNextTokens(logits, greedy, at::Tensor(), nullptr), argmax));
    // The default pass holds a row of Qwen2.5's vocabulary many times over within the workspace bound.
    CHECK(SamplerRowsPerPass(151936) == kSamplerWorkspaceBytes / (kSamplerBytesPerLogit * 151936));
    CHECK(SamplerRowsPerPass(151936) == 504);
    CHECK(SamplerRowsPerPass(int64_t{1} << 40) == 1);
  }
  SECTION("inverse-CDF draws follow the distribution and never pick a zero-probability token") {
    // p = [0.5, 0, 0.3, 0.2]
    const float neg_inf = -std::numeric_limits<float>::infinity();
    at::Tensor row = at::tensor({std::log(0.5f), neg_inf, std::log(0.3f), std::log(0.2f)});
    at::Tensor logits4 = row.unsqueeze(0).expand({20000, 4}).contiguous();
    SamplingOptions o;
    at::Tensor tok = SampleNextTokens(logits4, o, draws(20000), nullptr);
    REQUIRE(tok.eq(1).sum().item<int64_t>() == 0);
    REQUIRE(std::abs(tok.eq(0).sum().item<double>() / 20000 - 0.5) < 0.02);
    REQUIRE(std::abs(tok.eq(2).sum().item<double>() / 20000 - 0.3) < 0.02);
    REQUIRE(std::abs(tok.eq(3).sum().item<double>() / 20000 - 0.2) < 0.02);
    // The extreme draws: 0 picks the first token of positive mass, the largest double below 1 the last.
    at::Tensor edge = SampleNextTokens(logits4.narrow(0, 0, 2), o, at::tensor({0.0, std::nextafter(1.0, 0.0)},
                                                                               at::kDouble), nullptr);
    REQUIRE(edge[0].item<int64_t>() == 0);
    REQUIRE(edge[1].item<int64_t>() == 3);
  }
}

TEST_CASE("CounterUniform: deterministic, in [0, 1), and different per stream and counter", "[worker][rollout]") {
  REQUIRE(CounterUniform(1, 2, 3) == CounterUniform(1, 2, 3));
  REQUIRE(CounterUniform(1, 2, 3) != CounterUniform(1, 2, 4));
  REQUIRE(CounterUniform(1, 2, 3) != CounterUniform(1, 3, 3));
  REQUIRE(CounterUniform(1, 2, 3) != CounterUniform(2, 2, 3));
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const double u = CounterUniform(7, i, 0);
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
  }
  REQUIRE(std::abs(sum / 10000 - 0.5) < 0.02);
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: a prompt's samples do not depend on the rest of the batch",
                 "[worker][rollout]") {
  // Two prompts of equal length generated together, and each alone with its key, draw the same tokens (what
  // data-parallel ranks rely on when they split a step's prompts).
  const std::vector<std::vector<int32_t>> both = {{5, 6, 7}, {8, 9, 10}};
  SamplingOptions o;
  o.n = 3;
  o.max_new_tokens = 6;
  o.seed = 99;
  o.pad_token_id = 49;
  RolloutBatch together = Generate(model(), both, o);
  for (uint64_t i = 0; i < 2; ++i) {
    SamplingOptions alone = o;
    alone.prompt_keys = {i};
    RolloutBatch one = Generate(model(), {both[i]}, alone);
    REQUIRE(at::equal(one.responses, together.responses.narrow(0, static_cast<int64_t>(i) * 3, 3)));
  }
  // And the keys matter: prompt 1 under key 0 draws what prompt 0's stream draws, not what it drew as prompt 1.
  SamplingOptions shifted = o;
  shifted.prompt_keys = {5};
  RolloutBatch other = Generate(model(), {both[1]}, shifted);
  REQUIRE_FALSE(at::equal(other.responses, together.responses.narrow(0, 3, 3)));
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: continuous batching gives what static batching gives",
                 "[worker][rollout]") {
  // Prompts of 1 to 9 tokens, 1 or 3 samples each, EOS tokens that end some sequences early: with fewer slots than
  // sequences, finished sequences hand their slots to waiting ones mid-run, and prefill groups are cut by the token
  // budget. Tokens and masks must equal static batching's exactly, log-probs to float rounding.
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t len = 1; len <= 9; ++len) {
    std::vector<int32_t> p;
    for (int32_t t = 0; t < len; ++t) p.push_back((len * 7 + t * 3) % 45 + 1);
    prompts.push_back(p);
  }
  SamplingOptions o;
  o.n = GENERATE(1, 3);  // the samples of a prompt share its prefill, also when they land in different rounds
  INFO("n " << o.n);
  o.max_new_tokens = 12;
  o.temperature = 0.8;
  o.top_p = 0.9;
  o.seed = 17;
  o.eos_token_ids = {10, 20, 30, 40};
  o.pad_token_id = 49;
  const bool greedy = GENERATE(false, true);
  o.do_sample = !greedy;
  INFO((greedy ? "greedy" : "sampled"));
  RolloutBatch fixed = GenerateStatic(model(), prompts, o);
  // The case is not trivial: some sequences end early, at different lengths, and some run to max_new_tokens.
  at::Tensor lengths = fixed.response_mask.sum(1);
  REQUIRE(lengths.min().item<int64_t>() < o.max_new_tokens);
  REQUIRE(lengths.max().item<int64_t>() == o.max_new_tokens);
  const std::set<int64_t> distinct(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + lengths.numel());
  REQUIRE(distinct.size() >= 2);

  const auto [slots, budget] =
      GENERATE(table<int32_t, int64_t>({{1, 8192}, {3, 8192}, {5, 12}, {7, 1}, {3, 4}, {1024, 8192}}));
  INFO("max_num_seqs " << slots << ", max_num_batched_tokens " << budget);
  o.max_num_seqs = slots;
  o.max_num_batched_tokens = budget;
  // Prompts prefilled padded to the longest of their group, or packed back to back with their keys and values
  // written straight into the slots (a GPU's default; here the same path with one attention call per prompt).
  const bool packed = GENERATE(false, true);
  INFO((packed ? "packed prefill" : "padded prefill"));
  o.prefill_layout = packed ? PrefillLayout::kPacked : PrefillLayout::kPadded;
  // A prompt longer than the budget prefilled in chunks of at most the budget's tokens (of 1 token, or of 4: 2 or 3
  // chunks for prompts of 5 to 9), each attending to the ones before it in the slot, or alone in one pass.
  o.chunked_prefill = GENERATE(true, false);
  INFO((o.chunked_prefill ? "chunked prefill" : "long prompts whole"));
  RolloutBatch cont = GenerateContinuous(model(), prompts, o);
  CAPTURE(cont.compactions, cont.prompt_joins, cont.prefill_chunks);
  REQUIRE(cont.decode_graphs == 0);  // CPU
  if (o.chunked_prefill && budget < 9) {
    CHECK(cont.prefill_chunks >= (budget == 1 ? 44 : 11));  // every prefill of the prompts longer than the budget
  } else {
    CHECK(cont.prefill_chunks == 0);
  }
  // Three sampled samples in three slots or five: they end at different steps, so slots free a few at a time and a
  // prompt's samples straddle admission rounds, the later ones joining a running sample. In one slot a prompt's next
  // sample waits until the last one ended: nothing to join, the prompt is prefilled again.
  if (o.n == 3 && !greedy && (slots == 3 || slots == 5)) CHECK(cont.prompt_joins > 0);
  if (slots == 1) CHECK(cont.prompt_joins == 0);
  RequireSameRollout(cont, fixed);
  // Generate takes the continuous schedule unless asked for lockstep.
  REQUIRE(at::equal(Generate(model(), prompts, o).log_probs, cont.log_probs));
}

TEST_CASE("StaticPasses: whole prompts, at most max_num_seqs rows a pass, at least one prompt", "[worker][rollout]") {
  CHECK(StaticPasses(5, 2, 1024) == 1);
  CHECK(StaticPasses(5, 2, 4) == 3);  // two prompts a pass
  CHECK(StaticPasses(5, 2, 7) == 2);  // three
  CHECK(StaticPasses(5, 2, 1) == 5);  // one, though its two rows are more than one slot
  CHECK(StaticPasses(6, 1, 3) == 2);
  CHECK(StaticPasses(0, 2, 4) == 0);
  CHECK(StaticPassPrompts(2, 7) == 3);
  CHECK(StaticPassPrompts(2, 1) == 1);
}

TEST_CASE_METHOD(TinyModelFixture, "GenerateStatic in passes of max_num_seqs rows gives the one-pass rollout",
                 "[worker][rollout]") {
  // Prompts of 2-6 tokens: each pass pads to its own longest, and the rollout is laid out as one pass's.
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t len : {4, 2, 6, 3, 5}) {
    std::vector<int32_t> p;
    for (int32_t t = 0; t < len; ++t) p.push_back((len * 11 + t * 7) % 45 + 1);
    prompts.push_back(p);
  }
  SamplingOptions o;
  o.n = 2;
  o.max_new_tokens = 8;
  o.temperature = 0.9;
  o.seed = 5;
  o.eos_token_ids = {10, 20, 30};
  o.pad_token_id = 49;
  o.lockstep = true;
  const RolloutBatch one = GenerateStatic(model(), prompts, o);
  REQUIRE(one.prompts.size(0) == 10);
  REQUIRE(one.static_passes == 1);
  for (int32_t slots : {1, 2, 4, 7}) {
    INFO("max_num_seqs " << slots);
    o.max_num_seqs = slots;
    o.lockstep_passes = 0;
    CHECK(GenerateStatic(model(), prompts, o).static_passes ==
          StaticPasses(static_cast<int64_t>(prompts.size()), o.n, slots));
    // Two passes more than its prompts need, as a rank whose peers have more prompts makes (over a dummy prompt).
    o.lockstep_passes = StaticPasses(static_cast<int64_t>(prompts.size()), o.n, slots) + 2;
    const RolloutBatch parts = GenerateStatic(model(), prompts, o);
    CHECK(parts.static_passes == o.lockstep_passes);
    RequireSameRollout(parts, one);
  }
  // No prompts: only the lockstep passes, and an empty rollout.
  o.lockstep_passes = 2;
  const RolloutBatch none = GenerateStatic(model(), {}, o);
  CHECK_FALSE(none.responses.defined());
  CHECK(none.static_passes == 2);
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: an empty prompt is an error that names it", "[worker][rollout]") {
  SamplingOptions o;
  o.max_new_tokens = 2;
  for (const PrefillLayout layout : {PrefillLayout::kPadded, PrefillLayout::kPacked}) {
    o.prefill_layout = layout;
    REQUIRE_THROWS_WITH(GenerateContinuous(model(), {{5, 6}, {}}, o), Catch::Contains("prompt 1 has no tokens"));
  }
  // The lockstep schedule too (it generated such a row from a pad token).
  REQUIRE_THROWS_WITH(GenerateStatic(model(), {{5, 6}, {}}, o), Catch::Contains("prompt 1 has no tokens"));
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: a prefill budget of no tokens is an error, not an endless chunk loop",
                 "[worker][rollout]") {
  SamplingOptions o;
  o.max_new_tokens = 2;
  for (const int64_t budget : {0, -3}) {
    o.max_num_batched_tokens = budget;
    REQUIRE_THROWS_WITH(GenerateContinuous(model(), {{5, 6, 7}}, o),
                        Catch::Contains("max_num_batched_tokens " + std::to_string(budget)));
  }
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: compaction moves the tail into lower slots without changing outputs",
                 "[worker][rollout]") {
  // 40 rows in 40 slots from the start; half of the vocabulary ends a sequence, so lengths spread and the running
  // batch falls through the buckets (32, 16, 8, ...) while higher slots still run: those sequences move down.
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 20; ++i) prompts.push_back({(i * 5) % 45 + 1, (i * 11) % 45 + 1, 3});
  SamplingOptions o;
  o.n = 2;
  o.max_new_tokens = 24;
  o.temperature = 1.5;
  o.seed = 3;
  for (int32_t id = 1; id < 50; id += 2) o.eos_token_ids.push_back(id);
  o.pad_token_id = 0;
  RolloutBatch fixed = GenerateStatic(model(), prompts, o);
  RolloutBatch cont = GenerateContinuous(model(), prompts, o);
  CAPTURE(cont.compactions);
  CHECK(cont.compactions >= 2);
  const at::Tensor lengths = fixed.response_mask.sum(1);
  CHECK(lengths.min().item<int64_t>() < lengths.max().item<int64_t>());
  REQUIRE(at::equal(cont.responses, fixed.responses));
  REQUIRE(at::equal(cont.response_mask, fixed.response_mask));
  REQUIRE(MaxAbsDiff(cont.log_probs, fixed.log_probs) < 1e-5);
  // Static batching never compacts.
  CHECK(fixed.compactions == 0);
}

TEST_CASE_METHOD(TinyModelFixture, "Generate: shared prompts give what a copy per sample gives, bit for bit",
                 "[worker][rollout]") {
  // 12 prompts x 4 samples; a third of the vocabulary ends a sequence, so a prompt's holder often ends before its
  // siblings (hand-offs), and freed slots are taken by waiting prompts (10 slots: a prompt's samples often straddle
  // admission rounds, and the later ones join a running sample of it) or the tail compacts (48 slots).
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 12; ++i) {
    std::vector<int32_t> p;
    for (int32_t t = 0; t < 2 + i % 6; ++t) p.push_back((i * 13 + t * 7) % 45 + 1);
    prompts.push_back(p);
  }
  SamplingOptions o;
  o.n = 4;
  o.max_new_tokens = 16;
  o.temperature = 1.3;
  o.seed = 5;
  for (int32_t id = 2; id < 50; id += 3) o.eos_token_ids.push_back(id);
  o.pad_token_id = 0;
  int64_t handoffs = 0, compactions = 0, joins = 0;
  for (const int32_t slots : {10, 48}) {
    for (const PrefillLayout layout : {PrefillLayout::kPadded, PrefillLayout::kPacked}) {
      INFO("max_num_seqs " << slots << (layout == PrefillLayout::kPacked ? ", packed prefill" : ", padded prefill"));
      o.max_num_seqs = slots;
      o.prefill_layout = layout;
      o.prompt_sharing = PromptSharing::kOff;
      const RolloutBatch copies = GenerateContinuous(model(), prompts, o);
      o.prompt_sharing = PromptSharing::kOn;
      const RolloutBatch shared = GenerateContinuous(model(), prompts, o);
      CAPTURE(shared.prompt_handoffs, shared.compactions);
      const at::Tensor lengths = copies.response_mask.sum(1);
      REQUIRE(lengths.min().item<int64_t>() < lengths.max().item<int64_t>());
      REQUIRE(at::equal(shared.responses, copies.responses));
      REQUIRE(at::equal(shared.response_mask, copies.response_mask));
      REQUIRE(at::equal(shared.log_probs, copies.log_probs));
      CHECK(copies.prompt_handoffs == 0);
      CHECK(copies.prompt_joins == shared.prompt_joins);  // joins do not depend on sharing
      handoffs += shared.prompt_handoffs;
      joins += shared.prompt_joins;
      compactions += shared.compactions;
      // The CPU's default copies (the gather costs more than it saves there).
      o.prompt_sharing = PromptSharing::kAuto;
      CHECK(GenerateContinuous(model(), prompts, o).prompt_handoffs == 0);
    }
  }
  CHECK(handoffs > 0);
  CHECK(compactions > 0);
  CHECK(joins > 0);
}

TEST_CASE_METHOD(TinyModelFixture,
                 "Generate: joined samples that end at their first token give static batching's outputs",
                 "[worker][rollout]") {
  // Three new tokens, half the vocabulary an EOS, five slots for 10 prompts x 3 samples: slots free a few at a time, so
  // prompts straddle admission rounds and their later samples join one still running; many of those end at their
  // first token (released during admission) or at the limit.
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 10; ++i) prompts.push_back({(i * 7) % 45 + 1, (i * 3) % 45 + 2, 5});
  SamplingOptions o;
  o.n = 3;
  o.max_new_tokens = 3;
  o.temperature = 1.2;
  o.seed = 9;
  for (int32_t id = 1; id < 50; id += 2) o.eos_token_ids.push_back(id);
  o.pad_token_id = 0;
  o.max_num_seqs = 5;
  const RolloutBatch fixed = GenerateStatic(model(), prompts, o);
  const at::Tensor lengths = fixed.response_mask.sum(1);
  REQUIRE(lengths.eq(1).any().item<bool>());
  REQUIRE(lengths.eq(3).any().item<bool>());
  for (const PromptSharing sharing : {PromptSharing::kOff, PromptSharing::kOn}) {
    INFO((sharing == PromptSharing::kOn ? "shared" : "copies"));
    o.prompt_sharing = sharing;
    const RolloutBatch cont = GenerateContinuous(model(), prompts, o);
    CAPTURE(cont.prompt_joins, cont.prompt_handoffs);
    CHECK(cont.prompt_joins > 0);
    REQUIRE(at::equal(cont.responses, fixed.responses));
    REQUIRE(at::equal(cont.response_mask, fixed.response_mask));
    REQUIRE(MaxAbsDiff(cont.log_probs, fixed.log_probs) < 1e-5);
  }
}

TEST_CASE("KvSlotBytes: keys and values of every layer", "[worker][rollout]") {
  const DecoderConfig c = testing::TinyDecoderConfig();  // 2 layers, 2 kv heads of 8
  REQUIRE(KvSlotBytes(c, at::kFloat, 10) == 2 * 2 * 2 * 8 * 10 * 4);
  REQUIRE(KvSlotBytes(c, at::kBFloat16, 10) == 2 * 2 * 2 * 8 * 10 * 2);
}

TEST_CASE("PrefillBytes: the largest prefill pass continuous batching admits", "[worker][rollout]") {
  const DecoderConfig c = testing::TinyDecoderConfig(100);
  const int64_t token = ForwardTokenBytes(c, at::kBFloat16);
  REQUIRE(token == 2 * (4 * c.hidden_size + 4 * c.num_attention_heads * c.head_dim +
                        2 * c.num_key_value_heads * c.head_dim + 3 * c.intermediate_size));
  REQUIRE(ForwardTokenBytes(c, at::kFloat) == 2 * token);
  // The logits of a pass's prompts (bf16 and float32) and a float32 row per sample.
  auto logits = [&](int64_t prompts, int64_t rows) { return prompts * 100 * 6 + rows * 100 * 4; };
  // A chunk's attention copies the cached keys and values of the whole prompt so far (bf16).
  auto chunk_keys = [&](int64_t longest) { return 2 * longest * c.num_key_value_heads * c.head_dim * 2; };
  for (const bool chunked : {false, true}) {
    INFO((chunked ? "chunked prefill" : "whole prompts"));
    // Prompts of 3, 5 and 9 tokens, 2 samples each. A pass admits the shortest that fit in 8 tokens (3 + 5), but the
    // tokens of the next pass (9, alone) are more; chunked, that prompt's passes are of 8 and 1 tokens.
    CHECK(PrefillBytes(c, at::kBFloat16, {9, 3, 5}, 2, 8, 100, chunked) ==
          (chunked ? 8 * token + chunk_keys(9) : 9 * token) + logits(2, 4));
    // All of them fit in 17 tokens packed: one pass. Beyond, the three padded to the longest (27 tokens) bound it.
    CHECK(PrefillBytes(c, at::kBFloat16, {9, 3, 5}, 2, 17, 100, chunked) == 17 * token + logits(3, 6));
    CHECK(PrefillBytes(c, at::kBFloat16, {9, 3, 5}, 2, 1000, 100, chunked) == 27 * token + logits(3, 6));
    // 12 tokens: at most two prompts (3 + 5), and 12 tokens of the three.
    CHECK(PrefillBytes(c, at::kBFloat16, {9, 3, 5}, 2, 12, 100, chunked) == 12 * token + logits(2, 4));
    // The rows drawn from a pass are at most the slots (max_rows).
    CHECK(PrefillBytes(c, at::kBFloat16, {9, 3, 5}, 2, 17, 5, chunked) == 17 * token + logits(3, 5));
    // A prompt longer than the budget is a pass of its own, or passes of at most the budget.
    CHECK(PrefillBytes(c, at::kBFloat16, {40}, 1, 8, 100, chunked) ==
          (chunked ? 8 * token + chunk_keys(40) : 40 * token) + logits(1, 1));
    CHECK(PrefillBytes(c, at::kBFloat16, {}, 2, 8, 100, chunked) == 0);
    // In float32 (no flash attention) a chunk also holds its mask over the prompt so far, as bool and as float32; a
    // whole prompt's pass is padded: its rows' own cache of every layer's keys and values, and its mask [rows, longest,
    // longest], the rows at the longest's width being at most the pass's tokens (two prompts of 9 in a budget of 18).
    const int64_t kv_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4;
    CHECK(PrefillBytes(c, at::kFloat, {40}, 1, 8, 100, chunked) ==
          (chunked ? 8 * 2 * token + 2 * chunk_keys(40) + 8 * 40 * 5 : 40 * (2 * token + kv_token + 40 * 5)) +
              100 * 8 + 100 * 4);
    CHECK(PrefillBytes(c, at::kFloat, {9, 9, 9}, 1, 18, 100, chunked) ==
          18 * (2 * token + kv_token + 9 * 5) + 2 * 100 * 8 + 2 * 100 * 4);
  }
}

TEST_CASE("RolloutOutputBytes: int64 ids and a bool mask per position, a float32 log-prob per response position",
          "[worker][rollout]") {
  CHECK(RolloutOutputBytes(3, 10, 4) == 3 * (10 * 9 + 4 * 13));
  CHECK(RolloutOutputBytes(0, 10, 4) == 0);
}

TEST_CASE_METHOD(TinyModelFixture, "FoldedQkvBytes: the q, k and v projection weights in bf16, none otherwise",
                 "[worker][rollout]") {
  int64_t elements = 0;  // of the model's own q/k/v weights
  for (const auto& [name, t] : model().named_parameters()) {
    for (const char* proj : {"q_proj.weight", "k_proj.weight", "v_proj.weight"}) {
      if (name.size() > std::strlen(proj) && name.compare(name.size() - std::strlen(proj), std::string::npos, proj) == 0) {
        elements += t.numel();
      }
    }
  }
  REQUIRE(elements > 0);
  CHECK(FoldedQkvBytes(model().config(), at::kBFloat16) == elements * 2);
  CHECK(FoldedQkvBytes(model().config(), at::kHalf) == 0);
  CHECK(FoldedQkvBytes(model().config(), at::kFloat) == 0);
  // The CPU decodes unfolded.
  CHECK(model().FoldedQkvWeights().empty());
  CHECK(model().FoldedGateUpWeights().empty());
}

TEST_CASE_METHOD(TinyModelFixture, "FoldedGateUpBytes: the gate and up projection weights in bf16, none otherwise",
                 "[worker][rollout]") {
  int64_t elements = 0;
  for (const auto& [name, t] : model().named_parameters()) {
    for (const char* proj : {"gate_proj.weight", "up_proj.weight"}) {
      if (name.size() > std::strlen(proj) && name.compare(name.size() - std::strlen(proj), std::string::npos, proj) == 0) {
        elements += t.numel();
      }
    }
  }
  REQUIRE(elements > 0);
  CHECK(FoldedGateUpBytes(model().config(), at::kBFloat16) == elements * 2);
  CHECK(FoldedGateUpBytes(model().config(), at::kHalf) == 0);
  CHECK(FoldedGateUpBytes(model().config(), at::kFloat) == 0);
}

TEST_CASE("FoldCostsNoSlots: a folded copy only where every wanted slot still fits", "[worker][rollout]") {
  // 100 bytes a slot, 30 taken by the q/k/v copy, 200 for gate/up.
  CHECK(FoldCostsNoSlots(1030 + 200, 30, 200, 100, 10));      // 10 slots either way
  CHECK_FALSE(FoldCostsNoSlots(1030 + 199, 30, 200, 100, 10));  // 9 instead of 10
  CHECK(FoldCostsNoSlots(1030, 30, 200, 100, 8));              // 8 wanted: 8 either way
  CHECK_FALSE(FoldCostsNoSlots(1030, 30, 200, 100, 9));        // 9 wanted, 8 beside the copy
  CHECK(FoldCostsNoSlots(1e12, 30, 200, 100, 1024));           // a roomy device: max_num_seqs caps both
  CHECK_FALSE(FoldCostsNoSlots(150, 30, 200, 100, 1));         // the copy would leave no slot at all
  // The q/k/v copy, the first one: nothing folded before it.
  CHECK(FoldCostsNoSlots(1000 + 30, 0, 30, 100, 10));
  CHECK_FALSE(FoldCostsNoSlots(1000 + 29, 0, 30, 100, 10));
  CHECK(FoldCostsNoSlots(1029, 0, 30, 100, 9));  // 10 fit without it, 9 wanted
}

}  // namespace
}  // namespace verl
