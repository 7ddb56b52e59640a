// The warp matrix operations' arithmetic (matrix_ops.h), which both tiers run.
//
// A wmma fragment holds E elements in each of the 32 lanes; PTX leaves which matrix element
// each one is to the implementation. Here element e of lane l is element (l * E + e) mod
// (rows * cols) of the matrix in row-major order, whatever the layout in memory: the
// fragments of A and B hold 2 or 4 copies of each element on shapes where E * 32 exceeds
// the matrix, as a GPU's do. mma.sync's fragments follow the lane layouts PTX defines
// (MmaIndex). The multiply gathers the three matrices from every lane's registers,
// multiplies in the precision a tensor core uses (f32 or f16 accumulators summed in f32,
// f64 in f64, integers in 64 bits) and scatters the result.
#include "remote/ptx/matrix_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

#include "remote/ptx/half_float.h"

namespace gpupool::sim {

namespace {

// Element e of lane l of a fragment (its registers' rows), as its raw bits (zero-extended).
uint64_t FragmentBits(const uint64_t* const* registers, WmmaType t, uint32_t e, uint32_t l) {
  const uint32_t per = WmmaPerRegister(t);
  const uint64_t word = registers[e / per][l];
  if (per == 1) return t == WmmaType::kF64 ? word : word & 0xffffffffu;
  const uint32_t bits = 8 * WmmaSize(t);
  return (word >> ((e % per) * bits)) & ((uint64_t{1} << bits) - 1);
}

double ElementValue(uint64_t bits, WmmaType t) {
  switch (t) {
    case WmmaType::kF16:
      return HalfToFloat(static_cast<uint16_t>(bits));
    case WmmaType::kBF16:
      return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
    case WmmaType::kTF32:  // the low 13 mantissa bits take no part
      return std::bit_cast<float>(static_cast<uint32_t>(bits) & ~0x1fffu);
    case WmmaType::kF32:
      return std::bit_cast<float>(static_cast<uint32_t>(bits));
    case WmmaType::kF64:
      return std::bit_cast<double>(bits);
    case WmmaType::kS8:
      return static_cast<int8_t>(bits);
    case WmmaType::kU8:
      return static_cast<uint8_t>(bits);
    case WmmaType::kS32:
      return static_cast<int32_t>(bits);
    case WmmaType::kE4M3:
    case WmmaType::kE5M2:  // exact as an f16 (a NaN a NaN)
      return HalfToFloat(
          Fp8ToHalf(static_cast<uint8_t>(bits), t == WmmaType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2, false));
  }
  return 0;
}

// mma.sync's fragments (ptx_layout): the row-major index in its matrix of element e of
// lane l, as PTX's figures place them (groupID = lane / 4, threadID_in_group = lane % 4).
// matrix 0 d, 1 a, 2 b, 3 c; the shapes MmaSyncForm takes: m16n8k16 and m16n8k8 of
// f16/bf16, m16n8k8 of tf32, m8n8k4 of f64, m16n8k32 of 8-bit types (.s8, .u8, .e4m3,
// .e5m2: four elements a register; a's registers 0 and 2 rows g, 1 and 3 rows g + 8, 2 and
// 3 columns 16 on; b's register 0 rows 4t to 4t + 3, 1 those + 16).
uint32_t MmaIndex(const WmmaOp& op, int matrix, uint32_t e, uint32_t l) {
  const uint32_t g = l >> 2, t = l & 3;
  const WmmaType type = op.types[1];
  uint32_t row, col, cols;
  if (type == WmmaType::kF64) {  // m8n8k4
    if (matrix == 1) return g * 4 + t;
    if (matrix == 2) return t * 8 + g;
    return g * 8 + t * 2 + e;
  }
  if (matrix == 0 || matrix == 3) {  // 16 x 8
    row = g + 8 * (e >> 1);
    col = t * 2 + (e & 1);
    cols = 8;
  } else if (op.k == 32) {  // m16n8k32 of 8-bit types
    const uint32_t reg = e >> 2, byte = e & 3;
    if (matrix == 1) {
      row = g + 8 * (reg & 1);
      col = t * 4 + 16 * (reg >> 1) + byte;
      cols = 32;
    } else {
      row = t * 4 + 16 * reg + byte;
      col = g;
      cols = 8;
    }
  } else if (type == WmmaType::kTF32) {  // m16n8k8
    if (matrix == 1) {
      row = g + 8 * (e & 1);
      col = t + 4 * (e >> 1);
      cols = 8;
    } else {
      row = t + 4 * e;
      col = g;
      cols = 8;
    }
  } else if (matrix == 1) {  // A, 16 x k
    row = g + 8 * ((e >> 1) & 1);
    col = t * 2 + (e & 1) + 8 * (e >> 2);
    cols = op.k;
  } else {  // B, k x 8
    row = t * 2 + (e & 1) + 8 * (e >> 1);
    col = g;
    cols = 8;
  }
  return row * cols + col;
}

}  // namespace

uint32_t WmmaSize(WmmaType t) {
  switch (t) {
    case WmmaType::kF16:
    case WmmaType::kBF16:
      return 2;
    case WmmaType::kS8:
    case WmmaType::kU8:
    case WmmaType::kE4M3:
    case WmmaType::kE5M2:
      return 1;
    case WmmaType::kF64:
      return 8;
    default:
      return 4;
  }
}

uint32_t WmmaPerRegister(WmmaType t) { return t == WmmaType::kF64 ? 1 : 4 / WmmaSize(t); }

void WmmaShape(const WmmaOp& op, char matrix, uint32_t* rows, uint32_t* cols) {
  *rows = matrix == 'a' ? op.m : matrix == 'b' ? op.k : op.m;
  *cols = matrix == 'a' ? op.k : matrix == 'b' ? op.n : op.n;
}

bool MatrixModifiers(const std::vector<std::string>& parts, WmmaOp* op, std::vector<WmmaType>* types,
                     std::vector<bool>* row_layouts) {
  static const std::map<std::string, WmmaType> kTypes = {
      {"f16", WmmaType::kF16},   {"bf16", WmmaType::kBF16}, {"tf32", WmmaType::kTF32}, {"f32", WmmaType::kF32},
      {"f64", WmmaType::kF64},   {"s8", WmmaType::kS8},     {"u8", WmmaType::kU8},     {"s32", WmmaType::kS32},
      {"e4m3", WmmaType::kE4M3}, {"e5m2", WmmaType::kE5M2}};
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    unsigned m = 0, n = 0, k = 0;
    char tail = 0;
    if (std::sscanf(part.c_str(), "m%un%uk%u%c", &m, &n, &k, &tail) == 3) {
      op->m = m;
      op->n = n;
      op->k = k;
    } else if (auto type = kTypes.find(part); type != kTypes.end()) {
      types->push_back(type->second);
    } else if (part == "row" || part == "col") {
      row_layouts->push_back(part == "row");
    } else if (part == "satfinite") {
      op->satfinite = true;
    } else if (part == "s4" || part == "u4" || part == "b1") {
      return false;
    }
  }
  return true;
}

bool MmaSyncForm(const std::vector<std::string>& parts, WmmaOp* op) {
  op->kind = WmmaOp::kMma;
  op->ptx_layout = true;
  std::vector<WmmaType> types;
  std::vector<bool> layouts;  // true: row
  const bool whole_bytes = MatrixModifiers(parts, op, &types, &layouts);
  if (!whole_bytes || types.size() != 4 || layouts != std::vector<bool>{true, false}) return false;
  for (int i = 0; i < 4; ++i) op->types[i] = types[i];
  const auto shape = std::make_tuple(op->m, op->n, op->k);
  const WmmaType a = types[1], d = types[0], c = types[3];
  const bool half_in = (a == WmmaType::kF16 || a == WmmaType::kBF16) && types[2] == a &&
                       (shape == std::make_tuple(16u, 8u, 16u) || shape == std::make_tuple(16u, 8u, 8u));
  const bool half_out = d == WmmaType::kF16 || c == WmmaType::kF16;
  const WmmaType b = types[2];
  const bool k32 = shape == std::make_tuple(16u, 8u, 32u);
  auto integer = [](WmmaType t) { return t == WmmaType::kS8 || t == WmmaType::kU8; };
  auto fp8 = [](WmmaType t) { return t == WmmaType::kE4M3 || t == WmmaType::kE5M2; };
  return (half_in && (d == WmmaType::kF32 || d == WmmaType::kF16) && (c == WmmaType::kF32 || c == WmmaType::kF16) &&
          (!half_out || a == WmmaType::kF16)) ||
         (k32 && integer(a) && integer(b) && d == WmmaType::kS32 && c == WmmaType::kS32) ||
         (k32 && fp8(a) && fp8(b) && d == WmmaType::kF32 && c == WmmaType::kF32 && !op->satfinite) ||
         (a == WmmaType::kTF32 && types[2] == a && d == WmmaType::kF32 && c == WmmaType::kF32 &&
          shape == std::make_tuple(16u, 8u, 8u)) ||
         (a == WmmaType::kF64 && types[2] == a && d == a && c == a && shape == std::make_tuple(8u, 8u, 4u));
}

void WarpMma(const WmmaOp& op, const uint64_t* const* a_rows, const uint64_t* const* b_rows,
             const uint64_t* const* c_rows, uint64_t* const* d_rows, uint32_t mask) {
  const uint32_t m = op.m, n = op.n, k = op.k;
  // Largest shape: 32x8x16 / 16x16x16 (256 elements of C, 512 of A or B).
  double a[512], b[512], c[256];
  auto gather = [&](int which, const uint64_t* const* rows, uint32_t count, double* out) {
    const WmmaType t = op.types[which];
    const uint32_t elements = static_cast<uint32_t>(op.fragments[which].size()) * WmmaPerRegister(t);
    for (uint32_t l = 0; l < 32; ++l) {
      for (uint32_t e = 0; e < elements; ++e) {
        const uint32_t index = op.ptx_layout ? MmaIndex(op, which, e, l) : (l * elements + e) % count;
        out[index] = ElementValue(FragmentBits(rows, t, e, l), t);
      }
    }
  };
  gather(1, a_rows, m * k, a);
  gather(2, b_rows, k * n, b);
  gather(3, c_rows, m * n, c);
  const WmmaType dt = op.types[0];
  uint64_t result[256];
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      uint64_t bits;
      if (dt == WmmaType::kS32) {
        int64_t sum = static_cast<int64_t>(c[i * n + j]);
        for (uint32_t q = 0; q < k; ++q) {
          sum += static_cast<int64_t>(a[i * k + q]) * static_cast<int64_t>(b[q * n + j]);
        }
        if (op.satfinite) {
          sum = std::clamp<int64_t>(sum, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
        }
        bits = static_cast<uint32_t>(static_cast<uint64_t>(sum));
      } else if (dt == WmmaType::kF64) {
        double sum = c[i * n + j];
        for (uint32_t q = 0; q < k; ++q) sum = std::fma(a[i * k + q], b[q * n + j], sum);
        bits = std::bit_cast<uint64_t>(sum);
      } else {
        float sum = static_cast<float>(c[i * n + j]);
        for (uint32_t q = 0; q < k; ++q) {
          sum = std::fma(static_cast<float>(a[i * k + q]), static_cast<float>(b[q * n + j]), sum);
        }
        if (op.satfinite && std::isinf(sum)) {
          sum = std::copysign(dt == WmmaType::kF16 ? 65504.0f : std::numeric_limits<float>::max(), sum);
        }
        bits = dt == WmmaType::kF16 ? FloatToHalf(sum) : std::bit_cast<uint32_t>(sum);
      }
      result[i * n + j] = bits;
    }
  }
  // Each lane's registers of d, a packed register written whole from its elements.
  const uint32_t per = WmmaPerRegister(dt), bits = 8 * WmmaSize(dt);
  const uint32_t elements = static_cast<uint32_t>(op.fragments[0].size()) * per;
  for (uint32_t left = mask; left != 0; left &= left - 1) {
    const uint32_t l = static_cast<uint32_t>(std::countr_zero(left));
    for (uint32_t e = 0; e < elements; ++e) {
      const uint32_t index = op.ptx_layout ? MmaIndex(op, 0, e, l) : (l * elements + e) % (m * n);
      uint64_t& word = d_rows[e / per][l];
      if (per == 1) {
        word = result[index];
        continue;
      }
      const uint32_t shift = (e % per) * bits;
      const uint64_t field = ((uint64_t{1} << bits) - 1) << shift;
      if (e % per == 0) word = 0;
      word = (word & ~field) | ((result[index] << shift) & field);
    }
  }
}

uint64_t LdmatrixAddress(const uint64_t* rows, uint32_t lane, uint32_t j, uint32_t h, bool transpose) {
  const uint32_t row = transpose ? 2 * (lane % 4) + h : lane / 4;
  const uint32_t col = transpose ? lane / 4 : 2 * (lane % 4) + h;
  return rows[8 * j + row] + 2 * static_cast<uint64_t>(col);
}

}  // namespace gpupool::sim
