void joinlab_kernels_cpu_anchor() {}
