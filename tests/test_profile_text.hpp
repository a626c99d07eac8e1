// The machine part of a synthetic profile for tests (round numbers, so closed forms are easy to
// write down); each test file appends the operator models ([op.*] sections) it needs.
#pragma once
#include <string>

namespace joinlab::test {

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

}  // namespace joinlab::test
