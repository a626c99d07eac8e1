// Memory handles. A Buffer is owned by one rank and lives in one memory space; backends
// subclass BufferImpl (real memory, or none at all in simulation) and free it on destruction.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace joinlab {

enum class MemSpace : uint8_t {
  Device,  // GPU memory (on the CPU backend: the rank's ordinary memory)
  Pinned,  // page-locked host memory, reachable by DMA
  Host,    // pageable host memory
};
const char* to_string(MemSpace s);

struct BufferImpl {
  void* ptr = nullptr;  // null in simulation: SimRank moves no tuples
  uint64_t bytes = 0;
  MemSpace space = MemSpace::Host;
  int owner = 0;        // rank id
  std::string tag;      // what it holds, for traces and out-of-memory messages
  virtual ~BufferImpl() = default;
};
using Buffer = std::shared_ptr<BufferImpl>;

// A slice of a buffer as typed elements.
template <class T>
T* data_of(const Buffer& b, uint64_t elem_offset = 0) {
  return b && b->ptr ? static_cast<T*>(b->ptr) + elem_offset : nullptr;
}

}  // namespace joinlab
