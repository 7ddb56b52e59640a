// An iterative program of polymorphic objects made on the device, as C++ simulations and
// ray tracers are written: a kernel makes each object with `new` (three classes with
// virtual methods), each object keeps a function pointer taken from a table in a
// __device__ initialiser, and every iteration calls both through the objects (neighbouring
// threads reach different functions) with fresh host input. A CPU reference decides PASS.
// For the failover tests its GPU may fail while it runs: the objects' virtual-table and
// function pointers live in device memory, so PASS after a failure shows that functions
// keep their addresses on the replacement GPU.
//
//   virtual_iterate [ITERATIONS [MS_BETWEEN]]   (defaults 120 20)
//
// Prints "iterate: running" once some iterations are done (the tests fail the GPU after
// that), "iterate: iteration N" every 50, then "iterate: PASS" or what was wrong.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr unsigned kObjects = 3000;
constexpr unsigned kInputs = 64;

// The rules, on the device and (the same text) on the host.
#define RULES(QUALIFIER)                                                                   \
  QUALIFIER unsigned RuleAdd(unsigned s, unsigned x) { return s + x * 3u; }                \
  QUALIFIER unsigned RuleXor(unsigned s, unsigned x) { return (s ^ x) * 2654435761u; }     \
  QUALIFIER unsigned RuleRotate(unsigned s, unsigned x) { return (s << 5 | s >> 27) + x; } \
  QUALIFIER unsigned RuleMix(unsigned s, unsigned x) { return s * 1664525u + 1013904223u + x; }
RULES(__device__)
namespace host {
RULES(static)
}
typedef unsigned (*Rule)(unsigned, unsigned);
__device__ Rule rules[4] = {RuleAdd, RuleXor, RuleRotate, RuleMix};

struct Body {
  unsigned state;
  Rule rule;
  __device__ Body(unsigned i) : state(i), rule(rules[i % 4]) {}
  __device__ virtual ~Body() {}
  __device__ virtual void Step(unsigned input) = 0;
  __device__ virtual unsigned Value() const { return state; }
};
struct Mover : Body {
  unsigned velocity;
  __device__ Mover(unsigned i) : Body(i), velocity(i * 7u) {}
  __device__ void Step(unsigned input) override {
    state = rule(state, input) + velocity;
    velocity += input & 15u;
  }
};
struct Spinner : Body {
  __device__ Spinner(unsigned i) : Body(i) {}
  __device__ void Step(unsigned input) override { state = rule(state ^ 0x5bd1e995u, input); }
  __device__ unsigned Value() const override { return state ^ 0xffffu; }
};
struct Decay : Body {
  unsigned half;
  __device__ Decay(unsigned i) : Body(i), half(1u + i % 5u) {}
  __device__ void Step(unsigned input) override { state = rule(state >> half, input) + half; }
};

__global__ void build(Body** world, unsigned* failed) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kObjects) return;
  Body* body = i % 3 == 0   ? static_cast<Body*>(new Mover(i))
               : i % 3 == 1 ? static_cast<Body*>(new Spinner(i))
                            : static_cast<Body*>(new Decay(i));
  if (body == nullptr) atomicAdd(failed, 1u);
  world[i] = body;
}
__global__ void step(Body** world, const unsigned* inputs, unsigned iteration, unsigned* sum) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kObjects || world[i] == nullptr) return;
  world[i]->Step(inputs[i % kInputs] + iteration);
  atomicAdd(sum, world[i]->Value() & 0xffu);
}
__global__ void gather(Body** world, unsigned* out) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kObjects || world[i] == nullptr) return;
  out[i] = world[i]->Value();
  delete world[i];
  world[i] = nullptr;
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 120;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 20;
  EXPECT(iterations > 0 && pause_ms >= 0);
  const unsigned blocks = (kObjects + 127) / 128;
  Body** d_world = nullptr;
  unsigned *d_failed = nullptr, *d_inputs = nullptr, *d_sum = nullptr, *d_out = nullptr;
  CHECK(cudaMalloc(&d_world, kObjects * sizeof(Body*)));
  CHECK(cudaMalloc(&d_failed, sizeof(unsigned)));
  CHECK(cudaMalloc(&d_inputs, kInputs * sizeof(unsigned)));
  CHECK(cudaMalloc(&d_sum, sizeof(unsigned)));
  CHECK(cudaMalloc(&d_out, kObjects * sizeof(unsigned)));
  CHECK(cudaMemset(d_failed, 0, sizeof(unsigned)));
  build<<<blocks, 128>>>(d_world, d_failed);
  CHECK(cudaGetLastError());

  unsigned (*const host_rules[4])(unsigned, unsigned) = {host::RuleAdd, host::RuleXor, host::RuleRotate, host::RuleMix};
  std::vector<unsigned> state(kObjects), velocity(kObjects), half(kObjects);
  for (unsigned i = 0; i < kObjects; ++i) {
    state[i] = i;
    velocity[i] = i * 7u;
    half[i] = 1u + i % 5u;
  }
  std::vector<unsigned> inputs(kInputs);
  unsigned seed = 12345u;
  for (int it = 1; it <= iterations; ++it) {
    for (unsigned& input : inputs) input = seed = seed * 1103515245u + 12345u;
    CHECK(cudaMemcpy(d_inputs, inputs.data(), kInputs * sizeof(unsigned), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(d_sum, 0, sizeof(unsigned)));
    step<<<blocks, 128>>>(d_world, d_inputs, static_cast<unsigned>(it), d_sum);
    CHECK(cudaGetLastError());
    unsigned want_sum = 0;
    for (unsigned i = 0; i < kObjects; ++i) {
      const unsigned input = inputs[i % kInputs] + static_cast<unsigned>(it);
      auto rule = host_rules[i % 4];
      unsigned value;
      switch (i % 3) {
        case 0:
          state[i] = rule(state[i], input) + velocity[i];
          velocity[i] += input & 15u;
          value = state[i];
          break;
        case 1:
          state[i] = rule(state[i] ^ 0x5bd1e995u, input);
          value = state[i] ^ 0xffffu;
          break;
        default:
          state[i] = rule(state[i] >> half[i], input) + half[i];
          value = state[i];
      }
      want_sum += value & 0xffu;
    }
    // A value back every iteration, as an iterative solver reads its residual.
    unsigned sum = 0, failed = 0;
    CHECK(cudaMemcpy(&sum, d_sum, sizeof(sum), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&failed, d_failed, sizeof(failed), cudaMemcpyDeviceToHost));
    if (failed != 0) {
      std::printf("iterate: FAIL: %u object(s) not made (device malloc returned NULL)\n", failed);
      return 1;
    }
    if (sum != want_sum) {
      std::printf("iterate: FAIL at iteration %d: checksum %u, want %u\n", it, sum, want_sum);
      return 1;
    }
    if (it == 10) std::printf("iterate: running\n");
    if (it % 50 == 0) std::printf("iterate: iteration %d\n", it);
    std::fflush(stdout);
    if (pause_ms > 0) usleep(pause_ms * 1000);
  }
  gather<<<blocks, 128>>>(d_world, d_out);
  CHECK(cudaGetLastError());
  std::vector<unsigned> got(kObjects);
  CHECK(cudaMemcpy(got.data(), d_out, kObjects * sizeof(unsigned), cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (unsigned i = 0; i < kObjects; ++i) wrong += got[i] != (i % 3 == 1 ? state[i] ^ 0xffffu : state[i]);
  CHECK_FREE(d_world, d_failed, d_inputs, d_sum, d_out);
  if (wrong != 0) {
    std::printf("iterate: FAIL: %zu of %u objects wrong\n", wrong, kObjects);
    return 1;
  }
  std::printf("iterate: PASS (%d iterations, %u objects with virtual methods and function pointers)\n", iterations,
              kObjects);
  return 0;
}
