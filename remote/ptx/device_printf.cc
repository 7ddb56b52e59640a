// Device printf and assert text, for both tiers (device_printf.h).
#include "remote/ptx/device_printf.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "remote/ptx/ptx_engine.h"

namespace gpupool::sim {

std::string ReadDeviceString(const DeviceMemory& memory, uint64_t address) {
  std::string text;
  for (size_t i = 0; i < 4096; ++i) {
    const uint8_t* p = memory.at(memory.opaque, address + i, 1);
    if (p == nullptr) {
      if (text.empty()) return "(null)";
      break;
    }
    if (*p == 0) break;
    text.push_back(static_cast<char>(*p));
  }
  return text;
}

std::string FormatDevicePrintf(const DeviceMemory& memory, const std::string& format, uint64_t args) {
  std::string out;
  uint64_t offset = 0;
  auto fetch = [&](uint32_t size) -> uint64_t {
    offset = (offset + size - 1) / size * size;
    uint64_t value = 0;
    if (args != 0) {
      const uint8_t* p = memory.at(memory.opaque, args + offset, size);
      if (p != nullptr) std::memcpy(&value, p, size);
    }
    offset += size;
    return value;
  };
  for (size_t i = 0; i < format.size(); ++i) {
    char ch = format[i];
    if (ch != '%') {
      out.push_back(ch);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '%') {
      out.push_back('%');
      ++i;
      continue;
    }
    size_t start = i++;
    while (i < format.size() && std::strchr("-+ #0", format[i])) ++i;
    while (i < format.size() && (std::isdigit(static_cast<unsigned char>(format[i])) || format[i] == '.')) ++i;
    int longs = 0;
    bool half = false;
    while (i < format.size() && std::strchr("hlLqjzt", format[i])) {
      if (format[i] == 'l' || format[i] == 'q' || format[i] == 'j' || format[i] == 'z' || format[i] == 't' ||
          format[i] == 'L')
        ++longs;
      if (format[i] == 'h') half = true;
      ++i;
    }
    if (i >= format.size()) break;
    char conversion = format[i];
    std::string spec = format.substr(start, i - start);
    // Strip the length modifiers: we pass host types of our own.
    std::string flags;
    for (char c : spec) {
      if (!std::strchr("hlLqjzt", c)) flags.push_back(c);
    }
    char buffer[512];
    int written = 0;  // snprintf's count: a %c of 0 writes a NUL byte, as printf does on a GPU
    switch (conversion) {
      case 'd':
      case 'i': {
        int64_t v = longs ? static_cast<int64_t>(fetch(8)) : static_cast<int32_t>(fetch(4));
        if (half) v = static_cast<int16_t>(v);
        written = std::snprintf(buffer, sizeof(buffer), (flags + "lld").c_str(), static_cast<long long>(v));
        break;
      }
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        uint64_t v = longs ? fetch(8) : static_cast<uint32_t>(fetch(4));
        if (half) v = static_cast<uint16_t>(v);
        written = std::snprintf(buffer, sizeof(buffer), (flags + "ll" + conversion).c_str(),
                                static_cast<unsigned long long>(v));
        break;
      }
      case 'c':
        written = std::snprintf(buffer, sizeof(buffer), (flags + "c").c_str(), static_cast<int>(fetch(4)));
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
      case 'a':
      case 'A':
        written = std::snprintf(buffer, sizeof(buffer), (flags + conversion).c_str(), std::bit_cast<double>(fetch(8)));
        break;
      case 's': {
        std::string text = ReadDeviceString(memory, fetch(8));
        written = std::snprintf(buffer, sizeof(buffer), (flags + "s").c_str(), text.c_str());
        break;
      }
      case 'p':
        written = std::snprintf(buffer, sizeof(buffer), "0x%llx", static_cast<unsigned long long>(fetch(8)));
        break;
      default:
        written = std::snprintf(buffer, sizeof(buffer), "%s", spec.c_str());
    }
    // What did not fit is cut, as before; an error (a width past INT_MAX) prints nothing.
    if (written > 0) out.append(buffer, std::min(static_cast<size_t>(written), sizeof(buffer) - 1));
  }
  return out;
}

std::string FormatDeviceAssert(const DeviceMemory& memory, uint64_t message, uint64_t file, uint32_t line,
                               uint64_t function, const uint32_t ctaid[3], const uint32_t tid[3]) {
  char text[1024];
  std::snprintf(text, sizeof(text),
                "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion "
                "`%s` failed.\n",
                ReadDeviceString(memory, file).c_str(), line, ReadDeviceString(memory, function).c_str(), ctaid[0],
                ctaid[1], ctaid[2], tid[0], tid[1], tid[2], ReadDeviceString(memory, message).c_str());
  return text;
}

void AppendPrintf(std::string* out, std::string_view text, uint64_t* dropped) {
  if (out->size() > kMaxPrintfBytes || text.size() > kMaxPrintfBytes - out->size()) {
    *dropped += text.size();
    return;
  }
  out->append(text);
}

}  // namespace gpupool::sim
