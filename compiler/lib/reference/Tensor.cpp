// Host tensors for the reference interpreter.
#include "attn/reference/Tensor.h"

#include "attn/Error.h"

#include <cmath>
#include <limits>

namespace attn::reference {

Tensor::Tensor(std::vector<int64_t> S, double Fill) : Shape(std::move(S)) {
  int64_t N = 1;
  for (int64_t D : Shape)
    N *= D;
  Data.assign(N, Fill);
}

int64_t Tensor::offset(std::initializer_list<int64_t> Index) const {
  if (Index.size() != Shape.size())
    throw InternalError("tensor index of rank " +
                        std::to_string(Index.size()) + " into rank " +
                        std::to_string(Shape.size()));
  int64_t Off = 0;
  size_t I = 0;
  for (int64_t X : Index) {
    if (X < 0 || X >= Shape[I])
      throw InternalError("tensor index out of range");
    Off = Off * Shape[I++] + X;
  }
  return Off;
}

std::string Tensor::shapeString() const {
  std::string S = "[";
  for (size_t I = 0; I < Shape.size(); ++I)
    S += (I ? ", " : "") + std::to_string(Shape[I]);
  return S + "]";
}

Tensor Tensor::uniform(std::vector<int64_t> S, std::mt19937_64 &Rng,
                       double Lo, double Hi) {
  Tensor T(std::move(S));
  std::uniform_real_distribution<double> Dist(Lo, Hi);
  for (double &X : T.Data)
    X = Lo == Hi ? Lo : Dist(Rng);
  return T;
}

Tensor Tensor::normal(std::vector<int64_t> S, std::mt19937_64 &Rng) {
  Tensor T(std::move(S));
  std::normal_distribution<double> Dist(0.0, 1.0);
  for (double &X : T.Data)
    X = Dist(Rng);
  return T;
}

double maxMixedError(const Tensor &A, const Tensor &B) {
  if (A.Shape != B.Shape)
    throw InternalError("comparing tensors of shapes " + A.shapeString() +
                        " and " + B.shapeString());
  double Max = 0.0;
  for (size_t I = 0; I < A.Data.size(); ++I) {
    double X = A.Data[I], Y = B.Data[I];
    if (std::isnan(X) || std::isnan(Y))
      return std::numeric_limits<double>::infinity();
    if (std::isinf(X) || std::isinf(Y)) {
      if (X != Y)
        return std::numeric_limits<double>::infinity();
      continue;
    }
    Max = std::max(Max, std::fabs(X - Y) / (1.0 + std::fabs(Y)));
  }
  return Max;
}

} // namespace attn::reference
