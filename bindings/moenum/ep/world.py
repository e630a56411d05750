"""The processes of a real EP run: one per EP rank, started by `mpirun -np P` or `srun`.

MPI (Open MPI through mpi4py) is the control plane of every distributed transport: which point runs,
the counts of each exchange, the gathers to rank 0, and the NCCL unique id. Every wait is bounded:
the collectives are non-blocking and polled against a deadline (MOENUM_EP_TIMEOUT, seconds), and a
rank that fails (bad input, an exception) or times out prints one line naming itself and calls
MPI_Abort, which stops every rank: a distributed run never hangs.

mpi4py is imported (and MPI initialised) only when a launcher started this process, so a plain
`moenum run` never touches MPI.
"""
from __future__ import annotations

import os
import pickle
import sys
import time

import numpy as np

TIMEOUT_ENV = "MOENUM_EP_TIMEOUT"
DEFAULT_TIMEOUT_S = 1800.0  # a rank may wait this long for rank 0 to verify and write the previous point
# The launchers' rank variables: Open MPI's mpirun, PMIx (Open MPI 5, srun --mpi=pmix), PMI (MPICH, srun --mpi=pmi2).
RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
LOCAL_RANK_ENV = ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID")
EXIT_FAILED = 1

_world: "World | None" = None
_detected = False


def launched() -> bool:
    """True when a launcher (mpirun, srun) started this process as one rank of a job."""
    return any(v in os.environ for v in RANK_ENV)


def timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        value = DEFAULT_TIMEOUT_S
    return value if value > 0 else DEFAULT_TIMEOUT_S


def current() -> "World | None":
    """This process's world when a launcher started it, else None (a local run)."""
    global _world, _detected
    if not _detected:
        _detected = True
        if launched():
            _world = World()
    return _world


class World:
    """COMM_WORLD with bounded waits and the abort path."""

    def __init__(self):
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # no NVLink multicast (NCCL reads it at init)
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.local_rank = next((int(os.environ[v]) for v in LOCAL_RANK_ENV if v in os.environ), 0)
        self.timeout = timeout_s()
        self.stopped = False

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def who(self) -> str:
        return f"rank {self.rank} of {self.size}"

    # ---- the abort path ------------------------------------------------------------------------
    def abort(self, message: str, code: int = EXIT_FAILED) -> None:
        """One line naming this rank on stderr, then MPI_Abort: every rank of the job stops."""
        print(f"moenum: error: {self.who()}: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        self.comm.Abort(code)
        os._exit(code)  # not reached: MPI_Abort does not return

    def wait(self, request, what: str):
        """Poll a non-blocking request until it completes or the deadline passes (then abort)."""
        deadline = time.monotonic() + self.timeout
        pause = 1e-4
        while not request.Test():
            if time.monotonic() > deadline:
                self.abort(f"timed out after {self.timeout:g} s waiting for the other ranks in {what} "
                           f"(a rank hung or died; {TIMEOUT_ENV} sets the limit)")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    # ---- collectives (bounded) -----------------------------------------------------------------
    def bcast_object(self, obj, what: str):
        """Rank 0's obj on every rank (pickled: sizes first, then the bytes)."""
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if self.is_root else None
        n = np.array([data.size if self.is_root else 0], dtype=np.int64)
        self.wait(self.comm.Ibcast(n, root=0), what)
        buf = data.copy() if self.is_root else np.empty(int(n[0]), dtype=np.uint8)
        self.wait(self.comm.Ibcast(buf, root=0), what)
        return obj if self.is_root else pickle.loads(buf.tobytes())

    def allgather_object(self, obj, what: str) -> list:
        """Every rank's obj, in rank order, on every rank."""
        data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        sizes = np.empty(self.size, dtype=np.int64)
        self.wait(self.comm.Iallgather(np.array([data.size], dtype=np.int64), sizes), what)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        self.wait(self.comm.Iallgatherv(data, [buf, (sizes, offsets), self.MPI.BYTE]), what)
        return [pickle.loads(buf[o:o + s].tobytes()) for o, s in zip(offsets, sizes)]

    def alltoall_counts(self, counts: np.ndarray, what: str) -> np.ndarray:
        """counts[d] sent to rank d -> counts[s] received from rank s (int64)."""
        recv = np.empty(self.size, dtype=np.int64)
        self.wait(self.comm.Ialltoall(np.ascontiguousarray(counts, dtype=np.int64), recv), what)
        return recv

    def alltoallv_bytes(self, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray,
                        what: str) -> np.ndarray:
        """MPI_Alltoallv of bytes: send[send_offsets[d]:][:send_counts[d]] to rank d."""
        send_off = np.concatenate([[0], np.cumsum(send_counts)[:-1]]).astype(np.int64)
        recv_off = np.concatenate([[0], np.cumsum(recv_counts)[:-1]]).astype(np.int64)
        recv = np.empty(int(recv_counts.sum()), dtype=np.uint8)
        self.wait(self.comm.Ialltoallv([send, (send_counts, send_off), self.MPI.BYTE],
                                       [recv, (recv_counts, recv_off), self.MPI.BYTE]), what)
        return recv

    def gather_bytes(self, data: np.ndarray, what: str) -> list[np.ndarray] | None:
        """Each rank's bytes on rank 0, in rank order (None elsewhere)."""
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        sizes = np.empty(self.size, dtype=np.int64)
        self.wait(self.comm.Iallgather(np.array([data.size], dtype=np.int64), sizes), what)
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        buf = np.empty(int(sizes.sum()) if self.is_root else 0, dtype=np.uint8)
        self.wait(self.comm.Igatherv(data, [buf, (sizes, offsets), self.MPI.BYTE] if self.is_root else None,
                                     root=0), what)
        return [buf[o:o + s] for o, s in zip(offsets, sizes)] if self.is_root else None

    # ---- the run's end ---------------------------------------------------------------------------
    def stop_followers(self) -> None:
        """Rank 0: tell the other ranks that no point follows (once)."""
        if self.is_root and not self.stopped and self.size > 1:
            self.stopped = True
            self.bcast_object(None, "the end of the run")
