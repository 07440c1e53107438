#include "worker/train/sequence_batch.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "tests/test_dir.h"
#include "tests/worker/tiny_model.h"
#include "tests/worker/torch_catch.h"
#include "worker/train/ppo_actor.h"
#include "worker/train/ppo_critic.h"

namespace verl {
namespace {

using testing::LoadModelOrDie;
using testing::MaxAbsDiff;
using testing::TestDir;

// Six sequences of different shapes: prompt i has 1 + i tokens (left-padded to 6), response i has 5 - i % 5 tokens
// (right-padded to 5), ids from a small formula.
SequenceBatch RaggedBatch() {
  const int64_t N = 6, P = 6, R = 5;
  at::Tensor ids = at::full({N, P + R}, 49, at::kLong);
  at::Tensor valid = at::zeros({N, P + R}, at::kBool);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t p = 1 + i, r = 5 - i % 5;
    for (int64_t t = 0; t < p; ++t) {
      ids[i][P - p + t] = (i * 7 + t * 3) % 45 + 1;
      valid[i][P - p + t] = true;
    }
    for (int64_t t = 0; t < r; ++t) {
      ids[i][P + t] = (i * 5 + t * 11) % 45 + 1;
      valid[i][P + t] = true;
    }
  }
  SequenceBatch b;
  b.input_ids = ids;
  b.attention_mask = valid;
  b.responses = ids.narrow(1, P, R).clone();
  b.response_mask = valid.narrow(1, P, R).clone();
  return b;
}

std::vector<std::vector<int64_t>> AsLists(const std::vector<at::Tensor>& parts) {
  std::vector<std::vector<int64_t>> out;
  for (const at::Tensor& t : parts) out.emplace_back(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  return out;
}

int64_t PaddedTokens(const SequenceBatch& b, const std::vector<int64_t>& rows) {
  const SequenceBatch sub = SelectTrimmed(b, at::tensor(rows, at::kLong));
  return sub.input_ids.numel();
}

TEST_CASE("SelectTrimmed drops the padding columns no selected row uses", "[worker][train]") {
  const SequenceBatch b = RaggedBatch();
  // Rows 0 (prompt 1, response 5) and 2 (prompt 3, response 3): 3 prompt columns, 5 response columns.
  SequenceBatch s = SelectTrimmed(b, at::tensor({0, 2}, at::kLong));
  REQUIRE(s.input_ids.sizes() == at::IntArrayRef({2, 8}));
  REQUIRE(s.responses.sizes() == at::IntArrayRef({2, 5}));
  REQUIRE(at::equal(s.input_ids[1], b.input_ids[2].narrow(0, 3, 8)));
  REQUIRE(at::equal(s.attention_mask[0], b.attention_mask[0].narrow(0, 3, 8)));
  // Rows 3 (prompt 4, response 2) and 4 (prompt 5, response 1): 5 prompt columns, 2 response columns.
  s = SelectTrimmed(b, at::tensor({3, 4}, at::kLong));
  REQUIRE(s.input_ids.sizes() == at::IntArrayRef({2, 7}));
  REQUIRE(s.responses.sizes() == at::IntArrayRef({2, 2}));
  REQUIRE(at::equal(s.responses, b.responses.index_select(0, at::tensor({3, 4}, at::kLong)).narrow(1, 0, 2)));
  // Nothing lost: every valid token of the rows is still there.
  REQUIRE(s.attention_mask.sum().item<int64_t>() == 4 + 2 + 5 + 1);
  REQUIRE(at::equal(PadResponseColumns(s.response_mask.to(at::kFloat), 5),
                    b.response_mask.index_select(0, at::tensor({3, 4}, at::kLong)).to(at::kFloat)));
}

TEST_CASE("Host copies plan the passes as the tensors they copy would, and are what planning reads",
          "[worker][train]") {
  SequenceBatch b = RaggedBatch();
  // Copies in memory of their own (a GPU batch's are CPU tensors; a CPU batch's are the tensors themselves).
  SequenceBatch h = b;
  h.host_input_ids = b.input_ids.clone();
  h.host_attention_mask = b.attention_mask.clone();
  h.host_response_mask = b.response_mask.clone();
  REQUIRE(WithHostCopies(b).host_attention_mask.is_same(b.attention_mask));
  REQUIRE(WithHostCopies(h).host_attention_mask.is_same(h.host_attention_mask));  // kept
  for (const std::vector<int64_t>& rows : std::vector<std::vector<int64_t>>{{0, 2}, {3, 4}, {5, 1, 0}}) {
    INFO("rows " << rows.size());
    const SequenceBatch plain = SelectTrimmed(b, at::tensor(rows, at::kLong));
    const SequenceBatch copied = SelectTrimmed(h, at::tensor(rows, at::kLong));
    REQUIRE_FALSE(plain.has_host_copies());
    REQUIRE(at::equal(copied.input_ids, plain.input_ids));
    REQUIRE(at::equal(copied.host_input_ids, plain.input_ids));
    REQUIRE(at::equal(copied.host_attention_mask, plain.attention_mask));
    REQUIRE(at::equal(copied.host_response_mask, plain.response_mask));
    for (bool share : {false, true}) {
      const PackedBatch p = PackBatch(plain.input_ids, plain.attention_mask, plain.response_mask, share);
      const PackedBatch q = PackBatch(copied.input_ids, copied.attention_mask, copied.response_mask, share,
                                      {copied.host_input_ids, copied.host_attention_mask, copied.host_response_mask});
      REQUIRE(at::equal(p.input_ids, q.input_ids));
      REQUIRE(at::equal(p.position_ids, q.position_ids));
      REQUIRE(at::equal(p.predicting, q.predicting));
      REQUIRE(p.sequences.offsets == q.sequences.offsets);
      // The valid response tokens in masked_select's order.
      REQUIRE(at::equal(plain.responses.reshape({-1}).index_select(0, q.response_tokens),
                        plain.responses.masked_select(plain.response_mask)));
    }
  }
  MicroBatching budget;
  budget.max_token_len = 18;
  REQUIRE(AsLists(SplitMicroBatches(h, budget).value()) == AsLists(SplitMicroBatches(b, budget).value()));
  // Host copies with a row stride of their own (columns of wider tensors) plan the same micro-batches, packed and
  // with shared prompts too: planning reads them in place, row by row.
  {
    auto columns_of_wider = [](const at::Tensor& t) {
      at::Tensor wide = at::zeros({t.size(0), t.size(1) + 3}, t.options());
      wide.narrow(1, 2, t.size(1)).copy_(t);
      return wide.narrow(1, 2, t.size(1));
    };
    SequenceBatch v = b;
    v.host_input_ids = columns_of_wider(b.input_ids);
    v.host_attention_mask = columns_of_wider(b.attention_mask);
    v.host_response_mask = columns_of_wider(b.response_mask);
    REQUIRE_FALSE(v.host_attention_mask.is_contiguous());
    for (const auto& [packed, share] : std::vector<std::pair<bool, bool>>{{false, false}, {true, false}, {true, true}}) {
      INFO("packed " << packed << ", shared prompts " << share);
      MicroBatching how = budget;
      how.packed = packed;
      how.share_prompts = share;
      REQUIRE(AsLists(SplitMicroBatches(v, how).value()) == AsLists(SplitMicroBatches(b, how).value()));
    }
  }
  // Planning reads the host copies, not the tensors: host response masks that keep only the first column cut rows 0
  // (5 response tokens) and 4 (1) to that column, where the tensors keep 5.
  h.host_response_mask = b.response_mask.clone();
  h.host_response_mask.narrow(1, 1, 4).fill_(false);
  REQUIRE(SelectTrimmed(h, at::tensor({0, 4}, at::kLong)).responses.size(1) == 1);
  REQUIRE(SelectTrimmed(b, at::tensor({0, 4}, at::kLong)).responses.size(1) == 5);
}

TEST_CASE("SplitMicroBatches: fixed sizes in order, or token budgets longest first", "[worker][train]") {
  const SequenceBatch b = RaggedBatch();  // prompt + response: 1+5, 2+4, 3+3, 4+2, 5+1, 6+5
  MicroBatching fixed;
  fixed.rows = 4;
  REQUIRE(AsLists(SplitMicroBatches(b, fixed).value()) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5}});

  MicroBatching dynamic;
  dynamic.max_token_len = 16;
  dynamic.budget_key = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu";
  const auto groups = AsLists(SplitMicroBatches(b, dynamic).value());
  std::multiset<int64_t> seen;
  for (const auto& g : groups) {
    INFO("group of " << g.size() << " rows");
    REQUIRE(std::is_sorted(g.begin(), g.end()));
    REQUIRE(PaddedTokens(b, g) <= 16);  // the trimmed pass really is within the budget
    seen.insert(g.begin(), g.end());
  }
  REQUIRE(seen == std::multiset<int64_t>{0, 1, 2, 3, 4, 5});
  // Row 5 (prompt 6 + response 5 = 11 tokens, the longest) comes first, and alone: with any other row, 22 > 16.
  REQUIRE(groups.front() == std::vector<int64_t>{5});
  REQUIRE(groups.size() < 6);  // sequences were packed together

  // What a pass computes decides what fits: padded, rows x (longest prompt + longest response); rolled past the left
  // padding (causal passes), rows x the longest row; packed, the rows' tokens (verl's count).
  MicroBatching ways = dynamic;
  ways.max_token_len = 18;
  REQUIRE(AsLists(SplitMicroBatches(b, ways).value()) == std::vector<std::vector<int64_t>>{{5}, {0, 1}, {2, 3}, {4}});
  ways.rolled = true;
  REQUIRE(AsLists(SplitMicroBatches(b, ways).value()) == std::vector<std::vector<int64_t>>{{5}, {0, 1, 2}, {3, 4}});
  ways.rolled = false;
  ways.packed = true;
  ways.max_token_len = 17;
  REQUIRE(AsLists(SplitMicroBatches(b, ways).value()) == std::vector<std::vector<int64_t>>{{0, 5}, {1, 2}, {3, 4}});

  // A budget smaller than one sequence names the key.
  dynamic.max_token_len = 10;
  auto too_small = SplitMicroBatches(b, dynamic);
  REQUIRE_FALSE(too_small.ok());
  REQUIRE_THAT(std::string(too_small.status().message()),
               Catch::Contains("actor_rollout_ref.actor.ppo_max_token_len_per_gpu (10) is shorter than a sequence of "
                               "11 tokens (prompt 6 + response 5)"));

  // Agreement with other ranks (a sharded model): a peer that needs 5 passes makes this rank cut 5 too.
  dynamic.max_token_len = 64;
  const size_t alone = SplitMicroBatches(b, dynamic).value().size();
  REQUIRE(alone < 5);
  dynamic.agree = [](const at::Tensor& mine) {
    at::Tensor peer = at::zeros_like(mine);
    peer[4] = 1.0f;  // the other rank's one-hot: 5 micro-batches
    return mine + peer;
  };
  const auto agreed = AsLists(SplitMicroBatches(b, dynamic).value());
  REQUIRE(agreed.size() == 5);
  seen.clear();
  for (const auto& g : agreed) seen.insert(g.begin(), g.end());
  REQUIRE(seen == std::multiset<int64_t>{0, 1, 2, 3, 4, 5});

  // A rank that cannot plan still takes part in the agreement, once, so its peers stop with it instead of waiting for
  // it in their passes' collectives; a peer that failed stops this rank too.
  int calls = 0;
  at::Tensor told;
  dynamic.agree = [&](const at::Tensor& mine) {
    ++calls;
    told = mine.clone();
    return mine;
  };
  dynamic.max_token_len = 10;
  auto failed = SplitMicroBatches(b, dynamic);
  REQUIRE_FALSE(failed.ok());
  REQUIRE(absl::IsInvalidArgument(failed.status()));
  REQUIRE_THAT(std::string(failed.status().message()), Catch::Contains("is shorter than a sequence of 11 tokens"));
  REQUIRE(calls == 1);
  REQUIRE(told[told.numel() - 1].item<float>() == 1.0f);  // the failure flag
  REQUIRE(told.sum().item<float>() == 1.0f);               // and no count
  dynamic.max_token_len = 64;
  dynamic.agree = [](const at::Tensor& mine) {
    at::Tensor peer = at::zeros_like(mine);
    peer[peer.numel() - 1] = 1.0f;  // the other rank failed
    return mine + peer;
  };
  auto stopped = SplitMicroBatches(b, dynamic);
  REQUIRE(absl::IsAborted(stopped.status()));
  REQUIRE_THAT(std::string(stopped.status().message()),
               Catch::Contains("another rank could not cut its sequences into passes by "
                               "actor_rollout_ref.actor.ppo_max_token_len_per_gpu"));
}

std::vector<at::Tensor> Snapshot(const std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::vector<at::Tensor> out;
  for (const auto& [name, p] : params) out.push_back(p.detach().clone());
  return out;
}

double MaxDiff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, MaxAbsDiff(a[i], b[i]));
  return d;
}

TEST_CASE("Token-budget micro-batches give the update and the log-probs of one whole pass", "[worker][train]") {
  // The same mini-batch as one untrimmed pass of 6 rows, as fixed passes of 2 rows, cut by token budgets (rows
  // reordered, padding trimmed per pass), and packed without padding: log-probs and updated weights agree to float
  // rounding.
  TestDir dir("dynamic_bsz");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  // Every row's valid tokens one run: the padded passes attend causally over rolled rows; with a hole in one row's
  // prompt, every padded pass of the batch takes the explicit mask (CausalPasses).
  const bool holed = GENERATE(false, true);
  SequenceBatch b = RaggedBatch();
  if (holed) b.attention_mask[5][1] = false;
  REQUIRE(CausalPasses(b, /*packed=*/false) == !holed);
  const at::Tensor adv = at::linspace(-1.0, 1.5, 30, at::kFloat).view({6, 5});
  const at::Tensor mask = b.response_mask.to(at::kFloat);
  const std::string agg = GENERATE(std::string("token-mean"), std::string("seq-mean-token-mean"),
                                   std::string("seq-mean-token-sum"), std::string("seq-mean-token-sum-norm"));
  INFO("loss_agg_mode " << agg << ", holed " << holed);

  struct Result {
    at::Tensor log_probs;
    std::vector<at::Tensor> weights;
    std::map<std::string, double> metrics;
  };
  auto run = [&](int64_t rows, int64_t budget, bool packed = false) {
    auto model = LoadModelOrDie(dir.path());
    MicroBatching micro;
    micro.rows = rows;
    micro.max_token_len = budget;
    micro.budget_key = "test";
    micro.packed = packed;
    Result r;
    r.log_probs = ComputeLogProbsNoGrad(*model, b, 0.7, micro).value();
    PolicyUpdateOptions o;
    o.lr = 1.0;
    o.grad_clip = 1e9;
    o.mini_batch_size = 6;
    o.micro_batch_size = rows;
    o.max_token_len = budget;
    o.remove_padding = packed;
    o.temperature = 0.7;
    o.loss.loss_agg_mode = agg;
    o.entropy_coeff = 0.01;
    model->SetRequiresGrad(true);
    AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, /*eps=*/1.0});
    const std::vector<at::Tensor> before = Snapshot(model->named_parameters());
    auto m = UpdatePolicy(*model, opt, b, {r.log_probs, at::Tensor(), adv}, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    r.metrics = *m;
    r.weights = Snapshot(model->named_parameters());
    REQUIRE(MaxDiff(r.weights, before) > 1e-2);  // the update did something
    return r;
  };
  const Result whole = run(6, 0);
  const Result pairs = run(2, 0);
  const Result budget = run(0, 16);
  const Result loose = run(0, 40);
  // Packed without padding (use_remove_padding): attention per sequence, alone or with token budgets.
  const Result packed_whole = run(6, 0, /*packed=*/true);
  const Result packed_budget = run(0, 16, /*packed=*/true);
  for (const Result* r : {&pairs, &budget, &loose, &packed_whole, &packed_budget}) {
    REQUIRE(MaxAbsDiff(r->log_probs, whole.log_probs) < 1e-5);
    REQUIRE(MaxAbsDiff(r->log_probs * (1 - mask), at::zeros_like(mask)) == 0.0);  // nothing outside the mask
    REQUIRE(MaxDiff(r->weights, whole.weights) < 1e-5);
    REQUIRE(r->metrics.at("actor/pg_loss") == Approx(whole.metrics.at("actor/pg_loss")).margin(1e-6));
    REQUIRE(r->metrics.at("actor/entropy") == Approx(whole.metrics.at("actor/entropy")).epsilon(1e-5));
    REQUIRE(r->metrics.at("actor/grad_norm") == Approx(whole.metrics.at("actor/grad_norm")).epsilon(1e-4));
  }
  if (holed) {
    // The rows without the hole, alone (rolled, causal), have the masked passes' log-probs.
    const at::Tensor rows = at::arange(5, at::kLong);
    const SequenceBatch one_run = SelectRows(b, rows);
    REQUIRE(CausalPasses(one_run, false));
    auto model = LoadModelOrDie(dir.path());
    MicroBatching micro;
    micro.max_token_len = 16;
    micro.budget_key = "test";
    const at::Tensor rolled = ComputeLogProbsNoGrad(*model, one_run, 0.7, micro).value();
    REQUIRE(MaxAbsDiff(rolled, whole.log_probs.index_select(0, rows)) < 1e-5);
    // A subset told the whole batch's decision (the old log-prob pass over the rows the update does not compute
    // itself) takes that path: the explicit mask here, the same numbers.
    micro.causal = CausalPasses(b, false);
    const at::Tensor masked = ComputeLogProbsNoGrad(*model, one_run, 0.7, micro).value();
    REQUIRE(MaxAbsDiff(masked, whole.log_probs.index_select(0, rows)) < 1e-5);
    // The decision is taken as given, not recomputed from the rows: causal passes over the holed row refuse.
    micro.causal = true;
    REQUIRE_THROWS_WITH(ComputeLogProbsNoGrad(*model, b, 0.7, micro), Catch::Contains("valid tokens are not one run"));
  }
}

TEST_CASE("Token-budget and packed passes give the critic's values and update of one whole pass", "[worker][train]") {
  TestDir dir("dynamic_bsz_critic");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  // As the actor's: rows rolled and causal, or (a hole in one row's prompt) every pass with the explicit mask.
  const bool holed = GENERATE(false, true);
  SequenceBatch b = RaggedBatch();
  if (holed) b.attention_mask[5][1] = false;
  REQUIRE(CausalPasses(b, /*packed=*/false) == !holed);
  const at::Tensor returns = at::linspace(1.0, -0.5, 30, at::kFloat).view({6, 5}) * b.response_mask.to(at::kFloat);
  std::vector<at::Tensor> values, weights;
  const std::vector<std::tuple<int64_t, int64_t, bool>> runs = {
      {6, 0, false}, {0, 16, false}, {0, 23, false}, {6, 0, true}, {0, 16, true}};
  for (const auto& [rows, budget, packed] : runs) {
    INFO("rows " << rows << ", budget " << budget << ", packed " << packed << ", holed " << holed);
    auto loaded = ValueModel::Load(dir.path(), at::kFloat, 0);
    REQUIRE(loaded.ok());
    ValueModel& model = **loaded;
    MicroBatching micro;
    micro.rows = rows;
    micro.max_token_len = budget;
    micro.packed = packed;
    values.push_back(ComputeValuesNoGrad(model, b, micro).value());
    ValueUpdateOptions o;
    o.lr = 0.1;
    o.grad_clip = 1e9;
    o.cliprange_value = 100.0;
    o.mini_batch_size = 6;
    o.micro_batch_size = rows;
    o.max_token_len = budget;
    o.remove_padding = packed;
    model.SetRequiresGrad(true);
    AdamW opt(model.named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, /*eps=*/1.0});
    auto m = UpdateValue(model, opt, b, values.back(), returns, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    const std::vector<at::Tensor> w = Snapshot(model.named_parameters());
    if (!weights.empty()) {
      REQUIRE(MaxAbsDiff(values.back(), values.front()) < 1e-5);
      REQUIRE(MaxDiff(w, weights) < 1e-5);
    }
    if (weights.empty()) weights = w;
  }
}

TEST_CASE("ForwardLogProbsPacked equals the padded forward, entropy and gradients too", "[worker][train]") {
  TestDir dir("packed_lp");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  const SequenceBatch b = RaggedBatch();
  const at::Tensor mask = b.response_mask.to(at::kFloat);
  // With activation checkpointing the packed layers run again in backward, after ForwardLogProbsPacked returned.
  const bool checkpointing = GENERATE(false, true);
  INFO("checkpointing " << checkpointing);
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<LogProbResult> results;
  for (bool packed : {false, true}) {
    auto model = LoadModelOrDie(dir.path());
    model->SetRequiresGrad(true);
    model->SetGradientCheckpointing(checkpointing);
    LogProbResult r = packed ? ForwardLogProbsPacked(*model, b, 0.8, true) : ForwardLogProbs(*model, b, 0, 6, 0.8, true);
    ((r.log_probs * mask).sum() + 0.1 * (r.entropy * mask).sum()).backward();
    results.push_back({(r.log_probs * mask).detach(), (r.entropy * mask).detach()});
    grads.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) grads.back().push_back(p.grad().clone());
  }
  REQUIRE(results[0].log_probs.abs().sum().item<double>() > 1.0);
  REQUIRE(MaxAbsDiff(results[0].log_probs, results[1].log_probs) < 1e-5);
  REQUIRE(MaxAbsDiff(results[0].entropy, results[1].entropy) < 1e-5);
  // Float32 sums in another order (GEMMs over other row counts): relative to the gradients' scale.
  double scale = 0;
  for (const at::Tensor& g : grads[0]) scale = std::max(scale, g.abs().max().item<double>());
  INFO("gradient scale " << scale);
  REQUIRE(scale > 0.1);
  REQUIRE(MaxDiff(grads[0], grads[1]) < std::max(1e-5, 2e-6 * scale));
  // Packed outputs are exactly 0 outside the response mask.
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  REQUIRE(ForwardLogProbsPacked(*model, b, 1.0, false).log_probs.masked_select(b.response_mask.logical_not())
              .abs().sum().item<double>() == 0.0);
}


// Seven sequences, three prompts shared (GRPO's rollout.n samples of a prompt): rows 0, 2 and 5 have prompt A (3
// tokens), rows 1 and 3 prompt B (6 tokens, no padding), row 4 prompt C (1 token), row 6 prompt A's last two tokens (another
// prompt). Responses of 1-5 tokens, each row's own.
SequenceBatch SharedPromptBatch() {
  const int64_t N = 7, P = 6, R = 5;
  const std::vector<std::vector<int64_t>> prompts = {{11, 12, 13}, {21, 22, 23, 24, 25, 26}, {11, 12, 13},
                                                     {21, 22, 23, 24, 25, 26}, {31}, {11, 12, 13}, {12, 13}};
  const std::vector<int64_t> response_len = {5, 3, 4, 5, 2, 1, 3};
  at::Tensor ids = at::full({N, P + R}, 49, at::kLong);
  at::Tensor valid = at::zeros({N, P + R}, at::kBool);
  for (int64_t i = 0; i < N; ++i) {
    const int64_t p = static_cast<int64_t>(prompts[i].size());
    for (int64_t t = 0; t < p; ++t) {
      ids[i][P - p + t] = prompts[i][t];
      valid[i][P - p + t] = true;
    }
    for (int64_t t = 0; t < response_len[i]; ++t) {
      ids[i][P + t] = (i * 5 + t * 11) % 45 + 1;
      valid[i][P + t] = true;
    }
  }
  SequenceBatch b;
  b.input_ids = ids;
  b.attention_mask = valid;
  b.responses = ids.narrow(1, P, R).clone();
  b.response_mask = valid.narrow(1, P, R).clone();
  return b;
}

// A shared-prompt packing's maps (the GPU's row movers read them): every token's output sits at its own key;
// row_source inverts row_output (-1 at the positions no token's output is taken from: a prompt's other rows, padding);
// key_positions lists each token's positions in row_index, ascending (padding included).
void CheckInverseMaps(const PackedBatch& p) {
  const at::Tensor index = p.sequences.row_index, output = p.sequences.row_output;
  const at::Tensor source = p.sequences.row_source, offsets = p.sequences.key_offsets,
                   positions = p.sequences.key_positions;
  const int64_t T = p.input_ids.size(1), flat = index.numel();
  REQUIRE(index.index_select(0, output).equal(at::arange(T, at::kLong)));
  REQUIRE(source.numel() == flat);
  REQUIRE(offsets.numel() == T + 1);
  REQUIRE(positions.numel() == flat);
  REQUIRE(source.index_select(0, output).equal(at::arange(T, at::kLong)));
  REQUIRE((source >= 0).sum().item<int64_t>() == T);
  REQUIRE(offsets[T].item<int64_t>() == flat);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t a = offsets[t].item<int64_t>(), e = offsets[t + 1].item<int64_t>();
    CAPTURE(t);
    REQUIRE(positions.narrow(0, a, e - a).equal(at::nonzero(index == t).view(-1)));
  }
}

TEST_CASE("PackBatch refuses a row with an empty prompt, naming it", "[worker][train]") {
  // Its first response token would be predicted from the previous row's last hidden state.
  SequenceBatch b = RaggedBatch();
  const int64_t P = b.input_ids.size(1) - b.responses.size(1);
  b.attention_mask[2].narrow(0, 0, P).fill_(false);
  for (bool share : {false, true}) {
    INFO((share ? "shared prompts" : "packed"));
    try {
      (void)PackBatch(b.input_ids, b.attention_mask, b.response_mask, share);
      FAIL("no error");
    } catch (const c10::Error& e) {
      REQUIRE_THAT(e.msg(), Catch::Contains("row 2 has an empty prompt"));
    }
  }
}

TEST_CASE("PackBatch refuses a response mask with a hole, or one the attention mask does not cover, naming the row",
          "[worker][train]") {
  // Its targets would be paired with the hidden states of other positions.
  for (const bool attention_too : {true, false}) {
    SequenceBatch b = RaggedBatch();
    const int64_t P = b.input_ids.size(1) - b.responses.size(1);
    const int64_t r = b.response_mask[1].sum().item<int64_t>();
    REQUIRE(r >= 2);
    if (attention_too) {
      b.response_mask[1][0] = false;  // a hole at the response's first column, the attention mask left valid
    } else {
      b.attention_mask[1][P + r - 1] = false;  // the attention mask stops a token early
    }
    for (bool share : {false, true}) {
      INFO((share ? "shared prompts" : "packed") << (attention_too ? ", a hole" : ", attention short"));
      try {
        (void)PackBatch(b.input_ids, b.attention_mask, b.response_mask, share);
        FAIL("no error");
      } catch (const c10::Error& e) {
        REQUIRE_THAT(e.msg(), Catch::Contains("row 1's response mask is not its first"));
      }
    }
  }
}

TEST_CASE("GroupByPrompt groups rows by their valid prompt tokens", "[worker][train]") {
  const SequenceBatch b = SharedPromptBatch();
  const PromptGroups g = GroupByPrompt(b.input_ids, b.attention_mask, b.responses.size(1));
  REQUIRE(g.count == 4);
  REQUIRE(g.group == std::vector<int64_t>{0, 1, 0, 1, 2, 0, 3});
  REQUIRE(g.prompt_len == std::vector<int64_t>{3, 6, 3, 6, 1, 3, 2});
}

TEST_CASE("Shared prompts (use_prefix_grouper) run each prompt once, with the packed pass's numbers",
          "[worker][train]") {
  TestDir dir("shared_prompts");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  const SequenceBatch b = SharedPromptBatch();
  const at::Tensor mask = b.response_mask.to(at::kFloat);
  const PackedBatch shared = PackBatch(b.input_ids, b.attention_mask, b.response_mask, /*share_prompts=*/true);
  const PackedBatch alone = PackBatch(b.input_ids, b.attention_mask, b.response_mask);
  // Prompts A, B, C and A's suffix once each (3 + 6 + 1 + 2) and the 23 response tokens.
  REQUIRE(shared.input_ids.size(1) == 12 + 23);
  REQUIRE(alone.input_ids.size(1) == 3 * 3 + 2 * 6 + 1 + 2 + 23);
  REQUIRE(shared.predicting.numel() == 23);
  // A's sequences: the prompt (3 tokens), then rows 0, 2, 5's responses.
  REQUIRE(std::vector<int64_t>(shared.sequences.offsets.begin(), shared.sequences.offsets.begin() + 5) ==
        std::vector<int64_t>{0, 3, 8, 12, 13});
  // Attention rows, a response with its prompt before it: 11 and 9 tokens (B's), 8 and 7 (A with rows 0 and 2), 5 and
  // 4 (A's suffix, A with row 5), 3 (C) in buckets of rows at least 4/5 of the first's length.
  REQUIRE(shared.sequences.row_buckets == std::vector<std::pair<int64_t, int64_t>>{{2, 11}, {2, 8}, {2, 5}, {1, 3}});
  REQUIRE(shared.sequences.row_index.numel() == 22 + 16 + 10 + 3);
  REQUIRE(shared.sequences.row_index.narrow(0, 30, 8).equal(at::tensor({0, 1, 2, 8, 9, 10, 11, 11}, at::kLong)));
  REQUIRE(shared.sequences.row_output[1].item<int64_t>() == 22 + 1);      // A's prompt from its first row (row 0's)
  REQUIRE(shared.sequences.row_output[8].item<int64_t>() == 30 + 3);      // row 2's first response token
  CheckInverseMaps(shared);
  REQUIRE(shared.sequences.row_source[22].item<int64_t>() == 0);   // A's first prompt token from its first row
  REQUIRE(shared.sequences.row_source[30].item<int64_t>() == -1);  // A's prompt in row 2's row: not taken from there
  // A's first token: in rows 0, 2 and 5.
  REQUIRE(shared.sequences.key_offsets[1].item<int64_t>() - shared.sequences.key_offsets[0].item<int64_t>() == 3);
  REQUIRE(shared.position_ids.narrow(1, 0, 13).equal(
      at::tensor({0, 1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 3}, at::kLong).unsqueeze(0)));
  // Targets in row order: row 1's first response token (target 5) is predicted by B's last prompt token (B follows
  // A's four sequences: 13 + 5); row 2's first (target 8) by A's last prompt token, its second by its own first token.
  REQUIRE(shared.predicting[5].item<int64_t>() == 18);
  REQUIRE(shared.predicting[8].item<int64_t>() == 2);
  REQUIRE(shared.predicting[9].item<int64_t>() == 8);
  {
    // Buckets on a grid (BucketSteps; a GPU's pads to cuDNN-friendly shapes), here 4 rows and 8 positions. Rows 0-2
    // share a prompt of 5 tokens, rows 3-4 one of 7, row 5 has its own of 2: attention rows of 13 and 11 tokens (a
    // bucket), 10, 10 and 9 (another, padded with a fourth row), 3 (alone, as a power of two of rows stays).
    const int64_t N = 6, P = 7, R = 6;
    const std::vector<int64_t> group = {0, 0, 0, 1, 1, 2}, prompt_len = {5, 7, 2}, response_len = {6, 4, 5, 3, 6, 1};
    at::manual_seed(17);
    const at::Tensor prompts = at::randint(1, 50, {3, P}, at::kLong);
    SequenceBatch g;
    g.input_ids = at::randint(1, 50, {N, P + R}, at::kLong);
    g.attention_mask = at::zeros({N, P + R}, at::kBool);
    for (int64_t r = 0; r < N; ++r) {
      const int64_t p = prompt_len[group[r]];
      g.input_ids[r].narrow(0, P - p, p).copy_(prompts[group[r]].narrow(0, 0, p));
      g.attention_mask[r].narrow(0, P - p, p).fill_(true);
      g.attention_mask[r].narrow(0, P, response_len[r]).fill_(true);
    }
    g.response_mask = g.attention_mask.narrow(1, P, R).contiguous();
    const PackedBatch exact = PackBatch(g.input_ids, g.attention_mask, g.response_mask, true);
    const PackedBatch grid = PackBatch(g.input_ids, g.attention_mask, g.response_mask, true, {}, BucketSteps{4, 8});
    REQUIRE(exact.sequences.row_buckets == std::vector<std::pair<int64_t, int64_t>>{{2, 13}, {3, 10}, {1, 3}});
    REQUIRE(grid.sequences.row_buckets == std::vector<std::pair<int64_t, int64_t>>{{2, 16}, {4, 16}, {1, 8}});
    REQUIRE(grid.sequences.row_index.numel() == 32 + 64 + 8);
    CheckInverseMaps(exact);
    CheckInverseMaps(grid);
    // The pass over the grid gives the exact shapes' hidden states and gradients, with and without checkpointing.
    for (bool checkpointing : {false, true}) {
      CAPTURE(checkpointing);
      std::vector<at::Tensor> hidden;
      std::vector<std::vector<at::Tensor>> grid_grads;
      for (const PackedBatch* p : {&exact, &grid}) {
        auto model = LoadModelOrDie(dir.path());
        model->SetRequiresGrad(true);
        model->SetGradientCheckpointing(checkpointing);
        const at::Tensor h = model->Forward(p->input_ids, p->position_ids, at::Tensor(), nullptr, &p->sequences);
        (h * h.detach().sin()).sum().backward();
        hidden.push_back(h.detach());
        grid_grads.emplace_back();
        for (const auto& [name, t] : model->named_parameters()) grid_grads.back().push_back(t.grad().clone());
      }
      REQUIRE(hidden[0].abs().sum().item<double>() > 1.0);
      REQUIRE(MaxAbsDiff(hidden[1], hidden[0]) < 1e-5);
      // Float32 sums in another order (attention over longer rows): relative to the gradients' scale.
      double scale = 0;
      for (const at::Tensor& t : grid_grads[0]) scale = std::max(scale, t.abs().max().item<double>());
      INFO("gradient scale " << scale);
      REQUIRE(scale > 0.1);
      REQUIRE(MaxDiff(grid_grads[1], grid_grads[0]) < std::max(1e-5, 2e-6 * scale));
    }
    REQUIRE_THROWS_WITH(PackBatch(g.input_ids, g.attention_mask, g.response_mask, true, {}, BucketSteps{0, 4}),
                        Catch::Contains("BucketSteps"));
  }

  const bool checkpointing = GENERATE(false, true);
  INFO("checkpointing " << checkpointing);
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<LogProbResult> results;
  for (int way = 0; way < 3; ++way) {  // padded, packed, packed with shared prompts
    auto model = LoadModelOrDie(dir.path());
    model->SetRequiresGrad(true);
    model->SetGradientCheckpointing(checkpointing);
    LogProbResult r = way == 0 ? ForwardLogProbs(*model, b, 0, b.size(), 0.8, true)
                               : ForwardLogProbsPacked(*model, b, 0.8, true, /*share_prompts=*/way == 2);
    ((r.log_probs * mask).sum() + 0.1 * (r.entropy * mask).sum()).backward();
    results.push_back({(r.log_probs * mask).detach(), (r.entropy * mask).detach()});
    grads.emplace_back();
    for (const auto& [name, p] : model->named_parameters()) grads.back().push_back(p.grad().clone());
  }
  REQUIRE(results[0].log_probs.abs().sum().item<double>() > 1.0);
  // The gradients sum the same float32 terms in another order (packed rows, shared prompts): equal up to rounding
  // relative to their size (2e-6 of the largest entry, as the bucket-grid check above allows).
  double grad_scale = 0;
  for (const at::Tensor& t : grads[0]) grad_scale = std::max(grad_scale, t.abs().max().item<double>());
  INFO("gradient scale " << grad_scale);
  REQUIRE(grad_scale > 0.1);
  for (int way = 1; way < 3; ++way) {
    INFO("way " << way);
    REQUIRE(MaxAbsDiff(results[way].log_probs, results[0].log_probs) < 1e-5);
    REQUIRE(MaxAbsDiff(results[way].entropy, results[0].entropy) < 1e-5);
    REQUIRE(MaxDiff(grads[way], grads[0]) < std::max(1e-5, 2e-6 * grad_scale));
  }
  // Outputs are exactly 0 outside the response mask.
  auto model = LoadModelOrDie(dir.path());
  at::NoGradGuard no_grad;
  REQUIRE(ForwardLogProbsPacked(*model, b, 1.0, false, true).log_probs.masked_select(b.response_mask.logical_not())
            .abs().sum().item<double>() == 0.0);
  // A row without a response token has no sequence and nothing to predict; the others keep their numbers.
  SequenceBatch cut = b;
  cut.response_mask = b.response_mask.clone();
  cut.attention_mask = b.attention_mask.clone();
  cut.response_mask[2].fill_(false);
  cut.attention_mask[2].narrow(0, 6, 5).fill_(false);
  const PackedBatch without = PackBatch(cut.input_ids, cut.attention_mask, cut.response_mask, true);
  REQUIRE(without.input_ids.size(1) == 12 + 19);
  REQUIRE(without.sequences.offsets.size() == shared.sequences.offsets.size() - 1);
  const at::Tensor lp = ForwardLogProbsPacked(*model, cut, 0.8, false, true).log_probs;
  const at::Tensor keep = cut.response_mask;
  REQUIRE(MaxAbsDiff(lp.masked_select(keep), results[0].log_probs.masked_select(keep)) < 1e-5);
  // A prompt none of whose rows has a response (row 6's, A's suffix) runs alone as a row of its own; with rows 2 and 6
  // empty, the shared pass's log-probs, entropy and gradients are the unshared packed pass's.
  cut.response_mask[6].fill_(false);
  cut.attention_mask[6].narrow(0, 6, 5).fill_(false);
  const PackedBatch prompt_only = PackBatch(cut.input_ids, cut.attention_mask, cut.response_mask, true);
  REQUIRE(prompt_only.sequences.row_buckets.back() == std::pair<int64_t, int64_t>{1, 2});  // A's suffix alone
  {
    at::AutoGradMode grad_on(true);  // inside the no-grad scope above
    const at::Tensor cut_mask = cut.response_mask.to(at::kFloat);
    std::vector<LogProbResult> cut_results;
    std::vector<std::vector<at::Tensor>> cut_grads;
    for (bool share : {false, true}) {
      auto m = LoadModelOrDie(dir.path());
      m->SetRequiresGrad(true);
      LogProbResult r = ForwardLogProbsPacked(*m, cut, 0.8, true, share);
      ((r.log_probs * cut_mask).sum() + 0.1 * (r.entropy * cut_mask).sum()).backward();
      cut_results.push_back({(r.log_probs * cut_mask).detach(), (r.entropy * cut_mask).detach()});
      cut_grads.emplace_back();
      for (const auto& [name, p] : m->named_parameters()) cut_grads.back().push_back(p.grad().clone());
    }
    REQUIRE(MaxAbsDiff(cut_results[1].log_probs, cut_results[0].log_probs) < 1e-5);
    REQUIRE(MaxAbsDiff(cut_results[1].entropy, cut_results[0].entropy) < 1e-5);
    double cut_scale = 0;  // relative, as above
    for (const at::Tensor& t : cut_grads[0]) cut_scale = std::max(cut_scale, t.abs().max().item<double>());
    REQUIRE(MaxDiff(cut_grads[1], cut_grads[0]) < std::max(1e-5, 2e-6 * cut_scale));
  }
  // Rows whose valid tokens are not a left-padded prompt and a right-padded response are refused, naming the row.
  SequenceBatch holed = b;
  holed.attention_mask = b.attention_mask.clone();
  holed.attention_mask[3][2] = false;
  REQUIRE_THROWS_WITH(PackBatch(holed.input_ids, holed.attention_mask, holed.response_mask, true),
                      Catch::Contains("row 3's valid tokens are not"));
}

TEST_CASE("A token budget with shared prompts keeps a prompt's rows together and counts the prompt once",
          "[worker][train]") {
  const SequenceBatch b = SharedPromptBatch();
  const PromptGroups g = GroupByPrompt(b.input_ids, b.attention_mask, b.responses.size(1));
  const std::vector<int64_t> tokens = {8, 9, 7, 11, 3, 4, 5};  // prompt + response per row
  auto cost = [&](const std::vector<int64_t>& rows) {
    std::set<int64_t> prompts;
    int64_t sum = 0;
    for (int64_t r : rows) {
      sum += tokens[r] - g.prompt_len[r];
      if (prompts.insert(g.group[r]).second) sum += g.prompt_len[r];
    }
    return sum;
  };
  for (int64_t budget : {11, 12, 17, 40}) {
    INFO("budget " << budget);
    MicroBatching micro;
    micro.max_token_len = budget;
    micro.budget_key = "test";
    micro.packed = true;
    micro.share_prompts = true;
    const auto parts = AsLists(SplitMicroBatches(b, micro).value());
    std::vector<int64_t> seen;
    for (const auto& rows : parts) {
      REQUIRE(cost(rows) <= budget);
      seen.insert(seen.end(), rows.begin(), rows.end());
    }
    std::sort(seen.begin(), seen.end());
    REQUIRE(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
    // Prompt B's two rows (6 + 3 + 5 = 14 tokens shared) stay together where they fit.
    if (budget >= 14) {
      REQUIRE(std::any_of(parts.begin(), parts.end(), [](const std::vector<int64_t>& rows) {
        return std::count(rows.begin(), rows.end(), 1) == 1 && std::count(rows.begin(), rows.end(), 3) == 1;
      }));
    }
    if (budget == 40) REQUIRE(parts.size() == 1);  // 35 tokens shared, 47 not
  }
}

TEST_CASE("Updates and log-prob passes with shared prompts give the padded passes' numbers", "[worker][train]") {
  TestDir dir("shared_prompts_update");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  const SequenceBatch b = SharedPromptBatch();
  const at::Tensor adv = at::linspace(-1.0, 1.5, 35, at::kFloat).view({7, 5});
  struct Result {
    at::Tensor log_probs;
    std::vector<at::Tensor> weights;
    std::map<std::string, double> metrics;
  };
  auto run = [&](int64_t rows, int64_t budget, bool share) {
    auto model = LoadModelOrDie(dir.path());
    MicroBatching micro;
    micro.rows = rows;
    micro.max_token_len = budget;
    micro.budget_key = "test";
    micro.packed = share;
    micro.share_prompts = share;
    Result r;
    r.log_probs = ComputeLogProbsNoGrad(*model, b, 0.7, micro).value();
    PolicyUpdateOptions o;
    o.lr = 1.0;
    o.grad_clip = 1e9;
    o.mini_batch_size = 7;
    o.micro_batch_size = rows;
    o.max_token_len = budget;
    o.share_prompts = share;
    o.temperature = 0.7;
    o.entropy_coeff = 0.01;
    model->SetRequiresGrad(true);
    AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, /*eps=*/1.0});
    auto m = UpdatePolicy(*model, opt, b, {r.log_probs, at::Tensor(), adv}, o);
    INFO(m.status().ToString());
    REQUIRE(m.ok());
    r.metrics = *m;
    r.weights = Snapshot(model->named_parameters());
    return r;
  };
  const Result whole = run(7, 0, false);
  for (const auto& [rows, budget] : std::vector<std::pair<int64_t, int64_t>>{{7, 0}, {3, 0}, {0, 12}, {0, 40}}) {
    INFO("rows " << rows << ", budget " << budget);
    const Result r = run(rows, budget, true);
    REQUIRE(MaxAbsDiff(r.log_probs, whole.log_probs) < 1e-5);
    REQUIRE(MaxDiff(r.weights, whole.weights) < 1e-5);
    REQUIRE(r.metrics.at("actor/pg_loss") == Approx(whole.metrics.at("actor/pg_loss")).margin(1e-6));
    REQUIRE(r.metrics.at("actor/entropy") == Approx(whole.metrics.at("actor/entropy")).epsilon(1e-5));
    REQUIRE(r.metrics.at("actor/grad_norm") == Approx(whole.metrics.at("actor/grad_norm")).epsilon(1e-4));
  }
}

TEST_CASE("The LM head's gradients formed in the forward give the update of backpropagating through its chunks",
          "[worker][train]") {
  TestDir dir("fused_lm_head_grad"), untied_dir("fused_lm_head_grad_untied");
  testing::WriteTinyModel(dir.path(), testing::TinyDecoderConfig());
  DecoderConfig untied = testing::TinyDecoderConfig();
  untied.tie_word_embeddings = false;  // an lm_head.weight of its own (Llama's layout)
  testing::WriteTinyModel(untied_dir.path(), untied);
  const SequenceBatch b = SharedPromptBatch();
  const at::Tensor adv = at::linspace(-1.0, 1.5, 35, at::kFloat).view({7, 5});
  const at::Tensor shift = at::linspace(-0.4, 0.3, 35, at::kFloat).view({7, 5});
  struct Case {
    std::string loss_mode, agg_mode;
    bool kl, packed, share, deferred, tis;
    int64_t budget;
    // Old log-probs this far off the policy's (times `shift`): 4 reaches the dual clip (ratios past clip_ratio_c = 3
    // with negative advantages), the TIS cap and low_var_kl's clamp.
    double off = 1.0;
    double entropy_coeff = 0.1;
    std::string kl_type = "low_var_kl";
    int64_t epochs = 1;
    double temperature = 0.7;
    bool tied = true;
  };
  const std::vector<Case> cases = {
      {"vanilla", "token-mean", true, false, false, false, false, 0},
      {"vanilla", "token-mean", true, true, true, true, false, 12},
      {"vanilla", "seq-mean-token-mean", false, true, false, false, true, 0},
      {"gpg", "seq-mean-token-sum", true, false, false, true, false, 12},
      {"cispo", "seq-mean-token-sum-norm", true, true, true, false, false, 0},
      {"vanilla", "token-mean", true, true, true, false, true, 0, 4.0, 0.0},
      {"vanilla", "seq-mean-token-mean", true, false, false, false, true, 12, 4.0, 0.1, "mse", 2, 1.0},
      {"cispo", "token-mean", true, true, false, true, true, 0, 4.0, 0.0, "kl", 2},
      {"vanilla", "token-mean", true, false, false, false, false, 0, 4.0, 0.1, "low_var_kl", 1, 0.7, false},
      {"vanilla", "seq-mean-token-mean", true, true, true, true, true, 12, 1.0, 0.1, "low_var_kl", 1, 0.7, false},
      // tis: reinforce's own weights (bypass mode), min(pi / pi_old, 1.5).
      {"reinforce", "token-mean", true, true, false, false, true, 12, 4.0, 0.1},
  };
  for (const Case& c : cases) {
    INFO(c.loss_mode << " / " << c.agg_mode << (c.kl ? " + kl " + c.kl_type : "") << (c.packed ? " packed" : "")
                     << (c.share ? " shared" : "") << (c.deferred ? " deferred" : "") << (c.tis ? " tis" : "")
                     << " budget " << c.budget << " off " << c.off << " entropy " << c.entropy_coeff << " epochs "
                     << c.epochs << " temperature " << c.temperature << (c.tied ? " tied" : " untied"));
    auto run = [&](bool fuse) {
      auto model = LoadModelOrDie(c.tied ? dir.path() : untied_dir.path());
      REQUIRE(model->config().tie_word_embeddings == c.tied);
      MicroBatching micro;
      micro.rows = 7;
      micro.packed = c.packed;
      micro.share_prompts = c.share;
      const at::Tensor lp = ComputeLogProbsNoGrad(*model, b, c.temperature, micro).value();
      PolicyUpdateOptions o;
      o.lr = 1.0;
      o.grad_clip = 1e9;
      o.mini_batch_size = 7;
      o.micro_batch_size = 3;
      o.max_token_len = c.budget;
      o.remove_padding = c.packed;
      o.share_prompts = c.share;
      o.temperature = c.temperature;
      o.entropy_coeff = c.entropy_coeff;
      o.use_kl_loss = c.kl;
      o.kl_loss_coef = 0.5;
      o.kl_loss_type = c.kl_type;
      o.ppo_epochs = c.epochs;
      o.shuffle = c.epochs > 1;
      o.loss.loss_mode = c.loss_mode;
      o.loss.loss_agg_mode = c.agg_mode;
      const bool reinforce = c.loss_mode == "reinforce";
      o.loss.tis_imp_ratio_cap = c.tis && !reinforce ? 1.5 : -1;
      o.loss.reinforce_is_threshold = c.tis && reinforce ? 1.5 : -1;
      o.fuse_lm_head_grad = fuse;
      model->SetRequiresGrad(true);
      AdamW opt(model->named_parameters(), AdamWOptions{o.lr, 0.0, 0.9, 0.999, /*eps=*/1.0});
      // Old log-probs off the policy's (so ratios clip), the reference and the rollout further off.
      const at::Tensor off = shift * c.off;
      PolicyUpdateInputs in{(lp + off) * b.response_mask, (lp - off) * b.response_mask, adv,
                            (lp + 2 * off) * b.response_mask};
      in.first_mini_batch_deferred = c.deferred;
      auto m = UpdatePolicy(*model, opt, b, in, o);
      INFO(m.status().ToString());
      REQUIRE(m.ok());
      return std::make_tuple(Snapshot(model->named_parameters()), *m, in.old_log_probs);
    };
    const auto [plain_w, plain_m, plain_old] = run(false);
    const auto [fused_w, fused_m, fused_old] = run(true);
    REQUIRE(plain_m.at("perf/actor_fused_lm_head") == 0.0);
    REQUIRE(fused_m.at("perf/actor_fused_lm_head") == 1.0);  // the fused path ran
    // The update moved the weights well past the tolerance (two paths that both lost the gradient would agree).
    const auto initial = Snapshot(LoadModelOrDie(c.tied ? dir.path() : untied_dir.path())->named_parameters());
    CAPTURE(MaxDiff(plain_w, initial));
    REQUIRE(MaxDiff(plain_w, initial) > 1e-3);
    REQUIRE(MaxDiff(fused_w, plain_w) < 1e-5);
    REQUIRE(MaxAbsDiff(fused_old, plain_old) == 0.0);  // a deferred mini-batch's old log-probs: the same forward
    if (c.off > 1 && c.loss_mode == "vanilla") REQUIRE(plain_m.at("actor/pg_clipfrac_lower") > 0);  // dual clip
    // Only the figures verl's loss function returns (gpg none, reinforce ppo_kl).
    const ReportedPolicyMetrics figures = PolicyMetricsReported(c.loss_mode);
    const std::vector<std::pair<std::string, bool>> keys = {
        {"actor/pg_loss", true}, {"actor/entropy", true}, {"actor/pg_clipfrac", figures.pg_clipfrac},
        {"actor/ppo_kl", figures.ppo_kl}, {"actor/pg_clipfrac_lower", figures.pg_clipfrac_lower}};
    for (const auto& [key, reported] : keys) {
      INFO(key);
      REQUIRE(plain_m.count(key) == (reported ? 1u : 0u));
      REQUIRE(fused_m.count(key) == plain_m.count(key));
      if (reported) REQUIRE(fused_m.at(key) == Approx(plain_m.at(key)).margin(1e-7));
    }
    REQUIRE(fused_m.at("actor/grad_norm") == Approx(plain_m.at("actor/grad_norm")).epsilon(1e-5));
    if (c.kl) REQUIRE(fused_m.at("actor/kl_loss") == Approx(plain_m.at("actor/kl_loss")).margin(1e-7));
  }
}

}  // namespace
}  // namespace verl
