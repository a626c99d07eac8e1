// Generation into pageable host memory, which kernels cannot reach: the same KeyGen on host
// threads.
#include <omp.h>

#include "core/common/error.hpp"
#include "core/workload/generate.hpp"
#include "kernels/cuda/cuda_ops.hpp"

namespace joinlab::cuda {

namespace {
template <class K, class V>
void fill(const KeyGen& gen, uint64_t seed, bool rowid, uint64_t first, uint64_t rows, K* keys, V* vals) {
  const int64_t n = int64_t(rows);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t row = first + uint64_t(i);
    keys[i] = K(gen.key(row));
    vals[i] = V(rowid ? row : payload_value(seed, 0, row, uint8_t(sizeof(V))));
  }
}
template <class V>
void fill_payload(uint64_t seed, int column, uint64_t first, uint64_t rows, V* out) {
  const int64_t n = int64_t(rows);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = V(payload_value(seed, column, first + uint64_t(i), uint8_t(sizeof(V))));
}
void need_bytes(const Buffer& b, uint64_t bytes, const char* what) {
  if (!b || !b->ptr || b->bytes < bytes)
    throw RuntimeError(std::string("generate: ") + what + " needs " + std::to_string(bytes) + " bytes, buffer " +
                       (b ? b->tag + " holds " + std::to_string(b->bytes) : std::string("missing")));
}
}  // namespace

void run_on_host(const Op& op) {
  if (auto* g = std::get_if<GenerateOp>(&op)) {
    const Tuples& t = g->out;
    need_bytes(t.keys, (t.offset + t.rows) * t.fmt.key_bytes, "output keys");
    need_bytes(t.vals, (t.offset + t.rows) * t.fmt.val_bytes, "output values");
    const KeyGen gen = make_keygen(g->spec, g->referenced);
    const uint64_t seed = relation_seed(g->spec);
    const bool w4k = t.fmt.key_bytes == 4, w4v = t.fmt.val_bytes == 4;
    if (w4k && w4v) fill(gen, seed, g->value_is_rowid, g->first_row, t.rows, t.key_ptr<uint32_t>(), t.val_ptr<uint32_t>());
    else if (w4k) fill(gen, seed, g->value_is_rowid, g->first_row, t.rows, t.key_ptr<uint32_t>(), t.val_ptr<uint64_t>());
    else if (w4v) fill(gen, seed, g->value_is_rowid, g->first_row, t.rows, t.key_ptr<uint64_t>(), t.val_ptr<uint32_t>());
    else fill(gen, seed, g->value_is_rowid, g->first_row, t.rows, t.key_ptr<uint64_t>(), t.val_ptr<uint64_t>());
    return;
  }
  if (auto* g = std::get_if<GeneratePayloadOp>(&op)) {
    if (g->column < 0 || size_t(g->column) >= g->spec.payload_bytes.size())
      throw RuntimeError("generate payload: relation " + g->spec.name + " has no payload column " + std::to_string(g->column));
    const uint8_t width = g->spec.payload_bytes[size_t(g->column)];
    need_bytes(g->out, g->rows * width, "payload output");
    if (width == 4) fill_payload(relation_seed(g->spec), g->column, g->first_row, g->rows, data_of<uint32_t>(g->out));
    else fill_payload(relation_seed(g->spec), g->column, g->first_row, g->rows, data_of<uint64_t>(g->out));
    return;
  }
  throw RuntimeError("operator " + std::string(to_string(params_of(op).kind)) + " does not run on the host");
}

}  // namespace joinlab::cuda
