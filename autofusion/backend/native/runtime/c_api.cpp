// The C functions Python calls (native.h), and the calling thread's CPU while it runs a model.
#include "partition.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>

namespace af {

namespace {

thread_local std::string last_error;

// The calling thread held on one CPU while it lives, the one no OpenMP worker is pinned to
// (affinity.py says why), and given its own set back after; not where that set is one CPU or
// lacks it, or cpu < 0.
class CallerHeld {
 public:
  explicit CallerHeld(int cpu) {
    if (cpu < 0 || pthread_getaffinity_np(pthread_self(), sizeof own_, &own_) != 0) return;
    if (CPU_COUNT(&own_) < 2 || !CPU_ISSET(cpu, &own_)) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    held_ = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  ~CallerHeld() {
    if (held_) pthread_setaffinity_np(pthread_self(), sizeof own_, &own_);
  }
  CallerHeld(const CallerHeld&) = delete;
  CallerHeld& operator=(const CallerHeld&) = delete;

 private:
  cpu_set_t own_;
  bool held_ = false;
};

}  // namespace

void set_error(const std::string& what) { last_error = what; }

extern "C" Shared* af_shared() { return new Shared; }
extern "C" void af_shared_free(Shared* s) { delete s; }
extern "C" Arena* af_arena() { return new Arena; }
extern "C" void af_arena_free(Arena* a) { delete a; }

extern "C" {

// check_finite: return 2, running nothing, where an input holds NaN or an infinity (the caller
// then runs the model on PyTorch's kernels: model.py); hold_cpu >= 0: the calling thread runs on
// that CPU alone during the call (CallerHeld). Both here, not in Python, for a model whose whole
// program is this one call: after its kernels ran, Python's own code is out of cache and the
// same work from Python cost ~70 µs a call (MobileNetV3-L).
int af_run(Partition* p, void* const* inputs, void* const* outputs, int check_finite, int hold_cpu) {
  CallerHeld held(hold_cpu);
  if (check_finite && !p->inputs_finite(inputs)) return 2;
  try {
    p->run(inputs, outputs);
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return 1;
  }
}

void af_free(Partition* p) { delete p; }
const char* af_error() { return last_error.c_str(); }
size_t af_arena_bytes(Partition* p) { return p->arena_bytes(); }
void af_profile(Partition* p, int on) { p->profile(on != 0); }

int af_step_kernels(Partition* p, char* out, int n) {
  const std::string text = p->step_kernels();
  if (n > 0) std::snprintf(out, size_t(n), "%s", text.c_str());
  return int(text.size()) + 1;
}

int af_step_times(Partition* p, double* out, int n) {
  const std::vector<double>& ns = p->step_ns();
  std::copy_n(ns.begin(), std::min<size_t>(n, ns.size()), out);
  return int(ns.size());
}

// Pins thread k >= 1 of an OpenMP team of n to CPU cpus[k] (the caller's thread, 0, stays free).
// The pool keeps its threads for later teams, so this holds for every parallel region of n
// threads after it (affinity.py says why). Returns how many threads it pinned.
int af_pin_workers(const int* cpus, int n) {
  int pinned = 0;
#pragma omp parallel num_threads(n) reduction(+ : pinned)
  if (const int k = omp_get_thread_num(); k > 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpus[k], &set);
    pinned += pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
  }
  return pinned;
}

int af_all_finite(const float* p, int64_t n) { return all_finite(p, n); }
}

}  // namespace af
