#include "core/experiment/values.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/common/error.hpp"

namespace joinlab {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

namespace {

// Parses all of `text` as a double; false if anything is left over.
bool full_double(const std::string& text, double& out) {
  if (text.empty()) return false;
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  out = std::strtod(begin, &end);
  return end == begin + text.size() && errno != ERANGE;
}

// Whole-number check for values that must be counts.
uint64_t to_count(double v, const std::string& text) {
  if (!std::isfinite(v) || v >= 18446744073709551616.0) throw InputError("'" + text + "' is too large");
  if (v != std::floor(v)) throw InputError("'" + text + "' is not a whole number");
  return uint64_t(v);
}

}  // namespace

uint64_t parse_size(const std::string& raw, bool allow_zero) {
  const std::string text = trim(raw);
  if (text.empty()) throw InputError("empty value where a size was expected");
  if (text[0] == '-') throw InputError("negative size '" + text + "'");
  uint64_t value = 0;
  size_t caret = text.find('^');
  if (caret != std::string::npos) {  // base^exponent
    double base = 0, exp = 0;
    if (!full_double(text.substr(0, caret), base) || !full_double(text.substr(caret + 1), exp) ||
        base < 0 || exp < 0 || exp != std::floor(exp))
      throw InputError("'" + text + "' is not a size (expected e.g. 2^24)");
    value = to_count(std::pow(base, exp), text);
  } else {
    // Split the number from its unit suffix.
    size_t unit_at = text.size();
    while (unit_at > 0 && std::isalpha(static_cast<unsigned char>(text[unit_at - 1]))) --unit_at;
    std::string number = trim(text.substr(0, unit_at)), unit = text.substr(unit_at);
    double scale = 1;
    if (number.empty()) throw InputError("'" + text + "' is not a size (expected e.g. 16777216, 2^24, 16M or 16Mi)");
    if (!unit.empty()) {
      static const char kPrefixes[] = "KMGT";
      char p = char(std::toupper(static_cast<unsigned char>(unit[0])));
      const char* where = std::strchr(kPrefixes, p);
      bool binary = unit.size() == 2 && unit[1] == 'i';
      if (p == '\0' || !where || (unit.size() != 1 && !binary))
        throw InputError("'" + text + "' has an unknown unit '" + unit +
                         "' (use K, M, G, T for powers of 10 or Ki, Mi, Gi, Ti for powers of 2)");
      int power = int(where - kPrefixes) + 1;
      scale = binary ? std::ldexp(1.0, 10 * power) : std::pow(1000.0, power);
    }
    bool integral = number.find_first_not_of("0123456789") == std::string::npos && !number.empty();
    if (integral && unit.empty()) {
      errno = 0;
      unsigned long long v = std::strtoull(number.c_str(), nullptr, 10);
      if (errno == ERANGE) throw InputError("'" + text + "' is too large");
      value = v;
    } else {
      double v = 0;
      if (!full_double(number, v) || !std::isfinite(v))
        throw InputError("'" + text + "' is not a size (expected e.g. 16777216, 2^24, 16M or 16Mi)");
      if (v < 0) throw InputError("negative size '" + text + "'");
      value = to_count(v * scale, text);
    }
  }
  if (value == 0 && !allow_zero) throw InputError("size '" + text + "' must be positive");
  return value;
}

int64_t parse_integer(const std::string& raw) {
  const std::string text = trim(raw);
  if (text.empty()) throw InputError("empty value where an integer was expected");
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(begin, &end, 10);
  if (end != begin + text.size()) throw InputError("'" + text + "' is not an integer");
  if (errno == ERANGE) throw InputError("'" + text + "' is too large");
  return v;
}

double parse_number(const std::string& raw) {
  const std::string text = trim(raw);
  double v = 0;
  if (!full_double(text, v) || !std::isfinite(v)) throw InputError("'" + text + "' is not a number");
  return v;
}

bool parse_bool(const std::string& raw) {
  std::string t = trim(raw);
  for (auto& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return false;
  throw InputError("'" + trim(raw) + "' is not a boolean (expected true or false)");
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  if (trim(text).empty()) return out;
  int depth = 0;
  std::string cur;
  auto flush = [&] {
    std::string item = trim(cur);
    if (item.size() >= 2 && item.front() == '(' && item.back() == ')') item = trim(item.substr(1, item.size() - 2));
    if (item.empty()) throw InputError("empty element in the list '" + trim(text) + "'");
    out.push_back(item);
    cur.clear();
  };
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) break;
    if (c == ',' && depth == 0) {
      flush();
      continue;
    }
    cur += c;
  }
  if (depth != 0) throw InputError("unbalanced parentheses in the list '" + trim(text) + "'");
  flush();
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string format_count(uint64_t n) {
  if (n >= 1024 && (n & (n - 1)) == 0) {
    int e = 0;
    while ((uint64_t(1) << e) != n) ++e;
    return "2^" + std::to_string(e);
  }
  if (n >= 1000000 && n % 1000000 == 0) return std::to_string(n / 1000000) + "M";
  return std::to_string(n);
}

}  // namespace joinlab
