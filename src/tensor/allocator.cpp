// CPU buffers, with large ones recycled.
//
// On this kind of machine a page fault costs more than the arithmetic that
// fills the page: `make bench` measured an elementwise add of 4M float32 at
// 6.6x a memcpy into a preallocated buffer, and all of the difference was the
// 4096 first-touch faults of its freshly allocated 16 MiB output (glibc hands
// buffers this large back to the system on free). So freed buffers of 1 MiB or
// more are kept, up to 256 MiB in all, and handed to the next allocation of
// the same rounded size. release_cached_buffers() gives them back.
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "kernel.hpp"

namespace refgrad {
namespace {

constexpr std::size_t kAlignment = 64;
constexpr std::size_t kCachedFrom = std::size_t{1} << 20;          // 1 MiB
constexpr std::size_t kCachedGranule = std::size_t{64} << 10;       // sizes round up to 64 KiB
constexpr std::size_t kCacheCapacity = std::size_t{256} << 20;      // 256 MiB

std::size_t round_up(std::size_t n, std::size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

class BufferCache {
 public:
  void* take(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = free_.find(bytes);
    if (found == free_.end()) return nullptr;
    void* data = found->second;
    free_.erase(found);
    cached_bytes_ -= bytes;
    return data;
  }

  void give(void* data, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_bytes_ + bytes <= kCacheCapacity) {
        free_.emplace(bytes, data);
        cached_bytes_ += bytes;
        return;
      }
    }
    std::free(data);
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, data] : free_) std::free(data);
    free_.clear();
    cached_bytes_ = 0;
  }

  std::size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;
  std::size_t cached_bytes_ = 0;
};

// Never destroyed: buffers may be freed during static destruction.
BufferCache& cache() {
  static BufferCache* instance = new BufferCache;
  return *instance;
}

}  // namespace

std::shared_ptr<void> allocate_cpu_buffer(std::size_t nbytes) {
  if (nbytes < kCachedFrom) {
    void* data = std::aligned_alloc(kAlignment, round_up(std::max<std::size_t>(nbytes, 1), kAlignment));
    if (!data) throw std::bad_alloc();
    return std::shared_ptr<void>(data, std::free);
  }
  const std::size_t bytes = round_up(nbytes, kCachedGranule);
  void* data = cache().take(bytes);
  if (!data) data = std::aligned_alloc(kAlignment, bytes);
  if (!data) throw std::bad_alloc();
  return std::shared_ptr<void>(data, [bytes](void* p) { cache().give(p, bytes); });
}

std::size_t cached_buffer_bytes() { return cache().cached_bytes(); }

void release_cached_buffers() { cache().release(); }

}  // namespace refgrad
