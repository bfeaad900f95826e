"""Trainer ranks as Ray actors: the single-controller layout of `--ray`.

The driver runs the training loop; `RayTrainerGroup` places one actor per rank in a
placement group (one GPU each on GPU clusters, one CPU each otherwise). The actors form the
torch.distributed process group among themselves (rank 0's node address, a free port) and
each wraps the model in the configured backend (`fsdp2` or `deepspeed`). The driver then
ships work to every rank at once:

    group = RayTrainerGroup(cfg, "tiny", num_ranks=2, lr=1e-5, num_optimizer_steps=100)
    norms = group.map(train_on_shard, [(shard,) for shard in shards])  # fn(backend, shard)
    weights = group.full_state_dict()   # rank 0's gathered weights, for the engines
    group.shutdown()

Functions passed to `map`/`run` must be importable on the workers (a module of an installed
package), or registered with `ray.cloudpickle.register_pickle_by_value(module)`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

_SETUP_TIMEOUT_S = 600.0


class TrainerRank:
    """One trainer rank; Ray runs it as an actor (`ray.remote(TrainerRank)`)."""

    def __init__(self, rank: int, world_size: int, num_threads: int = 1) -> None:
        """Remember this actor's rank; the process group forms in `setup`."""
        self.rank = rank
        self.world_size = world_size
        self.backend: Any = None
        if num_threads > 0:
            torch.set_num_threads(num_threads)

    def address(self) -> tuple[str, int]:
        """This node's IP address and a port free on it (rank 0 hosts the rendezvous)."""
        import ray

        ip = ray.util.get_node_ip_address()
        return ip, _free_port_on(ip)

    def setup(
        self,
        cfg: Any,
        model_name: str,
        master: tuple[str, int],
        lr: float,
        num_optimizer_steps: int,
    ) -> str:
        """Join the process group and wrap the model in `cfg.trainer.backend`; collective."""
        from agentrl.rollout.models import load_model
        from agentrl.train.backends import backend_for_run

        os.environ.update(
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK="0",  # Ray gives each actor its own CUDA_VISIBLE_DEVICES
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR=master[0],
            MASTER_PORT=str(master[1]),
        )
        torch.manual_seed(cfg.seed)  # identical initial weights on every rank
        model = load_model(model_name, dtype="float32", device="cpu").train()
        self.backend = backend_for_run(cfg, model, lr=lr, num_optimizer_steps=num_optimizer_steps)
        return type(self.backend).__name__

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(backend, *args)` on this rank."""
        return fn(self.backend, *args)

    def full_state_dict(self) -> Mapping[str, torch.Tensor]:
        """The gathered weights (collective; only rank 0's dict is non-empty)."""
        return dict(self.backend.full_state_dict())


def _free_port_on(ip: str) -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((ip, 0))
        return int(s.getsockname()[1])


class RayTrainerGroup:
    """`num_ranks` `TrainerRank` actors in one placement group, driven from this process."""

    def __init__(
        self,
        cfg: Any,
        model_name: str,
        *,
        num_ranks: int,
        lr: float,
        num_optimizer_steps: int,
        num_gpus_per_rank: float | None = None,
        num_threads: int = 1,
    ) -> None:
        """Start the actors (Ray must be initialised) and build the backend on every rank.

        `cfg` is the root `TrainConfig` (`trainer.backend` fsdp2 or deepspeed); GPUs per
        rank default to 1 when the cluster has GPUs, else 0 (one CPU per rank).
        """
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if cfg.trainer.backend not in ("fsdp2", "deepspeed"):
            raise ValueError(
                f"trainer.backend = {cfg.trainer.backend!r}: Ray trainer ranks need fsdp2 or "
                "deepspeed (the local backend runs in the driver)"
            )
        if num_gpus_per_rank is None:
            num_gpus_per_rank = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
        bundle = {"CPU": 1.0, **({"GPU": num_gpus_per_rank} if num_gpus_per_rank else {})}
        self.placement_group = placement_group([bundle] * num_ranks, strategy="PACK")
        ray.get(self.placement_group.ready(), timeout=_SETUP_TIMEOUT_S)
        actor_cls = ray.remote(TrainerRank)
        self.actors = [
            actor_cls.options(
                num_cpus=1,
                num_gpus=num_gpus_per_rank,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self.placement_group, placement_group_bundle_index=i
                ),
            ).remote(i, num_ranks, num_threads)
            for i in range(num_ranks)
        ]
        master = ray.get(self.actors[0].address.remote(), timeout=_SETUP_TIMEOUT_S)
        names = ray.get(
            [a.setup.remote(cfg, model_name, master, lr, num_optimizer_steps) for a in self.actors],
            timeout=_SETUP_TIMEOUT_S,
        )
        self.backend_name = names[0]

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """`fn(backend, *args)` on every rank at once; the results in rank order."""
        import ray

        return ray.get([a.run.remote(fn, *args) for a in self.actors])

    def map(self, fn: Callable[..., Any], args_per_rank: Sequence[Sequence[Any]]) -> list[Any]:
        """`fn(backend, *args_per_rank[r])` on rank r, all ranks at once (e.g. data shards)."""
        import ray

        if len(args_per_rank) != len(self.actors):
            raise ValueError(
                f"got {len(args_per_rank)} argument tuples for {len(self.actors)} ranks"
            )
        return ray.get(
            [a.run.remote(fn, *args) for a, args in zip(self.actors, args_per_rank, strict=True)]
        )

    def full_state_dict(self) -> Mapping[str, torch.Tensor]:
        """Full weights on the driver, for the engines (gathered by all ranks, sent by rank 0)."""
        import ray

        return ray.get([a.full_state_dict.remote() for a in self.actors])[0]

    def shutdown(self) -> None:
        """Stop the actors and release the placement group."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            ray.kill(actor)
        remove_placement_group(self.placement_group)
