// Generation into pageable host memory, which kernels cannot reach: the CPU kernels' generators
// (the same KeyGen) on the host's threads.
#include <omp.h>

#include "core/common/error.hpp"
#include "core/workload/generate.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/cuda_ops.hpp"

namespace joinlab::cuda {

namespace {
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
    const int threads = omp_get_max_threads();
    const bool rowid = g->value_is_rowid;
    if (w4k && w4v) cpu::generate(gen, seed, rowid, g->first_row, t.rows, t.key_ptr<uint32_t>(), t.val_ptr<uint32_t>(), threads);
    else if (w4k) cpu::generate(gen, seed, rowid, g->first_row, t.rows, t.key_ptr<uint32_t>(), t.val_ptr<uint64_t>(), threads);
    else if (w4v) cpu::generate(gen, seed, rowid, g->first_row, t.rows, t.key_ptr<uint64_t>(), t.val_ptr<uint32_t>(), threads);
    else cpu::generate(gen, seed, rowid, g->first_row, t.rows, t.key_ptr<uint64_t>(), t.val_ptr<uint64_t>(), threads);
    return;
  }
  if (auto* g = std::get_if<GeneratePayloadOp>(&op)) {
    if (g->column < 0 || size_t(g->column) >= g->spec.payload_bytes.size())
      throw RuntimeError("generate payload: relation " + g->spec.name + " has no payload column " + std::to_string(g->column));
    const uint8_t width = g->spec.payload_bytes[size_t(g->column)];
    need_bytes(g->out, g->rows * width, "payload output");
    const int threads = omp_get_max_threads();
    if (width == 4) cpu::generate_payload(relation_seed(g->spec), g->column, g->first_row, g->rows, data_of<uint32_t>(g->out), threads);
    else cpu::generate_payload(relation_seed(g->spec), g->column, g->first_row, g->rows, data_of<uint64_t>(g->out), threads);
    return;
  }
  throw RuntimeError("operator " + std::string(to_string(params_of(op).kind)) + " does not run on the host");
}

}  // namespace joinlab::cuda
