// Threads that wait for each other (issue 41, barriers): cuda::barrier arrive/wait in shared
// memory (mbarrier.* PTX when built for sm_80, libcu++'s atomics and __nanosleep below it),
// split arrive and wait with work between, arrive_and_drop, named barriers with thread
// counts (bar.sync/bar.arrive producer and consumer warps), __syncthreads_count/and/or,
// and a block spinning on a global flag that another block sets. Each kernel checks its
// own answers against what the host computes; a barrier that never completes would hang
// the program (the test's timeout), so finishing is part of the check.
#include <cuda/barrier>

// cuda::barrier in __shared__ has a constructor the kernel replaces with init(), as in
// NVIDIA's samples.
#pragma nv_diag_suppress static_var_with_dynamic_init

#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kThreads = 256;
constexpr int kRounds = 64;

// Every round each thread writes its slot, all arrive and wait, and each reads its right
// neighbour's slot: out[block*threads + t] = sum over rounds of (value of t+1 in round r).
__global__ void ArriveAndWaitRounds(const int* in, long long* out) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ int slots[kThreads];
  const int t = threadIdx.x;
  if (t == 0) init(&bar, blockDim.x);
  __syncthreads();
  long long sum = 0;
  for (int round = 0; round < kRounds; ++round) {
    slots[t] = in[blockIdx.x * blockDim.x + t] * (round + 1);
    bar.arrive_and_wait();
    sum += slots[(t + 1) % blockDim.x];
    bar.arrive_and_wait();  // nobody overwrites a slot before its reader read it
  }
  out[blockIdx.x * blockDim.x + t] = sum;
}

// Split arrive and wait: each thread arrives, does work of its own that needs nobody,
// then waits for the token's phase. Threads of odd warps drop out after round 2 (their
// arrivals are no longer expected), the rest go on for all rounds.
__global__ void SplitArriveWaitAndDrop(int* out) {
  __shared__ cuda::barrier<cuda::thread_scope_block> bar;
  __shared__ int slots[kThreads];
  const int t = threadIdx.x;
  if (t == 0) init(&bar, blockDim.x);
  __syncthreads();
  const bool drops = (t / 32) % 2 == 1;
  int acc = 0;
  for (int round = 0; round < 8; ++round) {
    if (drops && round == 2) {
      bar.arrive_and_drop();
      break;
    }
    slots[t] = t + round;
    auto token = bar.arrive();
    int own = 0;
    for (int i = 0; i < 100; ++i) own += (t * i) % 7;  // work that waits for nobody
    bar.wait(std::move(token));
    acc += own + slots[(t + 32) % blockDim.x];
    bar.arrive_and_wait();
  }
  out[blockIdx.x * blockDim.x + t] = acc;
}

int SplitReference(int t, int threads) {
  const bool drops = (t / 32) % 2 == 1;
  int acc = 0;
  for (int round = 0; round < 8; ++round) {
    if (drops && round == 2) break;
    int own = 0;
    for (int i = 0; i < 100; ++i) own += (t * i) % 7;
    const int neighbour = (t + 32) % threads;
    // From round 2 on the dropped warps' slots keep their round-1 values.
    const bool neighbour_dropped = (neighbour / 32) % 2 == 1 && round >= 2;
    acc += own + neighbour + (neighbour_dropped ? 1 : round);
  }
  return acc;
}

// Named barriers: warps 0-3 produce into a buffer, warps 4-7 consume it, in rounds, with
// barrier 1 ("full", 256 threads: producers arrive, consumers sync) and barrier 2 ("empty",
// likewise the other way). Barrier 0 is left alone. Then __syncthreads_count/and/or.
__global__ void NamedBarriersAndVotes(int* out, int* votes) {
  __shared__ int buffer[128];
  const int t = threadIdx.x;
  const bool producer = t < 128;
  int consumed = 0;
  for (int round = 0; round < 16; ++round) {
    if (producer) {
      if (round > 0) asm volatile("bar.sync 2, 256;" ::: "memory");  // wait: buffer empty
      buffer[t] = t * 3 + round;
      asm volatile("bar.arrive 1, 256;" ::: "memory");  // buffer full
    } else {
      asm volatile("bar.sync 1, 256;" ::: "memory");  // wait: buffer full
      consumed += buffer[t - 128];
      if (round < 15) asm volatile("bar.arrive 2, 256;" ::: "memory");  // buffer empty
    }
  }
  if (!producer) out[blockIdx.x * 128 + (t - 128)] = consumed;
  // A barrier of the first 64 threads only, with a count.
  __shared__ int early[64];
  if (t < 64) {
    early[t] = t;
    asm volatile("bar.sync 3, 64;" ::: "memory");
    const int mirror = early[63 - t];
    asm volatile("bar.sync 3, 64;" ::: "memory");  // every mirror read before any write
    early[t] += mirror;
  }
  __syncthreads();
  const int count = __syncthreads_count(t % 3 == 0);
  const int all = __syncthreads_and(t < 64 ? early[t] == 63 : 1);
  const int any = __syncthreads_or(t == 200);
  const int none = __syncthreads_or(0);
  if (t == 0) {
    votes[blockIdx.x * 4 + 0] = count;
    votes[blockIdx.x * 4 + 1] = all;
    votes[blockIdx.x * 4 + 2] = any;
    votes[blockIdx.x * 4 + 3] = none;
  }
}

// Block b > 0 spins (with __nanosleep) until block b-1 published its value, then adds its
// own: a chain through global memory, as a decoupled look-back does.
__global__ void SpinOnPreviousBlock(volatile int* flags, volatile long long* values, long long* out) {
  const int b = blockIdx.x;
  if (threadIdx.x == 0) {
    long long before = 0;
    if (b > 0) {
      unsigned sleep = 32;
      while (flags[b - 1] == 0) {
        __nanosleep(sleep);
        if (sleep < 1024) sleep *= 2;
      }
      __threadfence();
      before = values[b - 1];
    }
    values[b] = before + b + 1;
    __threadfence();
    flags[b] = 1;
    out[b] = before + b + 1;
  }
}

// Threads 0-63 wait at named barrier 1 for 128 threads; the others have exited: no
// thread will ever arrive, a deadlock of the kernel's own.
__global__ void WaitForThreadsThatExited(int* out) {
  if (threadIdx.x < 64) {
    asm volatile("bar.sync 1, 128;" ::: "memory");
    out[threadIdx.x] = 1;
  }
}

}  // namespace

int main() {
  const int blocks = 40;
  // cuda::barrier arrive_and_wait in rounds.
  std::vector<int> in(blocks * kThreads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>((i * 2654435761u) % 1000);
  int* d_in = nullptr;
  long long* d_out = nullptr;
  CHECK(cudaMalloc(&d_in, in.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_out, in.size() * sizeof(long long)));
  CHECK(cudaMemcpy(d_in, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice));
  ArriveAndWaitRounds<<<blocks, kThreads>>>(d_in, d_out);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<long long> out(in.size());
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      long long want = 0;
      for (int round = 0; round < kRounds; ++round)
        want += static_cast<long long>(in[b * kThreads + (t + 1) % kThreads]) * (round + 1);
      if (out[b * kThreads + t] != want) {
        std::fprintf(stderr, "FAIL: arrive_and_wait block %d thread %d: %lld, want %lld\n", b, t, out[b * kThreads + t],
                     want);
        return 1;
      }
    }
  }

  // Split arrive/wait and arrive_and_drop.
  int* d_split = nullptr;
  CHECK(cudaMalloc(&d_split, blocks * kThreads * sizeof(int)));
  SplitArriveWaitAndDrop<<<blocks, kThreads>>>(d_split);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> split(blocks * kThreads);
  CHECK(cudaMemcpy(split.data(), d_split, split.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < kThreads; ++t) {
      const int want = SplitReference(t, kThreads);
      if (split[b * kThreads + t] != want) {
        std::fprintf(stderr, "FAIL: split arrive/wait block %d thread %d: %d, want %d\n", b, t, split[b * kThreads + t],
                     want);
        return 1;
      }
    }
  }

  // Named barriers with counts, producer and consumer warps; block votes.
  int *d_named = nullptr, *d_votes = nullptr;
  CHECK(cudaMalloc(&d_named, blocks * 128 * sizeof(int)));
  CHECK(cudaMalloc(&d_votes, blocks * 4 * sizeof(int)));
  NamedBarriersAndVotes<<<blocks, kThreads>>>(d_named, d_votes);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> named(blocks * 128), votes(blocks * 4);
  CHECK(cudaMemcpy(named.data(), d_named, named.size() * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(votes.data(), d_votes, votes.size() * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < 128; ++i) {
      int want = 0;
      for (int round = 0; round < 16; ++round) want += i * 3 + round;
      if (named[b * 128 + i] != want) {
        std::fprintf(stderr, "FAIL: named barriers block %d consumer %d: %d, want %d\n", b, i, named[b * 128 + i],
                     want);
        return 1;
      }
    }
    const int want_count = (kThreads + 2) / 3;
    if (votes[b * 4 + 0] != want_count || votes[b * 4 + 1] == 0 || votes[b * 4 + 2] == 0 || votes[b * 4 + 3] != 0) {
      std::fprintf(stderr, "FAIL: block %d votes count=%d and=%d or=%d none=%d, want %d 1 1 0\n", b, votes[b * 4],
                   votes[b * 4 + 1], votes[b * 4 + 2], votes[b * 4 + 3], want_count);
      return 1;
    }
  }

  // A chain of blocks, each spinning on the previous one's flag.
  const int chain = 64;
  int* d_flags = nullptr;
  long long *d_values = nullptr, *d_chain = nullptr;
  CHECK(cudaMalloc(&d_flags, chain * sizeof(int)));
  CHECK(cudaMalloc(&d_values, chain * sizeof(long long)));
  CHECK(cudaMalloc(&d_chain, chain * sizeof(long long)));
  CHECK(cudaMemset(d_flags, 0, chain * sizeof(int)));
  SpinOnPreviousBlock<<<chain, 32>>>(d_flags, d_values, d_chain);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<long long> chained(chain);
  CHECK(cudaMemcpy(chained.data(), d_chain, chain * sizeof(long long), cudaMemcpyDeviceToHost));
  for (int b = 0; b < chain; ++b) {
    const long long want = static_cast<long long>(b + 1) * (b + 2) / 2;
    if (chained[b] != want) {
      std::fprintf(stderr, "FAIL: spin chain block %d: %lld, want %lld\n", b, chained[b], want);
      return 1;
    }
  }

  // A barrier that can never complete: a GPU would hang until the job's time ran out; the
  // sim fails the launch (the tenant's error, the GPU is not failed). Last, since the
  // error is sticky for the context.
  if (OnTheSim()) {
    int* d_never = nullptr;
    CHECK(cudaMalloc(&d_never, 128 * sizeof(int)));
    CHECK(cudaMemset(d_never, 0, 128 * sizeof(int)));
    WaitForThreadsThatExited<<<2, 128>>>(d_never);
    const cudaError_t deadlock = cudaDeviceSynchronize();
    if (deadlock != cudaErrorLaunchFailure) {
      std::fprintf(stderr, "FAIL: a deadlocked barrier: %s, want %s\n", cudaGetErrorString(deadlock),
                   cudaGetErrorString(cudaErrorLaunchFailure));
      return 1;
    }
  }

  std::printf("barrier arrive/wait: ok (%d blocks of %d threads)\n", blocks, kThreads);
  return 0;
}
