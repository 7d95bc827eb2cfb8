#!/usr/bin/env bash
# Sourced by the install scripts: is this a GPU machine? HPO_CUDA=1 / HPO_CUDA=0 decides outright (the GPU
# image sets HPO_CUDA=1: it is built where no GPU is); otherwise only an NVIDIA driver that lists a GPU
# counts. A CUDA compiler alone does not: a CPU machine may have nvcc and no GPU (and no CUDA runtime).
hpo_has_cuda() {
  case "${HPO_CUDA:-}" in
    1) return 0 ;;
    0) return 1 ;;
  esac
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}
