// A stream's thread: it runs the calls handed to it, so that a model's OpenMP work has one pool
// per stream whichever threads call the model. libgomp keeps a pool for each thread that ever
// ran a parallel region, as long as that thread lives, and counts every pool's threads against
// the CPUs; where they outnumber the CPUs, every team sleeps between parallel regions instead of
// waiting awake (MobileNetV3-L called from a second thread: 5.4 ms a call, against 2.0 ms).
// One caller at a time hands it work (the model's turns, backend/turns.py).
#include "native.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace af {

class Runner {
 public:
  Runner() : thread_([this] { loop(); }) {}
  ~Runner() {
    {
      std::lock_guard<std::mutex> held(lock_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // job() on the runner's thread; returns when it is done
  template <class Job>
  void run(Job& job) {
    std::unique_lock<std::mutex> held(lock_);
    job_ = [&job] { job(); };
    done_ = false;
    pending_.store(true, std::memory_order_release);
    wake_.notify_one();
    finished_.wait(held, [this] { return done_; });
  }

 private:
  // after a call, the thread waits awake a little (a server's next request, the next call of a
  // loop) before it sleeps: waking a sleeping thread costs tens of microseconds
  static constexpr auto AWAKE = std::chrono::microseconds(100);

  void loop() {
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + AWAKE;
      while (!pending_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      }
      std::unique_lock<std::mutex> held(lock_);
      wake_.wait(held, [this] { return pending_.load(std::memory_order_acquire) || stop_; });
      if (stop_) return;
      pending_.store(false, std::memory_order_relaxed);
      std::function<void()> job = std::move(job_);
      held.unlock();
      job();
      held.lock();
      done_ = true;
      finished_.notify_one();
    }
  }

  std::mutex lock_;
  std::condition_variable wake_, finished_;
  std::function<void()> job_;
  std::atomic<bool> pending_{false};
  bool done_ = false, stop_ = false;
  std::thread thread_;   // last: it starts once the rest is made
};

extern "C" {

Runner* af_runner() { return new Runner; }
void af_runner_free(Runner* r) { delete r; }

// af_run on the runner's thread with teams of `threads` (as the partition's primitives were made
// for); what it says of a failure (af_error) is said on the caller's
int af_run_on(Runner* r, int threads, Partition* p, void* const* inputs, void* const* outputs,
              int check_finite, int hold_cpu) {
  int rc = 0;
  std::string error;
  auto job = [&] {
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    rc = af_run(p, inputs, outputs, check_finite, hold_cpu);
    if (rc == 1) error = af_error();
  };
  r->run(job);
  if (rc == 1) set_error(error);
  return rc;
}

// af_pin_workers for the runner's team of n
int af_pin_workers_on(Runner* r, const int* cpus, int n) {
  int pinned = 0;
  auto job = [&] {
    if (omp_get_max_threads() != n) omp_set_num_threads(n);
    pinned = af_pin_workers(cpus, n);
  };
  r->run(job);
  return pinned;
}

}  // extern "C"

}  // namespace af
