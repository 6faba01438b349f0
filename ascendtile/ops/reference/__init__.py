"""Pure-torch references of every op, one file per family. They are the CPU production path
(vectorised, no per-token Python loops) and the ground truth the Triton kernels are tested against."""
