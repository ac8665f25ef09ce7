// kernels/cpu/dot_q8_1_avxvnni.cpp — the x86 row-dot kernels of dot_q8_1_x86.inc built for
// AVX2 + FMA + F16C + AVX-VNNI (VEX vpdpbusd); entered only when cpu_features.cpp says the CPU and OS support it.
#define DS4_X86_FAMILY avx_vnni
#define DS4_X86_VNNI 1
#include "kernels/cpu/dot_q8_1_x86.inc"
#include "kernels/cpu/mmq_x86.inc"
