// cuFFT, the toolkit's FFT library, as programs use it: 1D complex transforms of powers of
// two, a mixed radix and a prime length, double precision, batched real-to-complex and back,
// a 2D transform on a stream, each against a direct DFT on the CPU. cuFFT finds its
// kernels and keys its state through two of the driver's undocumented export tables (the
// module iterator and the context identity); the kernels run from the PTX it ships.
#include <cufft.h>

#include <cmath>
#include <complex>
#include <cstdio>
#include <vector>

#include "../programs/check.h"

// cuFFT names no results: the number, as cufft.h lists them.
inline const char* FftResultText(cufftResult result) {
  static thread_local char text[32];
  std::snprintf(text, sizeof(text), "cufftResult %d", static_cast<int>(result));
  return text;
}
#define FFT_CHECK(call) LIBRARY_CHECK(call, CUFFT_SUCCESS, FftResultText)

namespace {

using Complex = std::complex<double>;

// The DFT by its definition: sign -1 forward, +1 inverse (unnormalised, as cuFFT).
std::vector<Complex> Dft(const std::vector<Complex>& x, int sign) {
  const size_t n = x.size();
  std::vector<Complex> y(n);
  for (size_t k = 0; k < n; ++k) {
    Complex sum = 0;
    for (size_t j = 0; j < n; ++j) {
      sum += x[j] * std::polar(1.0, sign * 2 * M_PI * static_cast<double>((j * k) % n) / n);
    }
    y[k] = sum;
  }
  return y;
}

// The largest difference relative to the largest magnitude of `want`.
double RelativeError(const std::vector<Complex>& got, const std::vector<Complex>& want) {
  double error = 0, magnitude = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    error = std::fmax(error, std::abs(got[i] - want[i]));
    magnitude = std::fmax(magnitude, std::abs(want[i]));
  }
  return error / magnitude;
}

void ComplexSingle(int n) {
  std::vector<Complex> x(n);
  std::vector<cufftComplex> host(n);
  for (int i = 0; i < n; ++i) {
    x[i] = Complex(std::sin(0.1 * i) + (i % 7) * 0.1, std::cos(0.05 * i * i / n));
    host[i] = make_cuComplex(static_cast<float>(x[i].real()), static_cast<float>(x[i].imag()));
    x[i] = Complex(host[i].x, host[i].y);  // what the GPU gets
  }
  cufftHandle plan;
  FFT_CHECK(cufftPlan1d(&plan, n, CUFFT_C2C, 1));
  cufftComplex* data;
  CHECK(cudaMalloc(&data, n * sizeof(cufftComplex)));
  CHECK(cudaMemcpy(data, host.data(), n * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  FFT_CHECK(cufftExecC2C(plan, data, data, CUFFT_FORWARD));
  CHECK(cudaMemcpy(host.data(), data, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  std::vector<Complex> got(n);
  for (int i = 0; i < n; ++i) got[i] = Complex(host[i].x, host[i].y);
  double error = RelativeError(got, Dft(x, -1));
  std::printf("C2C n=%d: relative error %.3g\n", n, error);
  EXPECT(error < 1e-5);
  FFT_CHECK(cufftDestroy(plan));
  CHECK(cudaFree(data));
}

void ComplexDoubleInverse() {
  const int n = 512;
  std::vector<Complex> x(n);
  for (int i = 0; i < n; ++i) x[i] = Complex(i % 11, -(i % 5));
  cufftHandle plan;
  FFT_CHECK(cufftPlan1d(&plan, n, CUFFT_Z2Z, 1));
  cufftDoubleComplex* data;
  CHECK(cudaMalloc(&data, n * sizeof(cufftDoubleComplex)));
  static_assert(sizeof(Complex) == sizeof(cufftDoubleComplex));
  CHECK(cudaMemcpy(data, x.data(), n * sizeof(Complex), cudaMemcpyHostToDevice));
  FFT_CHECK(cufftExecZ2Z(plan, data, data, CUFFT_INVERSE));
  std::vector<Complex> got(n);
  CHECK(cudaMemcpy(got.data(), data, n * sizeof(Complex), cudaMemcpyDeviceToHost));
  double error = RelativeError(got, Dft(x, 1));
  std::printf("Z2Z inverse n=%d: relative error %.3g\n", n, error);
  EXPECT(error < 1e-12);
  FFT_CHECK(cufftDestroy(plan));
  CHECK(cudaFree(data));
}

// Real to complex and back, three signals at once: the round trip gives n times the input,
// and the forward half-spectrum matches the DFT.
void RealBatched() {
  const int n = 128, batch = 3;
  std::vector<float> signal(n * batch);
  for (int i = 0; i < n * batch; ++i) signal[i] = std::sin(i * 0.3f) + (i % 3);
  cufftHandle forward, inverse;
  FFT_CHECK(cufftPlan1d(&forward, n, CUFFT_R2C, batch));
  FFT_CHECK(cufftPlan1d(&inverse, n, CUFFT_C2R, batch));
  float* real;
  cufftComplex* spectrum;
  CHECK(cudaMalloc(&real, n * batch * sizeof(float)));
  CHECK(cudaMalloc(&spectrum, (n / 2 + 1) * batch * sizeof(cufftComplex)));
  CHECK(cudaMemcpy(real, signal.data(), n * batch * sizeof(float), cudaMemcpyHostToDevice));
  FFT_CHECK(cufftExecR2C(forward, real, spectrum));
  std::vector<cufftComplex> half((n / 2 + 1) * batch);
  CHECK(cudaMemcpy(half.data(), spectrum, half.size() * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  for (int b = 0; b < batch; ++b) {
    std::vector<Complex> x(signal.begin() + b * n, signal.begin() + (b + 1) * n);
    std::vector<Complex> want = Dft(x, -1), got(n / 2 + 1);
    want.resize(n / 2 + 1);
    for (int k = 0; k <= n / 2; ++k) {
      got[k] = Complex(half[b * (n / 2 + 1) + k].x, half[b * (n / 2 + 1) + k].y);
    }
    EXPECT(RelativeError(got, want) < 1e-5);
  }
  FFT_CHECK(cufftExecC2R(inverse, spectrum, real));
  std::vector<float> back(n * batch);
  CHECK(cudaMemcpy(back.data(), real, n * batch * sizeof(float), cudaMemcpyDeviceToHost));
  double error = 0;
  for (int i = 0; i < n * batch; ++i) error = std::fmax(error, std::fabs(back[i] / n - signal[i]));
  std::printf("R2C/C2R n=%d batch=%d: round trip error %.3g\n", n, batch, error);
  EXPECT(error < 1e-4);
  FFT_CHECK(cufftDestroy(forward));
  FFT_CHECK(cufftDestroy(inverse));
  CHECK_FREE(real, spectrum);
}

// A 2D transform on a stream of the program's, forward and inverse: n times the input.
void TwoDimensionsOnAStream() {
  const int nx = 64, ny = 48, n = nx * ny;
  std::vector<cufftComplex> host(n), original(n);
  for (int i = 0; i < n; ++i) original[i] = make_cuComplex((i % 13) * 0.1f, (i % 7) * -0.2f);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cufftHandle plan;
  FFT_CHECK(cufftPlan2d(&plan, nx, ny, CUFFT_C2C));
  FFT_CHECK(cufftSetStream(plan, stream));
  cufftComplex* data;
  CHECK(cudaMalloc(&data, n * sizeof(cufftComplex)));
  CHECK(cudaMemcpyAsync(data, original.data(), n * sizeof(cufftComplex), cudaMemcpyHostToDevice, stream));
  FFT_CHECK(cufftExecC2C(plan, data, data, CUFFT_FORWARD));
  FFT_CHECK(cufftExecC2C(plan, data, data, CUFFT_INVERSE));
  CHECK(cudaMemcpyAsync(host.data(), data, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  double error = 0;
  for (int i = 0; i < n; ++i) {
    error = std::fmax(error, std::fabs(host[i].x / n - original[i].x) + std::fabs(host[i].y / n - original[i].y));
  }
  std::printf("2D %dx%d on a stream: round trip error %.3g\n", nx, ny, error);
  EXPECT(error < 1e-4);
  FFT_CHECK(cufftDestroy(plan));
  CHECK(cudaFree(data));
  CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main() {
  int version = 0;
  FFT_CHECK(cufftGetVersion(&version));
  EXPECT(version > 0);
  for (int n : {256, 4096, 1000, 97}) ComplexSingle(n);  // radix 2, mixed radix, a prime
  ComplexDoubleInverse();
  RealBatched();
  TwoDimensionsOnAStream();
  std::printf("PASS\n");
  return 0;
}
