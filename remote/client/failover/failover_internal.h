// What the files of failover/ share: the journal's byte copies, the request classification
// and the names they all use. Included only by failover/*.cc (its using-declarations are
// for them).
#pragma once

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "remote/client/core/log.h"
#include "remote/client/failover/failover.h"
#include "remote/client/failover/failover_report.h"

namespace gpupool::client::failover_internal {

namespace dp = ::gpupool::dataplane;

// Uploads of at least this many bytes have their journal copy made while the
// bytes are in flight (Deliver), in slices of kOverlapSlice between progress of
// the send. Over TCP a slice is what the socket's buffer drains while it is copied: with
// 64 KiB slices rather than 256 KiB, 1 and 16 MiB uploads with failover on ran 5-15%
// faster in two of three alternating runs, the same in the third (medians of 5-7; over
// shared memory no difference).
constexpr size_t kOverlappedPayload = size_t{64} << 10;
constexpr size_t kOverlapSlice = size_t{64} << 10;
// An asynchronous upload from page-locked memory (Request::payload_held_until_sync) is
// logged by reference and copied at the next two-way request, unless it is large enough
// to be copied while its bytes are in flight (kOverlappedPayload), as a synchronous
// upload's: the send takes about as long as the copy, and a copy at the wait would add to
// it (scripts/bench/failover --uploads, shm, cudaMemcpyAsync+sync of 1 MiB: 71% of
// failover off held, 98% copied in flight).
inline bool HeldByReference(const transport::Request& request) {
  return request.payload_held_until_sync && request.op == dp::kOpMemcpyHtoD && request.payload_len > 0 &&
         request.payload_len < kOverlappedPayload;
}

// An upload of at least this many bytes from page-locked memory this library allocated is
// kept as a copy-on-write snapshot of its source (pinned_snapshots.h) rather than copied,
// where the process can take one. Write-protecting 64 KiB took 1 us, 1 MiB 7 us and 16 MiB
// 106 us on the dev VM, against about 3, 40 and 760 us for the copies; pages a snapshot
// already protects (the previous upload from the same buffer) cost nothing more. Smaller
// uploads are held by reference or copied (kOverlappedPayload).
constexpr size_t kSnapshotUpload = kOverlappedPayload;
// The op of a log entry a later upload made unnecessary (Failover::Append):
// neither replayed nor applied.
constexpr uint32_t kDroppedEntry = 0;

// Journal copies of an upload of at least this many bytes (the whole upload's, whatever
// slices it is copied in) stream their stores past the caches (CopyBytes): the journal is
// read only by a checkpoint or a recovery. A smaller upload's copy stays in the caches,
// which is faster up to about the L2's size (Intel Xeon, 4 MiB of L2: shm 2 MiB uploads
// with failover on ran at 97% of failover off cached, 87% streamed; 4-256 MiB at 98-99%
// streamed, 91-98% cached).
constexpr size_t kStreamedCopy = size_t{4} << 20;
// Where glibc's memcpy is slow (MemcpyCopiesFastest), a slice of at least this many bytes
// streams whatever its upload's size, as every journal copy of 64 KiB did before.
constexpr size_t kStreamedSlice = size_t{64} << 10;

#if defined(__x86_64__)
// Copies 64-byte blocks from `*done` while they fit in `size`, advancing `*done`;
// `kStreamed`: with streaming stores (`to + *done` aligned to 16).
template <bool kStreamed>
inline void CopyBlocks(char* to, const char* from, size_t size, size_t* done) {
  for (; *done + 64 <= size; *done += 64) {
    const auto* in = reinterpret_cast<const __m128i*>(from + *done);
    auto* out = reinterpret_cast<__m128i*>(to + *done);
    const __m128i blocks[4] = {_mm_loadu_si128(in), _mm_loadu_si128(in + 1), _mm_loadu_si128(in + 2),
                               _mm_loadu_si128(in + 3)};
    for (int k = 0; k < 4; ++k) {
      if constexpr (kStreamed) {
        _mm_stream_si128(out + k, blocks[k]);
      } else {
        _mm_storeu_si128(out + k, blocks[k]);
      }
    }
  }
}

// Whether glibc's memcpy is the fastest cached copy here. On Intel it is (`rep movsb`: on
// the dev VM's Xeon 29 GB/s for 1 MiB in the caches, against 14-20 for CopyBlocks, streamed
// or not). On AMD Zen (many GPU hosts) its `rep movsb` ran the journal copy at 1.5-2 GB/s
// instead of 9 while the agent pulled the same bytes (scripts/bench/remote, shm, 1-16 MiB
// H2D), so there the vector loops copy.
inline bool MemcpyCopiesFastest() {
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
}
#endif

// Copies `size` host bytes into the journal: a slice of an upload of `upload_size` bytes
// (kStreamedCopy).
inline void CopyBytes(char* to, const char* from, size_t size, size_t upload_size) {
#if defined(__x86_64__)
  const bool fast_memcpy = MemcpyCopiesFastest();
  const bool streamed = upload_size >= kStreamedCopy || (!fast_memcpy && size >= kStreamedSlice);
  if (!streamed && fast_memcpy) {
    std::memcpy(to, from, size);
    return;
  }
  size_t done = 0;
  if (streamed) {
    done = std::min((16 - reinterpret_cast<uintptr_t>(to) % 16) % 16, size);
    std::memcpy(to, from, done);
    CopyBlocks<true>(to, from, size, &done);
    _mm_sfence();
  }
  CopyBlocks<false>(to, from, size, &done);
  if (done < size) std::memcpy(to + done, from + done, size - done);
#else
  (void)upload_size;
  if (size > 0) std::memcpy(to, from, size);
#endif
}

// Appends `size` bytes at `from` to `bytes`: a slice of an upload of `upload_size` bytes.
inline void AppendBytes(JournalBytes* bytes, const char* from, size_t size, size_t upload_size) {
  const size_t at = bytes->size();
  bytes->resize(at + size);
  CopyBytes(bytes->data() + at, from, size, upload_size);
}

template <typename Bytes, typename T>
inline bool ReadStruct(const Bytes& bytes, T* out) {
  if (bytes.size() != sizeof(T)) return false;
  std::memcpy(out, bytes.data(), sizeof(T));
  return true;
}

// Requests that leave the device as it was (queries, reads, waits).
inline bool ChangesState(uint32_t op) {
  switch (op) {
    case dp::kOpHello:
    case dp::kOpMemGetInfo:
    case dp::kOpMemcpyDtoH:
    case dp::kOpStreamSynchronize:
    case dp::kOpStreamQuery:
    case dp::kOpEventSynchronize:
    case dp::kOpEventQuery:
    case dp::kOpEventElapsed:
    case dp::kOpContextSynchronize:
    case dp::kOpModuleGetGlobal:
    case dp::kOpRecovered:
      return false;
    default:
      return true;
  }
}

// Replies that carry the device printf text of the requests before them.
inline void ShowOutput(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

inline bool ParseSeconds(const char* text, std::chrono::milliseconds* out) {
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(seconds >= 0) || seconds > 86400 * 365) return false;
  *out = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  return true;
}

inline double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

inline std::string Size(uint64_t bytes) {
  char text[32];
  if (bytes < (uint64_t{1} << 20)) {
    std::snprintf(text, sizeof(text), "%.1f KiB", static_cast<double>(bytes) / 1024);
  } else if (bytes < (uint64_t{1} << 30)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", MiB(bytes));
  } else {
    std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  }
  return text;
}

}  // namespace gpupool::client::failover_internal

namespace gpupool::client {

using transport::ClientConnection;
using transport::Reply;
using transport::Request;
using namespace failover_internal;  // NOLINT

}  // namespace gpupool::client
