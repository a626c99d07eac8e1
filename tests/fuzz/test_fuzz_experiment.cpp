// Bounded random-input test of the experiment parser and the size/number grammar: seeded
// mutations of the example experiments (experiments/**/*.ini), of tests/fuzz/corpus and of
// "key = value" lines for every documented key, each fed to the fuzz target
// (fuzz_experiment.cpp), which aborts on anything but a plan or an InputError naming the file.
// Deterministic: a fixed seed and a fixed number of inputs ($JOINLAB_FUZZ_INPUTS overrides it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/builtin.hpp"
#include "core/experiment/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
namespace joinlab::fuzz {
extern long planned, rejected;
}

namespace {

namespace fs = std::filesystem;
const fs::path kRoot = JOINLAB_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> seeds() {
  std::vector<fs::path> files;
  for (const fs::path& dir : {kRoot / "experiments", kRoot / "tests" / "fuzz" / "corpus"})
    for (auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".ini") files.push_back(e.path());
  std::sort(files.begin(), files.end());  // directory order is not stable; the sequence must be
  std::vector<std::string> out;
  for (auto& f : files) out.push_back(slurp(f));
  return out;
}

// The quoted tokens of the libFuzzer dictionary, with its escapes \xNN \" \\ undone.
std::vector<std::string> dictionary() {
  std::vector<std::string> out;
  std::ifstream in(kRoot / "tests" / "fuzz" / "experiment.dict");
  for (std::string line; std::getline(in, line);) {
    if (line.size() < 2 || line.front() != '"' || line.back() != '"') continue;
    std::string token;
    for (size_t i = 1; i + 1 < line.size(); ++i) {
      if (line[i] == '\\' && line[i + 1] == 'x' && i + 4 < line.size()) {
        token += char(std::stoi(line.substr(i + 2, 2), nullptr, 16));
        i += 3;
      } else if (line[i] == '\\' && i + 2 < line.size()) {
        token += line[++i];
      } else {
        token += line[i];
      }
    }
    out.push_back(token);
  }
  return out;
}

class Mutator {
 public:
  Mutator(std::vector<std::string> seeds, std::vector<std::string> tokens)
      : seeds_(std::move(seeds)), tokens_(std::move(tokens)) {}

  std::string next() {
    std::string s = seeds_[pick(seeds_.size())];
    const int edits = 1 + int(pick(4));
    for (int i = 0; i < edits; ++i) edit(s);
    return s;
  }

 private:
  size_t pick(size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng_) : 0; }
  const std::string& token() { return tokens_[pick(tokens_.size())]; }

  // The start of a random line of s and its end.
  std::pair<size_t, size_t> line_of(const std::string& s) {
    size_t at = pick(s.size() + 1);
    size_t b = s.rfind('\n', at ? at - 1 : 0);
    b = (b == std::string::npos || at == 0) ? 0 : b + 1;
    size_t e = s.find('\n', b);
    return {b, e == std::string::npos ? s.size() : e};
  }

  void edit(std::string& s) {
    switch (pick(7)) {
      case 0:  // a random byte
        if (!s.empty()) s[pick(s.size())] = char(pick(256));
        break;
      case 1:  // a token anywhere
        s.insert(pick(s.size() + 1), token());
        break;
      case 2: {  // a value replaced by tokens
        auto [b, e] = line_of(s);
        size_t eq = s.find('=', b);
        if (eq == std::string::npos || eq >= e) break;
        std::string v = " " + token();
        for (size_t n = pick(3); n > 0; --n) v += token();
        s.replace(eq + 1, e - eq - 1, v);
        break;
      }
      case 3: {  // a line dropped
        auto [b, e] = line_of(s);
        s.erase(b, std::min(e + 1, s.size()) - b);
        break;
      }
      case 4: {  // a line of another seed spliced in
        const std::string& other = seeds_[pick(seeds_.size())];
        auto [b, e] = line_of(other);
        s.insert(line_of(s).first, other.substr(b, e - b) + "\n");
        break;
      }
      case 5: {  // a documented key, or a sweep over it, with a token value
        static const std::vector<joinlab::KeyDoc> keys = joinlab::experiment_keys();
        const auto& k = keys[pick(keys.size())];
        std::string line = (pick(2) ? "" : "[sweep]\n") + k.key + " = " + token() + (pick(2) ? "," + token() : "");
        s.insert(line_of(s).first, line + "\n");
        break;
      }
      case 6: {  // a range cut out
        size_t b = pick(s.size() + 1);
        s.erase(b, pick(64));
        break;
      }
    }
  }

  std::vector<std::string> seeds_, tokens_;
  std::mt19937_64 rng_{20261127};
};

TEST(FuzzExperiment, SeedsAndSeededMutationsAreAcceptedOrRejectedWithTheFile) {
  joinlab::register_builtin();
  const auto all = seeds();
  ASSERT_GE(all.size(), 10u) << "example experiments not found under " << kRoot;
  const auto tokens = dictionary();
  ASSERT_GE(tokens.size(), 20u) << "tests/fuzz/experiment.dict not read";
  for (const auto& s : all) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  EXPECT_GE(joinlab::fuzz::planned, 10) << "the example experiments should plan";

  const char* env = std::getenv("JOINLAB_FUZZ_INPUTS");
  const long inputs = env ? std::atol(env) : 3000;
  Mutator m(all, tokens);
  for (long i = 0; i < inputs; ++i) {
    const std::string s = m.next();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  // Mutations that never plan test only the first error; mutations that never fail test nothing.
  std::cout << "[ note ] " << joinlab::fuzz::planned << " planned, " << joinlab::fuzz::rejected << " rejected\n";
  EXPECT_GE(joinlab::fuzz::planned, inputs / 20);
  EXPECT_GE(joinlab::fuzz::rejected, inputs / 4);
}

}  // namespace
