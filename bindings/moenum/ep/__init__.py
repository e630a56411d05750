"""Real expert parallelism: one process per EP rank (dispatch.transport: mpi | nccl)."""
