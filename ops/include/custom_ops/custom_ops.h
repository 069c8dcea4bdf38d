// Every operator of the custom-ops library: include this, or the header of the one you use.
#pragma once

#include <custom_ops/weighted_square_sum.h>
#include <custom_ops/weighted_sum.h>
