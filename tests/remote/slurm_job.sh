#!/bin/bash
# Batch script of the data-path jobs (tests/remote/slurm_programs.bats): prints what the
# job was given (never the token), then runs the CUDA program named by its arguments,
# unmodified. Everything the remoting library reads comes from spank_gpupool.
echo "JOB lease=${GPUPOOL_LEASE_ID:-} gpus=${GPUPOOL_GPUS:-} visible=${CUDA_VISIBLE_DEVICES:-}" \
     "ucx_tls=${UCX_TLS:-} ld_library_path=${LD_LIBRARY_PATH:-}"
exec "$@"
