// Meta kernel of weighted_square_sum: the frontend without a loop, on SymInt shapes (see
// weighted_sum_meta.cpp).
#include "weighted_square_sum_registration.h"

TORCH_LIBRARY_IMPL(custom, Meta, m) {
  custom::detail::register_weighted_square_sum_kernels<custom::detail::kNoReductionLoops>(m);
}
