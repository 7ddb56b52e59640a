// Failover settings: GPUPOOL_FAILOVER* from the environment (FailoverConfig).
#include <cerrno>
#include <cstdlib>
#include <string>

#include "remote/client/failover/failover_internal.h"

namespace gpupool::client {

bool ParseByteSize(const std::string& text, uint64_t* bytes) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  std::string suffix(end);
  int shift = 0;
  if (suffix == "" || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KiB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MiB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GiB") {
    shift = 30;
  } else if (suffix == "T" || suffix == "TiB") {
    shift = 40;
  } else {
    return false;
  }
  if (value > (~0ull >> shift)) return false;
  *bytes = static_cast<uint64_t>(value) << shift;
  return true;
}

FailoverConfig FailoverConfig::FromEnvironment(std::vector<std::string>* errors) {
  FailoverConfig config;
  if (const char* mode = std::getenv("GPUPOOL_FAILOVER"); mode != nullptr && *mode != '\0') {
    if (std::strcmp(mode, "off") == 0) {
      config.mode = Mode::kOff;
    } else if (std::strcmp(mode, "migrate") == 0) {
      config.mode = Mode::kMigrate;
    } else if (std::strcmp(mode, "replay") == 0) {
      config.mode = Mode::kReplay;
    } else {
      errors->push_back(std::string("GPUPOOL_FAILOVER='") + mode +
                        "' is not one of off, migrate, replay; using replay");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_CHECKPOINT_INTERVAL"); v != nullptr && *v != '\0') {
    if (!ParseSeconds(v, &config.checkpoint_interval)) {
      errors->push_back(std::string("GPUPOOL_CHECKPOINT_INTERVAL='") + v + "' is not a number of seconds; using 1");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_CHECKPOINT_MEM"); v != nullptr && *v != '\0') {
    if (!ParseByteSize(v, &config.checkpoint_mem)) {
      errors->push_back(std::string("GPUPOOL_CHECKPOINT_MEM='") + v + "' is not a size (e.g. 512M, 8G); using 4G");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_RECOVERY_DEADLINE"); v != nullptr && *v != '\0') {
    if (!ParseSeconds(v, &config.recovery_deadline)) {
      errors->push_back(std::string("GPUPOOL_RECOVERY_DEADLINE='") + v + "' is not a number of seconds; using 300");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_CHECKPOINT_SCOPE"); v != nullptr && *v != '\0') {
    if (std::strcmp(v, "all") == 0) {
      config.scope_all = true;
    } else if (std::strcmp(v, "arguments") != 0) {
      errors->push_back(std::string("GPUPOOL_CHECKPOINT_SCOPE='") + v +
                        "' is not one of arguments, all; using arguments");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_RECOVER_TOGETHER"); v != nullptr && *v != '\0') {
    if (std::strcmp(v, "off") == 0) {
      config.recover_together = false;
    } else if (std::strcmp(v, "on") != 0) {
      errors->push_back(std::string("GPUPOOL_RECOVER_TOGETHER='") + v + "' is not one of on, off; using on");
    }
  }
  if (const char* v = std::getenv("GPUPOOL_RESTORE_STREAMS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    errno = 0;
    const unsigned long streams = std::strtoul(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || *v == '-' || streams < 1 || streams > dataplane::kMaxRestoreStreams) {
      errors->push_back(std::string("GPUPOOL_RESTORE_STREAMS='") + v + "' is not a number from 1 to " +
                        std::to_string(dataplane::kMaxRestoreStreams) + "; using " +
                        std::to_string(config.restore_streams));
    } else {
      config.restore_streams = static_cast<uint32_t>(streams);
    }
  }
  if (const char* v = std::getenv("GPUPOOL_COPY_ON_WRITE"); v != nullptr && *v != '\0') {
    if (std::strcmp(v, "off") == 0) {
      config.copy_on_write = false;
    } else if (std::strcmp(v, "on") != 0) {
      errors->push_back(std::string("GPUPOOL_COPY_ON_WRITE='") + v + "' is not one of on, off; using on");
    }
  }
  return config;
}

}  // namespace gpupool::client
