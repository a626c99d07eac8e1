// Workloads shared by the distributed-strategy tests (CPU and CUDA backends).
#pragma once
#include <cstdint>

#include "core/experiment/runner.hpp"
#include "core/workload/relation.hpp"
#include "core/workload/ssb.hpp"

namespace joinlab::test {

// Primary key R (unique dense, one payload as wide as the key), foreign key S (one 4-byte
// payload) with a match rate and Zipf skew: the one-payload-column tuples the gpj family ships.
inline Workload pk_fk(uint64_t r_rows, uint64_t s_rows, uint8_t key_bytes = 4, double match = 1.0, double zipf = 0.0) {
  Workload w;
  w.r.name = "R";
  w.r.rows = r_rows;
  w.r.key_bytes = key_bytes;
  w.r.payload_bytes = {key_bytes};
  w.r.dist = KeyDist::UniqueDense;
  w.s.name = "S";
  w.s.rows = s_rows;
  w.s.key_bytes = key_bytes;
  w.s.payload_bytes = {4};
  w.s.dist = KeyDist::ForeignKey;
  w.s.match_rate = match;
  w.s.zipf_z = zipf;
  return w;
}

// TPC-H orders (R, one payload as wide as the key) and lineitem (S, one 4-byte payload) at scale
// factor `sf`, keys as dbgen makes them, sizes from the scale factor.
inline Workload tpch(double sf, uint8_t key_bytes = 4) {
  Workload w = pk_fk(0, 0, key_bytes);
  w.r.dist = KeyDist::TpchOrders;
  w.s.dist = KeyDist::TpchLineitem;
  w.r.scale_factor = w.s.scale_factor = sf;
  w.r.rows = tpch_rows(w.r);
  w.s.rows = tpch_rows(w.s);
  return w;
}

// An SSB query at scale factor `sf` (seed 42) through `strategy` on `backend`, `shape` ranks.
inline RunPoint ssb_point(const std::string& strategy, const std::string& backend, SsbQuery query, double sf,
                          ClusterShape shape) {
  RunPoint p;
  p.name = "ssb";
  p.strategy = strategy;
  p.backend = backend;
  p.cluster.shape = shape;
  p.workload = ssb::workload(query, sf, 42);
  return p;
}

}  // namespace joinlab::test
