#include "gguf/gguf_value.h"
