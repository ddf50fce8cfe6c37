/* kernels.c again, compiled with -march=x86-64-v3 (AVX2 + FMA) into libember_kernels_v3.so.1:
 * its own file so the two builds' object files do not overwrite each other (setup.py) */
#include "kernels.c"
