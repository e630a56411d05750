"""A scenario point with `dispatch.transport: mpi | nccl`, across the ranks of a launched job.

Rank 0 leads: it runs the campaign as a local run does (resume, the index, the report) and, for each
distributed point, announces it; the other ranks follow (`follow`): they load the same scenario files,
run their share of each announced point and exit when rank 0 says the run is over. A point's text
must be the same on every rank. Inside a point, a rank that fails stops every rank (`guard`).
"""
from __future__ import annotations

import hashlib
from contextlib import contextmanager

from ..errors import EnvironmentFailure, ScenarioError
from . import exchange, transport, world as world_mod

EXIT_BAD_INPUT, EXIT_ENVIRONMENT, EXIT_INTERRUPTED = 2, 3, 130
_announced = None  # a follower's next point, as rank 0 announced it


def _fingerprint(sc) -> tuple[str, str]:
    return sc.name, hashlib.sha256(sc.to_yaml().encode()).hexdigest()


class PointSession:
    """One distributed point on this rank: its world and transport."""

    def __init__(self, world, transport_name: str):
        self.world, self.transport_name = world, transport_name
        self.transport = None

    @property
    def is_root(self) -> bool:
        return self.world.is_root

    def backend_runner(self, run_local):
        """run_local's signature; returns the merged result on rank 0, None on the other ranks."""
        def run(name, core_sc, prepared, sc, keep_stages=None):  # noqa: ARG001 - each rank makes its own
            if self.transport is None:
                self.transport = transport.make(self.transport_name, self.world)
            return exchange.run_backend(self.world, self.transport, name, sc, prepared, bool(keep_stages),
                                        run_local)
        return run

    def results_attributes(self) -> dict:
        return {"transport": self.transport_name, "world_size": self.world.size}

    @contextmanager
    def guard(self):
        """Any failure on this rank stops every rank, with one line naming this rank."""
        try:
            yield
        except ScenarioError as e:
            self.world.abort(str(e), EXIT_BAD_INPUT)
        except EnvironmentFailure as e:
            self.world.abort(str(e), EXIT_ENVIRONMENT)
        except KeyboardInterrupt:
            self.world.abort("interrupted", EXIT_INTERRUPTED)
        except Exception as e:  # noqa: BLE001 - whatever it was, every rank must stop, not hang
            self.world.abort(f"{type(e).__name__}: {e}")


def local_attributes() -> dict:
    return {"transport": transport.LOCAL, "world_size": 1}


def for_point(sc) -> PointSession | None:
    """None for a local point; else this rank's session, after every rank agreed on the point."""
    global _announced
    cfg = sc.config
    name, ep = cfg["dispatch"]["transport"], cfg["dispatch"]["ep"]
    if name == transport.LOCAL:
        return None
    world = world_mod.current()
    if world is None:
        raise sc.error("dispatch.transport", f"transport {name} runs one process per EP rank: start moenum "
                                             f"with mpirun -np {ep} (or srun -n {ep})")
    if world.size != ep:  # the same on every rank: each stops with it
        world.abort(str(sc.error("dispatch.ep", f"ep {ep} needs {ep} processes, one per EP rank, but this run "
                                                f"has {world.size} (mpirun -np {ep})")), EXIT_BAD_INPUT)
    mine = _fingerprint(sc)
    if world.is_root:
        world.bcast_object(mine, "the announcement of a scenario point")
    else:
        announced, _announced = _announced, None
        if announced is None:
            announced = world.bcast_object(None, "the announcement of a scenario point")
        if announced != mine:
            world.abort(f"rank 0 runs scenario point '{announced[0]}' but this rank has '{sc.name}' "
                        f"or a different text of it; start every rank with the same arguments", EXIT_BAD_INPUT)
    return PointSession(world, name)


def follow(world, points, run_point) -> int:
    """A rank other than 0: run the share of each point rank 0 announces; 0 when rank 0 ends the run.
    run_point(scenario) runs one point (moenum.runner.run with the command's options)."""
    global _announced
    by_name = {sc.name: sc for sc in points}
    while True:
        announced = world.bcast_object(None, "the announcement of a scenario point")
        if announced is None:
            return 0
        sc = by_name.get(announced[0])
        if sc is None:
            world.abort(f"rank 0 runs scenario point '{announced[0]}', which this rank does not have; "
                        f"start every rank with the same arguments", EXIT_BAD_INPUT)
        _announced = announced
        run_point(sc)
