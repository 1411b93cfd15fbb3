/*
 * bench_cuda.h — hydra-bench --cuda (bench_cuda.c).
 */
#ifndef HYDRA_BENCH_CUDA_H
#define HYDRA_BENCH_CUDA_H

/* argv[0] is "--cuda"; returns the exit status. */
int bench_cuda(int argc, char **argv);

#endif
