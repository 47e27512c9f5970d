// quant_error.cpp: a QuantError's counts as an array of doubles and back (ranks sum them as
// one buffer), and the sum of two.
#include "quant_error.h"

namespace tg {

void quant_error_fields(const QuantError& e, double* f) {
  const double v[kQuantErrorFields] = {
      e.signal,    e.noise,  e.values,           e.nonzero,          e.underflow,
      e.saturated, e.groups, e.groups_saturated, e.groups_underflow, e.zeros};
  for (int i = 0; i < kQuantErrorFields; i++) f[i] = v[i];
}

QuantError quant_error_from_fields(const double* f) {
  return {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]};
}

QuantError& operator+=(QuantError& a, const QuantError& b) {
  double x[kQuantErrorFields], y[kQuantErrorFields];
  quant_error_fields(a, x);
  quant_error_fields(b, y);
  for (int i = 0; i < kQuantErrorFields; i++) x[i] += y[i];
  return a = quant_error_from_fields(x);
}

}  // namespace tg
