#include "gguf/gguf_writer.h"
