// The benchmark tools' profile summary (tools/bench/kernel_profile.h): the device's idle gaps by length, the
// activities around the long ones, and what the host was doing while the device waited for it.

#include "tools/bench/kernel_profile.h"
#undef CHECK  // c10's glog-style CHECK, defined by the LibTorch headers: Catch2's below

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace verl::bench {
namespace {

constexpr uint64_t kUs = 1000;  // ns

TEST_CASE("IdleGaps: gaps by length, the pairs around the long ones, the host's spans inside them", "[tools][bench]") {
  const std::vector<std::string> names = {"gemm", "norm", "copy"};
  // Busy 0-10 us, 20-30 us and 2,030-2,040 us: gaps of 10 us and 2,000 us; "norm" overlaps "gemm" (no gap).
  const std::vector<Activity> busy = {
      {20 * kUs, 30 * kUs, 1}, {0, 10 * kUs, 0}, {5 * kUs, 8 * kUs, 1}, {2030 * kUs, 2040 * kUs, 2}};
  const std::vector<std::string> host_names = {"verl::SplitMicroBatches", "cudaStreamSynchronize", "aten::empty"};
  const std::vector<Activity> host = {
      {100 * kUs, 1100 * kUs, 0},  // 1,000 us inside the long gap
      {25 * kUs, 2035 * kUs, 1},   // covers the long gap: 2,000 us
      {0, 25 * kUs, 2},            // only the short gap: not counted
      {1500 * kUs, 1600 * kUs, 0},  // the same name again: 100 us more, a second span
  };
  const nlohmann::json idle = IdleGaps(busy, names, /*long_us=*/10.0, /*top=*/12, host, host_names,
                                       /*host_gap_us=*/1000.0);
  CHECK(idle["span_s"].get<double>() == Approx(2040e-6));
  CHECK(idle["idle_s"].get<double>() == Approx(2010e-6));
  // Buckets below 2, 5, 10, 50, 200 us and above: the 10 us gap in the fourth, the 2 ms one in the last.
  CHECK(idle["gaps"][3]["count"] == 1);
  CHECK(idle["gaps"][5]["count"] == 1);
  CHECK(idle["gaps"][5]["s"].get<double>() == Approx(2000e-6));
  // Long gaps name the activity that ended last before them and the one after.
  REQUIRE(idle["long_gaps"].size() == 2);
  CHECK(idle["long_gaps"][0]["after"] == "norm");
  CHECK(idle["long_gaps"][0]["before"] == "copy");
  CHECK(idle["long_gaps"][1]["after"] == "gemm");
  CHECK(idle["long_gaps"][1]["before"] == "norm");
  // The host's spans in the one gap of a millisecond or more, the largest overlap first.
  CHECK(idle["host_gaps"]["count"] == 1);
  CHECK(idle["host_gaps"]["s"].get<double>() == Approx(2000e-6));
  REQUIRE(idle["host_in_gaps"].size() == 2);
  CHECK(idle["host_in_gaps"][0]["name"] == "cudaStreamSynchronize");
  CHECK(idle["host_in_gaps"][0]["s"].get<double>() == Approx(2000e-6));
  CHECK(idle["host_in_gaps"][1]["name"] == "verl::SplitMicroBatches");
  CHECK(idle["host_in_gaps"][1]["s"].get<double>() == Approx(1100e-6));
  CHECK(idle["host_in_gaps"][1]["count"] == 2);
}

TEST_CASE("IdleGaps: without host spans there is no host attribution", "[tools][bench]") {
  const nlohmann::json idle = IdleGaps({{0, 10 * kUs, 0}, {5000 * kUs, 5001 * kUs, 0}}, {"k"});
  CHECK(idle["idle_s"].get<double>() == Approx(4990e-6));
  CHECK_FALSE(idle.contains("host_in_gaps"));
}

TEST_CASE("SpanTree: the span open at an instant, over threads, and the spans around it", "[tools][bench]") {
  // Thread 1: a scope 0-100 us holding op A 10-40 us (itself holding A's inner op 20-30 us) and op B 50-90 us, which
  // starts with a span of the same start and shorter end. Thread 2: a backward node 60-70 us.
  const std::vector<SpanTree::Span> spans = {
      {50 * kUs, 90 * kUs, 3, 1},  // 0: B
      {0, 100 * kUs, 0, 1},        // 1: the scope
      {20 * kUs, 30 * kUs, 2, 1},  // 2: A's inner op
      {10 * kUs, 40 * kUs, 1, 1},  // 3: A
      {50 * kUs, 55 * kUs, 4, 1},  // 4: B's first inner op, starting with B
      {60 * kUs, 70 * kUs, 5, 2},  // 5: the backward node on thread 2
  };
  const SpanTree tree(spans);
  CHECK(tree.parent(1) == SpanTree::kNone);
  CHECK(tree.parent(3) == 1);
  CHECK(tree.parent(2) == 3);
  CHECK(tree.parent(0) == 1);
  CHECK(tree.parent(4) == 0);
  CHECK(tree.parent(5) == SpanTree::kNone);
  CHECK(tree.Innermost(25 * kUs) == 2);
  CHECK(tree.Innermost(35 * kUs) == 3);   // after the inner op ended: back in A
  CHECK(tree.Innermost(45 * kUs) == 1);   // between A and B: the scope
  CHECK(tree.Innermost(52 * kUs) == 4);
  CHECK(tree.Innermost(65 * kUs) == 5);   // thread 2's node is shorter than thread 1's B
  CHECK(tree.Innermost(80 * kUs) == 0);
  CHECK(tree.Innermost(150 * kUs) == SpanTree::kNone);
  CHECK(tree.Ancestors(2, 3) == std::vector<size_t>{1, 0});  // names: A, the scope
  CHECK(tree.Ancestors(2, 1) == std::vector<size_t>{1});
  CHECK(tree.Ancestors(1, 3).empty());
}

}  // namespace
}  // namespace verl::bench
