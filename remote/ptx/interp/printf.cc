// The interpreter's Device printf (vprintf) and assert (__assertfail), and AppendPrintf,
// which bounds a launch's printf text. Private interface: printf.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/printf.h"

namespace gpupool::sim::interp {

std::string ReadString(Warp& w, uint64_t address, int lane) {
  std::string text;
  for (size_t i = 0; i < 4096; ++i) {
    uint8_t* p = w.Address(Space::kGeneric, address + i, 1, lane);
    if (p == nullptr) {
      if (text.empty()) return "(null)";
      break;
    }
    if (*p == 0) break;
    text.push_back(static_cast<char>(*p));
  }
  return text;
}

std::string FormatPrintf(Warp& w, const std::string& format, uint64_t args, int lane) {
  std::string out;
  uint64_t offset = 0;
  auto fetch = [&](uint32_t size) -> uint64_t {
    offset = (offset + size - 1) / size * size;
    uint64_t value = 0;
    if (args != 0) {
      uint8_t* p = w.Address(Space::kGeneric, args + offset, size, lane);
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
    switch (conversion) {
      case 'd':
      case 'i': {
        int64_t v = longs ? static_cast<int64_t>(fetch(8)) : static_cast<int32_t>(fetch(4));
        if (half) v = static_cast<int16_t>(v);
        std::snprintf(buffer, sizeof(buffer), (flags + "lld").c_str(), static_cast<long long>(v));
        break;
      }
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        uint64_t v = longs ? fetch(8) : static_cast<uint32_t>(fetch(4));
        if (half) v = static_cast<uint16_t>(v);
        std::snprintf(buffer, sizeof(buffer), (flags + "ll" + conversion).c_str(), static_cast<unsigned long long>(v));
        break;
      }
      case 'c':
        std::snprintf(buffer, sizeof(buffer), (flags + "c").c_str(), static_cast<int>(fetch(4)));
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
      case 'a':
      case 'A':
        std::snprintf(buffer, sizeof(buffer), (flags + conversion).c_str(), std::bit_cast<double>(fetch(8)));
        break;
      case 's': {
        std::string text = ReadString(w, fetch(8), lane);
        std::snprintf(buffer, sizeof(buffer), (flags + "s").c_str(), text.c_str());
        break;
      }
      case 'p':
        std::snprintf(buffer, sizeof(buffer), "0x%llx", static_cast<unsigned long long>(fetch(8)));
        break;
      default:
        std::snprintf(buffer, sizeof(buffer), "%s", spec.c_str());
    }
    out += buffer;
  }
  return out;
}

// vprintf(format, args): in.printf_fmt/printf_args = local offsets of the
// call's parameters, in.offset = local offset of the return value (or -1).
void HPrintf(Warp& w, const Inst& in, uint32_t mask) {
  ForLanes(mask, [&](int l) {
    uint8_t* local = w.LocalOf(l);
    uint64_t format_address, args_address;
    std::memcpy(&format_address, local + in.printf_fmt, 8);
    std::memcpy(&args_address, local + in.printf_args, 8);
    std::string format = ReadString(w, format_address, l);
    std::string text = FormatPrintf(w, format, args_address, l);
    AppendPrintf(&w.launch->printf, text, &w.launch->printf_dropped);
    if (in.offset >= 0) {
      int32_t length = static_cast<int32_t>(text.size());
      std::memcpy(local + in.offset, &length, 4);
    }
  });
}

// __assertfail(message, file, line, function, char size): the GPU's message,
// then the launch fails with CUDA_ERROR_ASSERT.
void HAssert(Warp& w, const Inst& in, uint32_t mask) {
  int lane = std::countr_zero(mask);
  uint8_t* local = w.LocalOf(lane);
  uint64_t message, file, function;
  uint32_t line;
  std::memcpy(&message, local + in.printf_fmt, 8);
  std::memcpy(&file, local + in.printf_args, 8);
  std::memcpy(&line, local + in.offset, 4);
  std::memcpy(&function, local + in.aux, 8);
  const LaunchState& launch = *w.launch;
  uint32_t tid = w.index * 32 + lane;
  const uint32_t* block = launch.spec->block;
  char text[1024];
  std::snprintf(text, sizeof(text),
                "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion "
                "`%s` failed.\n",
                ReadString(w, file, lane).c_str(), line, ReadString(w, function, lane).c_str(), launch.ctaid[0],
                launch.ctaid[1], launch.ctaid[2], tid % block[0], (tid / block[0]) % block[1],
                tid / (block[0] * block[1]), ReadString(w, message, lane).c_str());
  AppendPrintf(&w.launch->printf, text, &w.launch->printf_dropped);
}

}  // namespace gpupool::sim::interp

namespace gpupool::sim {

void AppendPrintf(std::string* out, std::string_view text, uint64_t* dropped) {
  if (out->size() > kMaxPrintfBytes || text.size() > kMaxPrintfBytes - out->size()) {
    *dropped += text.size();
    return;
  }
  out->append(text);
}

}  // namespace gpupool::sim
