// Logging of the replacement libcuda.so.1: one line per event on stderr, prefixed
// "gpupool-cuda:". Errors that explain a failure (refused lease, lost agent, unsupported
// call) are always printed; chatter only with GPUPOOL_CUDA_DEBUG=1.
#pragma once

namespace gpupool::client {

void LogError(const char* format, ...) __attribute__((format(printf, 1, 2)));
void LogDebug(const char* format, ...) __attribute__((format(printf, 1, 2)));
bool DebugEnabled();

// Counts a call of an unsupported driver entry point and logs it the first time.
// Returns CUDA_ERROR_NOT_SUPPORTED's value.
int ReportUnsupported(const char* name);
// The same, with the reason it cannot work remotely in the message (logged once per name).
int ReportUnsupported(const char* name, const char* why);
// How many times unsupported entry points were called, in total.
unsigned long UnsupportedCallCount();

}  // namespace gpupool::client
