// Dense host tensors of doubles for the reference interpreter.
#ifndef ATTN_REFERENCE_TENSOR_H
#define ATTN_REFERENCE_TENSOR_H

#include <cstdint>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace attn::reference {

/// A row-major tensor of doubles. Small and plain: the reference is about
/// being obviously right, not fast.
struct Tensor {
  std::vector<int64_t> Shape;
  std::vector<double> Data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> S, double Fill = 0.0);

  int64_t numel() const { return static_cast<int64_t>(Data.size()); }
  int64_t dim(size_t I) const { return Shape.at(I); }
  /// Flat offset of a full index.
  int64_t offset(std::initializer_list<int64_t> Index) const;
  double &at(std::initializer_list<int64_t> Index) {
    return Data[offset(Index)];
  }
  double at(std::initializer_list<int64_t> Index) const {
    return Data[offset(Index)];
  }
  /// "[2, 4, 13]"
  std::string shapeString() const;

  /// Uniform values in [Lo, Hi].
  static Tensor uniform(std::vector<int64_t> S, std::mt19937_64 &Rng,
                        double Lo, double Hi);
  /// Standard normal values.
  static Tensor normal(std::vector<int64_t> S, std::mt19937_64 &Rng);
};

/// Custom-input values by name: shape [] for scalar, [H] per-head,
/// [B,H,S] per-row, [B,H,Skv] per-key, [B,H,S,Skv] full.
using InputValues = std::map<std::string, Tensor>;

/// max |A - B| / (1 + |B|) over all elements; infinities of the same sign
/// compare equal, and a NaN on either side gives +inf.
double maxMixedError(const Tensor &A, const Tensor &B);

} // namespace attn::reference

#endif
