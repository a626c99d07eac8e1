#include "core/strategies/strategy.hpp"

#include <map>

#include "core/common/error.hpp"

namespace joinlab {

namespace {
std::map<std::string, StrategyInfo>& registry() {
  static std::map<std::string, StrategyInfo> r;
  return r;
}
}  // namespace

void register_strategy(StrategyInfo info) { registry()[info.name] = std::move(info); }

const StrategyInfo& find_strategy(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (auto& [n, i] : registry()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown strategy '" + name + "' (known: " + known + ")");
  }
  return it->second;
}

std::vector<std::string> strategy_names() {
  std::vector<std::string> v;
  for (auto& [n, i] : registry()) v.push_back(n);
  return v;
}

}  // namespace joinlab
