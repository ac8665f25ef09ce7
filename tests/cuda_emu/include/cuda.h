// tests/cuda_emu/include/cuda.h — emulated CUDA builds (DS4_CUDA_EMU): the runtime API comes from the emulator.
#pragma once
#include "tests/cuda_emu/cuda_emu.h"
