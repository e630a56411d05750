"""The data plane of a real EP run (`dispatch.transport`): how rows move between the ranks.

`mpi`: MPI_Alltoallv over Open MPI. `nccl`: grouped ncclSend/ncclRecv between the ranks' GPUs, on a
communicator made from a unique id that rank 0 broadcasts over MPI (as nccl-tests does). Both move
the same bytes; the counts of each exchange always go over MPI (the control plane).
"""
from __future__ import annotations

import numpy as np

from ..errors import EnvironmentFailure

LOCAL, MPI, NCCL = "local", "mpi", "nccl"
TRANSPORTS = (LOCAL, MPI, NCCL)


def _split(buf: np.ndarray, counts: np.ndarray, dtype, row_shape) -> list[np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return [buf[offsets[i]:offsets[i + 1]].view(dtype).reshape((-1, *row_shape)) for i in range(len(counts))]


class Transport:
    """alltoallv of row blocks: parts[d] (rows for rank d) -> received[s] (rows from rank s)."""
    name = ""

    def __init__(self, world):
        self.world = world

    def _move(self, send: np.ndarray, send_counts: np.ndarray, recv_counts: np.ndarray, what: str) -> np.ndarray:
        raise NotImplementedError

    def alltoallv(self, parts: list[np.ndarray], what: str) -> list[np.ndarray]:
        dtype, row_shape = parts[0].dtype, parts[0].shape[1:]
        blocks = [np.ascontiguousarray(p, dtype=dtype).reshape(-1).view(np.uint8) for p in parts]
        send_counts = np.array([b.size for b in blocks], dtype=np.int64)
        recv_counts = self.world.alltoall_counts(send_counts, what)
        send = np.concatenate(blocks) if blocks else np.empty(0, np.uint8)
        return _split(self._move(send, send_counts, recv_counts, what), recv_counts, dtype, row_shape)


class MpiTransport(Transport):
    name = MPI

    def _move(self, send, send_counts, recv_counts, what):
        return self.world.alltoallv_bytes(send, send_counts, recv_counts, what)


class NcclTransport(Transport):
    """One NCCL communicator per run, on this rank's GPU (the local rank's device)."""
    name = NCCL

    def __init__(self, world):
        super().__init__(world)
        from .. import _core
        if not getattr(_core, "built_with_nccl", False):
            raise EnvironmentFailure("dispatch.transport nccl: this moenum was built without CUDA and NCCL "
                                     "(build with -Ccmake.define.MOENUM_CUDA=ON on a machine with NCCL)")
        uid = _core.nccl_unique_id() if world.is_root else None
        uid = world.bcast_object(uid, "the NCCL unique id")
        self.comm = _core.nccl_comm(uid, world.size, world.rank, world.local_rank, world.timeout)

    def _move(self, send, send_counts, recv_counts, what):
        try:
            return self.comm.alltoallv(send, send_counts, recv_counts)
        except RuntimeError as e:  # an NCCL error or its timeout: the communicator is aborted already
            self.world.abort(f"{what}: {e}")


_cache: dict = {}


def make(name: str, world) -> Transport:
    """The transport of this run (an NCCL communicator is made once and kept)."""
    if name not in _cache:
        _cache[name] = {MPI: MpiTransport, NCCL: NcclTransport}[name](world)
    return _cache[name]
