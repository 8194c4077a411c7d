// A model's streams: threads of the runtime's own that run the calls handed to them, the first
// call waiting first. Why threads of our own: libgomp keeps an OpenMP pool for each thread that
// ever ran a parallel region, as long as that thread lives, and counts every pool's threads
// against the CPUs; where they outnumber the CPUs, every team sleeps between parallel regions
// instead of waiting awake (MobileNetV3-L called from a second thread: 5.4 ms a call, against
// 2.0 ms). Here a model's OpenMP work has one pool per stream whichever threads call it. And the
// callers wait here, not in Python: a stream that finishes a call takes the next at once.
#include "native.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace af {

class Streams {
 public:
  // n threads, each with a team of `threads`; cpus (n·threads of them, or null): stream k's team
  // pinned to cpus[k·threads ...], its own thread held on the first of them during each call
  Streams(int n, int threads, const int* cpus) : pending_(0), threads_per_stream_(threads) {
    for (int k = 0; k < n; ++k)
      own_cpus_.push_back(cpus ? std::vector<int>(cpus + k * threads, cpus + (k + 1) * threads)
                               : std::vector<int>{});
    for (int k = 0; k < n; ++k) threads_.emplace_back([this, k] { loop(k); });
  }
  ~Streams() {
    {
      std::lock_guard<std::mutex> held(lock_);
      stop_ = true;
    }
    work_.notify_all();
    for (auto& t : threads_) t.join();
  }
  Streams(const Streams&) = delete;
  Streams& operator=(const Streams&) = delete;

  // job(the CPU its thread holds or -1, its team's threads) on the first free stream; returns
  // when it is done
  void run(const std::function<void(int, int)>& job) {
    Waiting mine{&job};
    std::unique_lock<std::mutex> held(lock_);
    queue_.push_back(&mine);
    pending_.fetch_add(1, std::memory_order_release);
    work_.notify_one();
    mine.finished.wait(held, [&] { return mine.done; });
  }

 private:
  struct Waiting {
    const std::function<void(int, int)>* job;
    bool done = false;
    std::condition_variable finished;
  };

  // after a call, a stream waits awake a little (a server's next request, the next call of a
  // loop) before it sleeps: waking a sleeping thread costs tens of microseconds
  static constexpr auto AWAKE = std::chrono::microseconds(100);

  void loop(int k) {
    const int threads = threads_per_stream_;
    const int hold = own_cpus_[k].empty() ? -1 : own_cpus_[k][0];
    if (threads > 0) omp_set_num_threads(threads);
    if (threads > 1 && hold >= 0) af_pin_workers(own_cpus_[k].data(), threads);
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + AWAKE;
      while (pending_.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until) {
      }
      std::unique_lock<std::mutex> held(lock_);
      work_.wait(held, [this] { return !queue_.empty() || stop_; });
      if (stop_) return;
      Waiting* next = queue_.front();
      queue_.pop_front();
      pending_.fetch_sub(1, std::memory_order_relaxed);
      held.unlock();
      (*next->job)(hold, threads);
      held.lock();
      next->done = true;
      next->finished.notify_one();
    }
  }

  std::mutex lock_;
  std::condition_variable work_;
  std::deque<Waiting*> queue_;
  std::atomic<int> pending_;
  const int threads_per_stream_;
  bool stop_ = false;
  std::vector<std::vector<int>> own_cpus_;   // per stream, its team's CPUs (none: not pinned)
  std::vector<std::thread> threads_;   // last: they start once the rest is made
};

extern "C" {

Streams* af_streams(int n, int threads, const int* cpus) { return new Streams(n, threads, cpus); }
void af_streams_free(Streams* s) { delete s; }

// af_run on the first free stream, with teams of `threads` (as the partition's primitives were
// made for; where it is not the streams' own count, unpinned); what it says of a failure
// (af_error) is said on the caller's thread
int af_run_on(Streams* s, int threads, Partition* p, void* const* inputs, void* const* outputs,
              int check_finite) {
  int rc = 0;
  std::string error;
  s->run([&](int hold_cpu, int own_threads) {
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    rc = af_run(p, inputs, outputs, check_finite, threads == own_threads ? hold_cpu : -1);
    if (rc == 1) error = af_error();
  });
  if (rc == 1) set_error(error);
  return rc;
}

// af_build on the first free stream, its primitives made for teams of `threads`: a build's
// parallel work (weights laid out) on the caller's thread would leave that thread an OpenMP
// pool of its own, and with the streams' beside it libgomp has every team sleep between
// regions (a CRNN's LSTM, hundreds of regions a call: 19 ms against 2.7)
Partition* af_build_on(Streams* s, int threads, const int64_t* words, int64_t n_words, const char* const* strings,
                       const void* const* constants, Shared* shared, Arena* context, const KernelFn* kernels,
                       int any_size) {
  Partition* p = nullptr;
  std::string error;
  s->run([&](int, int) {
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    p = af_build(words, n_words, strings, constants, shared, context, kernels, any_size);
    if (!p) error = af_error();
  });
  if (!p) set_error(error);
  return p;
}

}  // extern "C"

}  // namespace af
