// The thread pool behind kernel::parallel_for, and the thread count setting.
#include "parallel.hpp"

#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "refgrad/tensor.hpp"

namespace refgrad {
namespace {

std::atomic<int> process_num_threads{0};  // 0: default_num_threads()
thread_local std::optional<int> scoped_num_threads;
// Set on the threads running chunks: a parallel_for inside a chunk runs on its own thread.
thread_local bool inside_parallel_region = false;

// Workers wait for a job; the thread that calls run() works on it too. One job
// runs at a time (another caller waits for it), and a worker takes chunks of
// it from a shared counter until none are left.
//
// Waking a sleeping thread takes tens of microseconds (more in a virtual
// machine), as long as a whole elementwise op on a million floats: so a worker
// that finished a job first spins for a while (kSpin) watching for the next
// one, as OpenMP's threads do, and only then sleeps on the condition variable.
class ThreadPool {
 public:
  void run(int threads, std::int64_t chunks, const std::function<void(std::int64_t)>& body) {
    std::lock_guard<std::mutex> one_job_at_a_time(run_mutex_);
    const int helpers = threads - 1;
    start_workers(helpers);
    Job job(body, chunks);
    job_.store(&job, std::memory_order_relaxed);
    active_helpers_.store(helpers, std::memory_order_relaxed);
    finished_helpers_.store(0, std::memory_order_relaxed);
    {
      // Under the mutex, so that a worker about to sleep sees the new job first.
      std::lock_guard<std::mutex> lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work_on(job);
    for (int spins = 0; finished_helpers_.load(std::memory_order_acquire) != helpers; ++spins) {
      if (spins < 4096) pause();
      else std::this_thread::yield();
    }
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  static constexpr std::chrono::microseconds kSpin{2000};

  struct Job {
    Job(const std::function<void(std::int64_t)>& body, std::int64_t chunks) : body(&body), chunks(chunks) {}
    const std::function<void(std::int64_t)>* body;
    std::int64_t chunks;
    std::atomic<std::int64_t> next{0};
    std::mutex error_mutex;
    std::exception_ptr error;
  };

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  static void work_on(Job& job) {
    const bool was_inside = inside_parallel_region;
    inside_parallel_region = true;
    for (std::int64_t chunk; (chunk = job.next.fetch_add(1)) < job.chunks;) {
      try {
        (*job.body)(chunk);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
      }
    }
    inside_parallel_region = was_inside;
  }

  void start_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { worker_loop(index); });
    }
  }

  // The generation after `seen`: spinning for kSpin, then asleep.
  std::uint64_t next_generation(std::uint64_t seen) {
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    for (int spins = 1;; ++spins) {
      const std::uint64_t generation = generation_.load(std::memory_order_acquire);
      if (generation != seen) return generation;
      pause();
      if (spins % 256 == 0 && std::chrono::steady_clock::now() > deadline) break;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    return generation_.load(std::memory_order_acquire);
  }

  // A job's fields are written before its generation is published, and the
  // job outlives every active helper's count in finished_helpers_.
  void worker_loop(int index) {
    std::uint64_t seen = 0;
    while (true) {
      seen = next_generation(seen);
      if (index >= active_helpers_.load(std::memory_order_relaxed)) continue;  // this job wants fewer threads
      work_on(*job_.load(std::memory_order_relaxed));
      finished_helpers_.fetch_add(1, std::memory_order_release);
    }
  }

  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
  std::atomic<Job*> job_{nullptr};
  std::atomic<int> active_helpers_{0}, finished_helpers_{0};
  std::atomic<std::uint64_t> generation_{0};
};

// Never destroyed (its threads run until the process ends): a kernel may run
// during static destruction.
ThreadPool& pool() {
  static ThreadPool* instance = new ThreadPool;
  return *instance;
}

}  // namespace

int default_num_threads() {
  static const int cores = [] {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0) return CPU_COUNT(&allowed);
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return cores;
}

int num_threads() {
  if (scoped_num_threads) return *scoped_num_threads;
  const int process = process_num_threads.load();
  return process > 0 ? process : default_num_threads();
}

void set_num_threads(int threads) {
  check(threads >= 0, "set_num_threads: the thread count must be 0 (every core) or more, got ", threads);
  process_num_threads.store(threads);
}

NumThreadsScope::NumThreadsScope(int threads) : previous_(scoped_num_threads) {
  check(threads >= 0, "threads: the thread count must be 0 (every core) or more, got ", threads);
  scoped_num_threads = threads > 0 ? threads : default_num_threads();
}
NumThreadsScope::~NumThreadsScope() { scoped_num_threads = previous_; }

namespace kernel {

void parallel_for(std::int64_t chunks, const std::function<void(std::int64_t)>& body) {
  const std::int64_t threads = std::min<std::int64_t>(num_threads(), chunks);
  if (threads <= 1 || inside_parallel_region) {
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) body(chunk);
    return;
  }
  pool().run(static_cast<int>(threads), chunks, body);
}

}  // namespace kernel
}  // namespace refgrad
