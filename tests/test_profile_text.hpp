// The machine part of a synthetic profile for tests (round numbers, so closed forms are easy to
// write down), and operator models (synthetic_ops) that a test file may append or replace.
#pragma once
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "core/common/error.hpp"
#include "models/profile.hpp"

namespace joinlab::test {

// The message of the InputError that parse_profile raises for `text`; a test failure (and "")
// when the text parses.
inline std::string profile_rejection(const std::string& text) {
  std::istringstream in(text);
  try {
    parse_profile(in, "bad.ini");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return "";
}

inline std::string synthetic_machine(const std::string& name) {
  return "[profile]\nname = " + name + "\nstatus = synthetic (tests)\n" + R"([gpu]
memory = 1e12        # test value
mem_bw = 1e12        # test value
streams = 16         # test value
[host]
memory = 1e12        # test value
mem_bw = 1e11        # test value
[link.h2d]
bw = 1e10            # test value
latency = 1e-5       # test value
[link.d2h]
bw = 1e10            # test value
latency = 1e-5       # test value
[link.p2p]
bw = 1e11            # test value
latency = 2e-6       # test value
[link.nic]
bw = 1e10            # test value
latency = 4e-6       # test value
[topology]
gpus_per_node = 2    # test value
intra = nvswitch
nics = per_gpu
fabric = star
)";
}

// One operator model per operator of the vocabulary, round numbers too.
inline std::string synthetic_ops() {
  return R"([op.generate]
seg = 0 0 1e-12      # test value
[op.histogram]
seg = 0 1e-5 1e-12   # test value
[op.partition]
seg = 0 1e-5 2e-12   # test value
[op.build.linear]
seg = 0 1e-5 4e-12   # test value
[op.probe.linear]
seg = 0 1e-5 4e-12 1e-12   # test value
[op.build.chained]
seg = 0 1e-5 5e-12   # test value
[op.probe.chained]
seg = 0 1e-5 6e-12 1e-12   # test value
[op.partitioned_join.linear]
seg = 0 2e-5 3e-12 1e-12   # test value
[op.partitioned_join.chained]
seg = 0 2e-5 3.5e-12 1e-12   # test value
[op.sort.radix]
seg = 0 1e-5 8e-12   # test value
seg = 8 1e-5 16e-12  # test value
[op.sort.merge]
seg = 0 1e-5 1e-12   # test value
[op.merge_join]
seg = 0 1e-5 2e-12 1e-12   # test value
[op.gather]
seg = 0 1e-5 3e-12   # test value
[op.scan]
seg = 0 1e-5 1e-12   # test value
[op.checksum]
seg = 0 1e-5 1e-12   # test value
[op.copy.device]
seg = 0 1e-6 2e-12   # test value
)";
}

}  // namespace joinlab::test
