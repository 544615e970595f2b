#include "gguf/gguf_reader.h"
