// Splitting text at a separator, for every component (header-only: the libraries injected
// into jobs use it without linking gpupool_common).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

// Every field, empty ones included: "a,,b" -> {"a", "", "b"}; "" -> {""}.
inline std::vector<std::string> Split(std::string_view text, char separator) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t at = text.find(separator, start);
    fields.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return fields;
    start = at + 1;
  }
}

// The non-empty fields only: ",a,,b," -> {"a", "b"}; "" -> {}.
inline std::vector<std::string> SplitNonEmpty(std::string_view text, char separator) {
  std::vector<std::string> fields;
  for (std::string& field : Split(text, separator)) {
    if (!field.empty()) fields.push_back(std::move(field));
  }
  return fields;
}

}  // namespace gpupool
