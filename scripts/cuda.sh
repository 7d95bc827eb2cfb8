#!/usr/bin/env bash
# Sourced by the install scripts: is this a GPU machine? HPO_CUDA=1 / HPO_CUDA=0 decides outright (the
# GPU image sets it); otherwise CUDA counts as present when nvcc or an NVIDIA driver is there.
hpo_has_cuda() {
  case "${HPO_CUDA:-}" in
    1) return 0 ;;
    0) return 1 ;;
  esac
  command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || command -v nvidia-smi >/dev/null 2>&1
}
