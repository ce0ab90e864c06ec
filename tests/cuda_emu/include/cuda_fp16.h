#pragma once
#include "cuda_emu.h"  // the whole emulated CUDA API lives in one header
