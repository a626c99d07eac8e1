// Dispatch on a key or value width: the kernels are templates over uint32_t and uint64_t.
#pragma once
#include <cstdint>
#include <string>

#include "core/common/error.hpp"

namespace joinlab {

// Calls f(T{}) with T = uint32_t or uint64_t for a width of 4 or 8 bytes (the kernels' types).
template <class F>
void with_width(uint32_t bytes, const char* what, F&& f) {
  if (bytes == 4)
    f(uint32_t{});
  else if (bytes == 8)
    f(uint64_t{});
  else
    throw RuntimeError(std::string(what) + " is " + std::to_string(bytes) + " bytes wide (4 or 8 expected)");
}

}  // namespace joinlab
