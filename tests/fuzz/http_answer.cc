// The head of gpupoold's answers as the API client reads them (common/http_connection.cc:
// ParseAnswerHead). Whoever answers on gpupoold's address (a wrong server, a forged leader's
// replica, a man in the middle of plain HTTP) chooses these bytes.
// Input: the head's text, status line first, lines ending in "\r\n" (without the blank line
// that ends a head); small limits, so that the size checks are reached.
#include <cstdint>
#include <string>

#include "common/http_connection.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const gpupool::HttpAnswerLimits limits{4096, 100000};
  gpupool::HttpAnswerHead head;
  std::string error = gpupool::ParseAnswerHead(gpupool::fuzz::AsText(data, size), limits, &head);
  if (error.empty()) {
    // Taken: a status a server can send, and a length within the limit.
    if (head.status < 100 || head.status > 599) __builtin_trap();
    if (head.length > limits.max_body_bytes || (!head.has_length && head.length != 0)) __builtin_trap();
  } else if (error.size() > 300) {
    __builtin_trap();  // the message quotes at most a short piece of the input
  }
  return 0;
}
