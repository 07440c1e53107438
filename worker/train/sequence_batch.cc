#include "worker/train/sequence_batch.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/model/decoder_model.h"
#include "worker/model/host_upload.h"

namespace verl {

namespace {

// Up to this many micro-batches per rank can be agreed on (a one-hot vector summed over the ranks).
constexpr int64_t kMaxAgreedMicroBatches = 4096;

// Per row, on the host: the columns its prompt spans (from its first valid prompt column to the prompt's end, the
// columns SelectTrimmed keeps for it), the response columns up to its last valid response token, and its valid
// tokens (the attention mask's; what rolled and packed passes run).
struct RowSizes {
  std::vector<int64_t> prompt, response, tokens;
};

RowSizes RowLengths(const SequenceBatch& b) {
  const int64_t R = b.responses.size(1);
  const int64_t P = b.input_ids.size(1) - R;
  const int64_t N = b.size();
  // One pass over the masks' bytes on the host: the host copies read in place (every trainer pass plans from them),
  // else the masks read back once. ATen's ops for this (int64 copies, a cumsum, sums) took about 40 ms for B3's 1,024
  // rows of 768 columns on the GPU machine's host, the device idle meanwhile (a log-prob pass's profile).
  const at::Tensor a = HostRows(b.plan_attention_mask(), at::kBool);
  const at::Tensor m = HostRows(b.plan_response_mask(), at::kBool);
  const bool* av = a.data_ptr<bool>();
  const bool* mv = m.data_ptr<bool>();
  const int64_t S = P + R;
  RowSizes out{std::vector<int64_t>(N), std::vector<int64_t>(N), std::vector<int64_t>(N)};
  for (int64_t i = 0; i < N; ++i) {
    const bool* row = S > 0 ? av + i * a.stride(0) : av;  // (no offset from an empty tensor's null pointer)
    const int64_t lead = std::find(row, row + P, true) - row;
    out.prompt[i] = P - lead;  // from the first valid prompt column (0 without any)
    const bool* resp = R > 0 ? mv + i * m.stride(0) : mv;
    int64_t last = R;
    while (last > 0 && !resp[last - 1]) --last;
    out.response[i] = last;  // up to the last valid response column (0 without any)
    out.tokens[i] = std::count(row, row + S, true);
  }
  return out;
}

}  // namespace

SequenceBatch WithHostCopies(SequenceBatch b) {
  if (b.has_host_copies()) return b;
  RECORD_USER_SCOPE("verl::WithHostCopies");  // named in a profile (tools/bench/kernel_profile.h: idle.host_in_gaps)
  b.host_input_ids = OnHost(b.input_ids);
  b.host_attention_mask = OnHost(b.attention_mask);
  b.host_response_mask = OnHost(b.response_mask);
  return b;
}

SequenceBatch SelectRows(const SequenceBatch& b, const at::Tensor& idx) {
  const at::Device device = b.input_ids.device();
  const at::Tensor on_device = idx.device() == device ? idx : UploadAsync(idx, device);
  SequenceBatch s{b.input_ids.index_select(0, on_device), b.attention_mask.index_select(0, on_device),
                  b.responses.index_select(0, on_device), b.response_mask.index_select(0, on_device)};
  if (b.has_host_copies()) {
    if (b.host_attention_mask.is_same(b.attention_mask)) {  // a CPU batch: the tensors are their own host copies
      s.host_input_ids = s.input_ids;
      s.host_attention_mask = s.attention_mask;
      s.host_response_mask = s.response_mask;
    } else {
      const at::Tensor on_host = OnHost(idx);
      s.host_input_ids = b.host_input_ids.index_select(0, on_host);
      s.host_attention_mask = b.host_attention_mask.index_select(0, on_host);
      s.host_response_mask = b.host_response_mask.index_select(0, on_host);
    }
  }
  return s;
}

SequenceBatch SelectTrimmed(const SequenceBatch& b, const at::Tensor& idx) {
  RECORD_USER_SCOPE("verl::SelectTrimmed");  // named in a profile (tools/bench/kernel_profile.h: idle.host_in_gaps)
  SequenceBatch s = SelectRows(b, idx);
  const int64_t R = s.responses.size(1);
  const int64_t P = s.input_ids.size(1) - R;
  // The first prompt column any row uses, and one past the last response column any row uses (from the host copies,
  // else read back).
  at::Tensor prompt_used = OnHost(s.plan_attention_mask().narrow(1, 0, P).any(0)).contiguous();
  at::Tensor response_used = OnHost(s.plan_response_mask().any(0)).contiguous();
  const bool* pu = prompt_used.data_ptr<bool>();
  const bool* ru = response_used.data_ptr<bool>();
  int64_t first = P;
  for (int64_t c = 0; c < P; ++c) {
    if (pu[c]) {
      first = c;
      break;
    }
  }
  int64_t width = 1;
  for (int64_t c = R; c > 0; --c) {
    if (ru[c - 1]) {
      width = c;
      break;
    }
  }
  width = std::min(width, R);
  s.input_ids = s.input_ids.narrow(1, first, P - first + width);
  s.attention_mask = s.attention_mask.narrow(1, first, P - first + width);
  s.responses = s.responses.narrow(1, 0, width);
  s.response_mask = s.response_mask.narrow(1, 0, width);
  if (s.has_host_copies()) {
    s.host_input_ids = s.host_input_ids.narrow(1, first, P - first + width);
    s.host_attention_mask = s.host_attention_mask.narrow(1, first, P - first + width);
    s.host_response_mask = s.host_response_mask.narrow(1, 0, width);
  }
  return s;
}

at::Tensor PadResponseColumns(const at::Tensor& t, int64_t R) {
  return t.size(1) == R ? t : at::constant_pad_nd(t, {0, R - t.size(1)}, 0.0);
}

absl::StatusOr<std::vector<at::Tensor>> SplitMicroBatches(const SequenceBatch& batch, const MicroBatching& how) {
  RECORD_USER_SCOPE("verl::SplitMicroBatches");  // named in a profile (tools/bench/kernel_profile.h: idle.host_in_gaps)
  const int64_t N = batch.size();
  const auto device = batch.input_ids.device();
  std::vector<std::vector<int64_t>> groups;
  if (how.max_token_len <= 0) {
    const int64_t rows = std::max<int64_t>(1, how.rows);
    for (int64_t b = 0; b < N; b += rows) {
      std::vector<int64_t> g(std::min(rows, N - b));
      std::iota(g.begin(), g.end(), b);
      groups.push_back(std::move(g));
    }
  } else {
    const RowSizes size = RowLengths(batch);
    // The tokens a pass over `rows` rows computes, with their longest prompt and response spans, their longest row
    // and their total.
    auto computed = [&](int64_t rows, int64_t p, int64_t r, int64_t longest, int64_t sum) {
      if (how.packed) return sum;
      return rows * (how.rolled ? longest : p + r);
    };
    auto alone = [&](int64_t row) {
      return computed(1, size.prompt[row], size.response[row], size.tokens[row], size.tokens[row]);
    };
    // This rank's error, if it cannot plan: with `agree` it still takes part in the agreement (below), so the other
    // ranks fail with it instead of waiting for it in their passes' collectives.
    absl::Status planned;
    for (int64_t row = 0; row < N; ++row) {
      if (alone(row) > how.max_token_len) {
        planned = absl::InvalidArgumentError(absl::StrCat(
            how.budget_key, " (", how.max_token_len, ") is shorter than a sequence of ", alone(row),
            " tokens (prompt ", size.prompt[row], " + response ", size.response[row],
            "); raise it to at least data.max_prompt_length + data.max_response_length"));
        break;
      }
    }
    if (!planned.ok()) {
      // no micro-batches: the error is returned after the agreement
    } else if (how.packed && how.share_prompts) {
      // Units of rows with one prompt, each costing the prompt's tokens once plus its rows' response tokens; a group
      // over the budget is cut (each part runs the prompt again). Largest units first, each into the current
      // micro-batch while the sum stays within the budget.
      const PromptGroups pg =
          GroupByPrompt(batch.plan_input_ids(), batch.plan_attention_mask(), batch.responses.size(1));
      std::vector<std::vector<int64_t>> members(pg.count);
      for (int64_t b = 0; b < N; ++b) members[pg.group[b]].push_back(b);
      std::vector<std::pair<int64_t, std::vector<int64_t>>> units;
      for (const auto& rows : members) {
        const int64_t p = pg.prompt_len[rows.front()];
        units.push_back({p, {}});
        for (int64_t b : rows) {
          const int64_t r = size.tokens[b] - p;
          if (!units.back().second.empty() && units.back().first + r > how.max_token_len) units.push_back({p, {}});
          units.back().first += r;
          units.back().second.push_back(b);
        }
      }
      std::stable_sort(units.begin(), units.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      int64_t sum = 0;
      for (auto& [cost, rows] : units) {
        if (groups.empty() || sum + cost > how.max_token_len) {
          groups.push_back({});
          sum = 0;
        }
        groups.back().insert(groups.back().end(), rows.begin(), rows.end());
        sum += cost;
      }
    } else {
      // Rows longest first, each into the current micro-batch while what its pass computes stays within the budget;
      // the micro-batch's longest prompt and response spans, its longest row and its tokens so far.
      std::vector<int64_t> order(N);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return alone(a) > alone(b); });
      int64_t max_p = 0, max_r = 0, max_len = 0, sum_len = 0;
      for (int64_t row : order) {
        const int64_t len = size.tokens[row];
        const bool fits = !groups.empty() &&
                          computed(static_cast<int64_t>(groups.back().size()) + 1, std::max(max_p, size.prompt[row]),
                                   std::max(max_r, size.response[row]), std::max(max_len, len),
                                   sum_len + len) <= how.max_token_len;
        if (!fits) {
          groups.push_back({});
          max_p = max_r = max_len = sum_len = 0;
        }
        groups.back().push_back(row);
        max_p = std::max(max_p, size.prompt[row]);
        max_r = std::max(max_r, size.response[row]);
        max_len = std::max(max_len, len);
        sum_len += len;
      }
    }
    if (how.agree) {
      if (planned.ok() && static_cast<int64_t>(groups.size()) > kMaxAgreedMicroBatches) {
        planned = absl::InvalidArgumentError(absl::StrCat(how.budget_key, " (", how.max_token_len, ") cuts ", N,
                                                          " sequences into ", groups.size(),
                                                          " micro-batches, more than ", kMaxAgreedMicroBatches,
                                                          ": raise it"));
      }
      // A one-hot of this rank's count, and in the last element whether this rank failed: summed over the ranks.
      at::Tensor one_hot = at::zeros({kMaxAgreedMicroBatches + 1}, at::kFloat);
      if (!planned.ok()) {
        one_hot[kMaxAgreedMicroBatches] = 1.0f;
      } else if (!groups.empty()) {
        one_hot[static_cast<int64_t>(groups.size()) - 1] = 1.0f;
      }
      const at::Tensor summed = how.agree(one_hot.to(device)).to(at::kCPU);
      if (!planned.ok()) return planned;
      if (summed[kMaxAgreedMicroBatches].item<float>() > 0) {
        return absl::AbortedError(absl::StrCat("another rank could not cut its sequences into passes by ",
                                               how.budget_key, " (its error names the cause)"));
      }
      at::Tensor seen = summed.narrow(0, 0, kMaxAgreedMicroBatches).gt(0).nonzero();
      const int64_t agreed = seen.numel() == 0 ? 0 : seen.max().item<int64_t>() + 1;
      while (static_cast<int64_t>(groups.size()) < agreed) {
        auto largest = std::max_element(groups.begin(), groups.end(),
                                        [](const auto& a, const auto& b) { return a.size() < b.size(); });
        if (largest == groups.end() || largest->size() < 2) {  // no rows here, or no micro-batch left to halve
          return absl::InternalError(absl::StrCat("cannot make ", agreed, " micro-batches of ", N,
                                                  " sequences to match the other ranks"));
        }
        const size_t half = (largest->size() + 1) / 2;
        std::vector<int64_t> tail(largest->begin() + static_cast<std::ptrdiff_t>(half), largest->end());
        largest->resize(half);
        groups.push_back(std::move(tail));
      }
    }
    if (!planned.ok()) return planned;
    for (auto& g : groups) std::sort(g.begin(), g.end());
  }
  std::vector<at::Tensor> out;
  for (const auto& g : groups) out.push_back(at::tensor(g, at::TensorOptions().dtype(at::kLong)));
  return out;
}

bool CausalPasses(const SequenceBatch& batch, bool packed) {
  static const bool masked_only = [] {
    const char* env = std::getenv("VERL_CAUSAL_PASSES");
    return env != nullptr && std::string(env) == "0";
  }();
  return !packed && !masked_only && OneValidRun(batch.plan_attention_mask());
}

}  // namespace verl
