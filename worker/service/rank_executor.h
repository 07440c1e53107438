#ifndef VERL_WORKER_SERVICE_RANK_EXECUTOR_H_
#define VERL_WORKER_SERVICE_RANK_EXECUTOR_H_

// One thread that runs a rank's work in order. gRPC callback handlers post work here and return at once, so no gRPC
// thread ever blocks on model compute, and the rank sees one call at a time.

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace verl {

class RankExecutor {
 public:
  RankExecutor();
  // Runs the work already posted, then joins the thread.
  ~RankExecutor();
  RankExecutor(const RankExecutor&) = delete;
  RankExecutor& operator=(const RankExecutor&) = delete;

  void Post(std::function<void()> work);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace verl

#endif  // VERL_WORKER_SERVICE_RANK_EXECUTOR_H_
