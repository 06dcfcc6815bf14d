#!/usr/bin/env bash
# The run config of the MPI process-level tests (test_mpi_kill.sh,
# test_mpi_signals.sh): a small reversible local/LSH LM on the duplication task,
# dropout 0.1 (masks drawn by the global row, so a checkpoint resumes on another
# process count as the uninterrupted run goes on), 2 sequences per process, a
# log line every step, a 20 s allreduce timeout.
#   mpi_run_config <file> <run dir> <checkpoint_every>
mpi_run_config() {
  local file=$1 dir=$2 checkpoint_every=$3
  cat >"$file" <<TOML
[run]
dir = "$dir"
[model]
vocab = 16
d_model = 64
d_ff = 128
heads = 2
d_head = 32
layers = 2
attention = ["local", "lsh"]
positions = "axial"
max_length = 256
dropout = 0.1
attention_dropout = 0.1
reversible = true
[model.lsh]
chunk = 32
[model.local]
chunk = 32
[data]
task = "duplication"
length = 256
vocab = 16
[train]
steps = 100000
batch = 4
learning_rate = 0.002
eval_every = 0
log_every = 1
checkpoint_every = $checkpoint_every
keep_checkpoints = 100
allreduce_timeout = 20
TOML
}
