#!/usr/bin/env bats
# Every malformed --gpu-pool* value is rejected at submit by sbatch, salloc and srun with a
# message naming the option, and nothing is submitted. A bad value is refused by Slurm's
# option parser (exit status 255); a combination that does not fit (place or mem without
# --gpu-pool) by the plugin stack (exit status 1, needs the plugin loaded as "required").

load ../lib/helpers

setup_file() {
  # The plugin must be loaded by the dev cluster for any of this to mean something.
  grep -q spank_gpupool.so "$DEVDIR/plugstack.conf"
}

# reject STATUS CMD...: the command exits with STATUS, names the option, and submits
# nothing.
reject() {
  local expected=$1 before after
  shift
  before=$(squeue -h -o %i | wc -l)
  run "$@"
  [ "$status" -eq "$expected" ] || { echo "exit $status, expected $expected: $output"; return 1; }
  [[ $output == *"gpupool: --gpu-pool"* ]] || { echo "no option named in: $output"; return 1; }
  after=$(squeue -h -o %i | wc -l)
  [ "$before" -eq "$after" ]
}

@test "sbatch: --gpu-pool without a count" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100 --wrap true
  [[ $output == *"'a100' has no count"* ]]
}

@test "sbatch: --gpu-pool with count 0" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:0 --wrap true
  [[ $output == *"must be at least 1"* ]]
}

@test "sbatch: --gpu-pool with a negative count" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:-2 --wrap true
}

@test "sbatch: --gpu-pool with a count that is not a number" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:two --wrap true
  [[ $output == *"is not a number"* ]]
}

@test "sbatch: --gpu-pool with an empty value" {
  reject 255 sbatch -o /dev/null --gpu-pool= --wrap true
}

@test "sbatch: --gpu-pool with an empty pool name" {
  reject 255 sbatch -o /dev/null --gpu-pool=:2 --wrap true
}

@test "sbatch: --gpu-pool naming a pool twice" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:1,a100:2 --wrap true
  [[ $output == *"named twice"* ]]
}

@test "sbatch: --gpu-pool with a trailing comma" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:1, --wrap true
}

@test "sbatch: --gpu-pool with a huge count" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:100000 --wrap true
}

@test "sbatch: --gpu-pool with a bad character in the pool name" {
  reject 255 sbatch -o /dev/null '--gpu-pool=a1/00:1' --wrap true
}

@test "sbatch: --gpu-pool-place with an unknown placement" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:1 --gpu-pool-place=scatter --wrap true
  [[ $output == *"--gpu-pool-place: 'scatter' is not pack, spread or rack:NAME"* ]]
}

@test "sbatch: --gpu-pool-place=rack: without a name" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:1 --gpu-pool-place=rack: --wrap true
}

@test "sbatch: --gpu-pool-mem with a bad unit" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:1 --gpu-pool-mem=40X --wrap true
  [[ $output == *"--gpu-pool-mem:"* ]]
}

@test "sbatch: --gpu-pool-mem of zero" {
  reject 255 sbatch -o /dev/null --gpu-pool=a100:1 --gpu-pool-mem=0 --wrap true
}

@test "sbatch: --gpu-pool-place without --gpu-pool" {
  reject 1 sbatch -o /dev/null --gpu-pool-place=spread --wrap true
  [[ $output == *"--gpu-pool-place: needs --gpu-pool"* ]]
}

@test "sbatch: --gpu-pool-mem without --gpu-pool" {
  reject 1 sbatch -o /dev/null --gpu-pool-mem=40G --wrap true
}

@test "salloc: --gpu-pool without a count" {
  reject 255 salloc --gpu-pool=h100 true
}

@test "salloc: --gpu-pool-place with an unknown placement" {
  reject 255 salloc --gpu-pool=h100:1 --gpu-pool-place=packed true
}

@test "salloc: --gpu-pool-mem with a bad size" {
  reject 255 salloc --gpu-pool=h100:1 --gpu-pool-mem=lots true
}

@test "srun: --gpu-pool with count 0" {
  reject 255 srun --gpu-pool=h100:0 true
}

@test "srun: --gpu-pool-place=rack: with a bad rack name" {
  reject 255 srun --gpu-pool=h100:1 '--gpu-pool-place=rack:a b' true
}

@test "salloc: --gpu-pool-mem without --gpu-pool" {
  reject 1 salloc --gpu-pool-mem=1G true
}

@test "srun: --gpu-pool-place without --gpu-pool" {
  reject 1 srun --gpu-pool-place=pack true
}

@test "srun: --gpu-pool-mem with a negative size" {
  reject 255 srun --gpu-pool=h100:1 --gpu-pool-mem=-1G true
}

@test "a valid request is accepted (the rejections above are not blanket refusals)" {
  run srun --gpu-pool=h100:1 --gpu-pool-place=spread --gpu-pool-mem=40G true
  [ "$status" -eq 0 ]
}
