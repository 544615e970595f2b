#include "tensor/quant_codec.h"
