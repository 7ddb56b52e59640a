// Helpers shared by the fuzz targets: how a target turns libFuzzer's byte string into the
// inputs its parser takes.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

// One argument per line: the seed files stay readable, and an argument with a newline
// in it is of no interest to these parsers.
inline std::vector<std::string> SplitLines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

// A file in memory with a path (/proc/self/fd/N), for parsers that read from a path:
// rewriting it costs no disk I/O, so the target stays fast.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("gpupool-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& Write(std::string_view text) {
    if (ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace gpupool::fuzz
