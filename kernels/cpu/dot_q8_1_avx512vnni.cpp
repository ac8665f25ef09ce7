// kernels/cpu/dot_q8_1_avx512vnni.cpp — the x86 row-dot kernels of dot_q8_1_x86.inc built for
// AVX2 + FMA + F16C + AVX512F/BW/VL/VNNI (EVEX vpdpbusd on ymm, and the 512-bit IQ2_XXS, IQ2_XS
// and IQ1_M kernels of dot_q8_1_zmm.inc); entered only when cpu_features.cpp says the CPU and OS
// support all of them.
#define DS4_X86_FAMILY avx512_vnni
#define DS4_X86_VNNI 2
#include "kernels/cpu/dot_q8_1_x86.inc"
#include "kernels/cpu/mmq_x86.inc"
