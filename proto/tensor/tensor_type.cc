#include "tensor/tensor_type.h"
