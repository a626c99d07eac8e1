// Typed values of experiment keys, parsed from the text of an .ini file or a --key=value
// override. Each parser throws InputError with only the reason ("negative size"); the caller
// adds where the value came from (file:line and key).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace joinlab {

// A count or byte size: 16777216, 2^24, 16M (decimal: K, M, G, T = 10^3..10^12),
// 16Mi (binary: Ki, Mi, Gi, Ti = 2^10..2^40), 1.5G. Negative values and values that are not
// whole numbers are rejected; zero only where allow_zero.
uint64_t parse_size(const std::string& text, bool allow_zero = false);
int64_t parse_integer(const std::string& text);
double parse_number(const std::string& text);
bool parse_bool(const std::string& text);  // true/false, yes/no, on/off, 1/0

// Splits at commas that are not inside parentheses and trims each element; "(4,8), (4)" gives
// {"4,8", "4"} (the parentheses around a whole element are removed). An empty text gives {}.
// Throws InputError on an empty element or unbalanced parentheses.
std::vector<std::string> split_list(const std::string& text);

std::string trim(const std::string& s);

// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(const std::string& a, const std::string& b);

// Row counts for humans: 2^24 for powers of two from 1024 up, 16M for multiples of a million,
// else the plain number.
std::string format_count(uint64_t n);

}  // namespace joinlab
