"""RayEngine on CPU: 2 HF replicas in an in-process Ray, balancing, sticky sessions, weight
broadcast, a killed replica recovering; then 2 vLLM replicas on a 2-node local cluster.

Ray tests share this module so the token and clusters are set up once. The clusters listen on
127.0.0.1 only and are torn down by process id (never `ray stop`, which would hit other users).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from agentrl.rollout.engine import Engine, GenerationRequest, SamplingParams, generate_sync
from agentrl.rollout.hf_engine import HFEngine
from agentrl.rollout.models import load_model
from agentrl.rollout.ray_engine import EngineSpec, RayEngine

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

PARITY_TOL = 2e-3


@pytest.fixture(scope="module", autouse=True)
def ray_token():
    """One explicit auth token for every cluster here (Ray 2.60 turns token auth on)."""
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(16)
    _refresh_ray_auth_config()
    yield
    if ray.is_initialized():
        ray.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _refresh_ray_auth_config()


def _refresh_ray_auth_config() -> None:
    """Make this process see changed RAY_AUTH_* variables (Ray caches them at import; this is
    what `ray.init` itself does when it turns token auth on)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _teacher_forced(model, prompt: list[int], sampled: list[int]) -> list[float]:
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([prompt + sampled])).logits[0], -1)
    return [float(logp[len(prompt) - 1 + i, t]) for i, t in enumerate(sampled)]


def test_hf_replicas_in_process(tiny_model_path: Path) -> None:
    spec = EngineSpec("hf", str(tiny_model_path), {"max_batch_size": 16})
    engine = RayEngine(spec, num_replicas=2, num_cpus=0.5)  # starts Ray in this process
    try:
        assert isinstance(engine, Engine)
        # Balanced: 8 new episodes spread 4/4; each episode's next turn goes to the same replica.
        params = SamplingParams(max_new_tokens=8, seed=3, ignore_eos=True)
        requests = [GenerationRequest([1, 10 + i], params, session_id=f"ep{i}") for i in range(8)]
        first = generate_sync(engine, requests)
        placed = dict(engine._sessions)
        assert sorted(placed.values()) == [0, 0, 0, 0, 1, 1, 1, 1]
        second = generate_sync(engine, list(reversed(requests)))
        assert dict(engine._sessions) == placed
        assert [c.token_ids for c in reversed(second)] == [c.token_ids for c in first]
        # Same ids as an in-process HFEngine with the same seed.
        local = HFEngine(str(tiny_model_path))
        assert generate_sync(local, requests[:1])[0].token_ids == first[0].token_ids
        local.close()

        # Weight broadcast through the object store.
        other = load_model(str(tiny_model_path), dtype="float32")
        torch.manual_seed(11)
        with torch.no_grad():
            for p in other.parameters():
                p.add_(0.05 * torch.randn_like(p))
        engine.update_weights(other.state_dict(), version=2)
        assert [i["weight_version"] for i in engine.replica_info()] == [2, 2]
        after = generate_sync(engine, requests[:2])
        assert {c.weight_version for c in after} == {2}
        for req, comp in zip(requests[:2], after, strict=True):
            expected = _teacher_forced(other, req.prompt_ids, comp.token_ids)
            assert max(abs(a - b) for a, b in zip(comp.logp, expected, strict=True)) < PARITY_TOL

        # Kill replica 0 while it has long requests in flight: they are retried on its
        # replacement, which gets the latest weights first.
        pid_before = engine.replica_info()[0]["pid"]
        long = SamplingParams(max_new_tokens=1500, seed=5, ignore_eos=True)
        batch = [GenerationRequest([1, 70 + i], long, session_id=f"ep{i}") for i in range(8)]

        async def kill_midway():
            task = asyncio.ensure_future(engine.generate(batch))
            while engine._replicas[0].in_flight == 0:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            assert not task.done()
            ray.kill(engine.actor(0), no_restart=True)
            return await task

        results = asyncio.run(kill_midway())
        assert engine.restarts == 1
        assert [len(c.token_ids) for c in results] == [1500] * 8
        assert {c.weight_version for c in results} == {2}
        info = engine.replica_info()
        assert info[0]["pid"] != pid_before and info[0]["weight_version"] == 2
    finally:
        engine.close()
        ray.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def two_node_cluster():
    """A head node and a worker node on this machine (loopback), as `ray start` makes them."""
    ray_bin = str(Path(sys.executable).with_name("ray"))
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray-agentrl-")
    common = ["--block", "--node-ip-address=127.0.0.1", "--num-cpus=1", f"--temp-dir={temp_dir}"]
    procs = [
        subprocess.Popen(
            [ray_bin, "start", "--head", f"--port={port}", "--include-dashboard=false", *common],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while subprocess.run(
            [ray_bin, "status", f"--address={address}"], capture_output=True
        ).returncode:
            assert time.monotonic() < deadline, "the head node did not come up"
            time.sleep(1)
        procs.append(
            subprocess.Popen(
                [ray_bin, "start", f"--address={address}", *common],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        for proc in reversed(procs):  # SIGTERM to `ray start --block` stops its node
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.vllm
def test_vllm_replicas_on_two_nodes(two_node_cluster: str, tiny_model_path: Path) -> None:
    pytest.importorskip("vllm")
    ray.init(address=two_node_cluster, log_to_driver=False)
    deadline = time.monotonic() + 120
    while sum(n["Alive"] for n in ray.nodes()) < 2:
        assert time.monotonic() < deadline, "the worker node did not join"
        time.sleep(1)
    spec = EngineSpec(
        "vllm", str(tiny_model_path), {"dtype": "float32", "max_model_len": 512, "max_num_seqs": 8}
    )
    t0 = time.perf_counter()
    engine = RayEngine(
        spec,
        num_replicas=2,
        num_cpus=1,  # each node has one CPU: one replica per node
        address=two_node_cluster,
    )
    print(f"2 vLLM replicas on 2 nodes started in {time.perf_counter() - t0:.1f} s")
    try:
        assert len({i["node_id"] for i in engine.replica_info()}) == 2
        reference = load_model(str(tiny_model_path), dtype="float32")
        params = SamplingParams(max_new_tokens=16, seed=9, ignore_eos=True)
        requests = [
            GenerationRequest([1, 20 + i, 21], params, session_id=f"s{i}") for i in range(4)
        ]
        t0 = time.perf_counter()
        completions = generate_sync(engine, requests)
        elapsed = time.perf_counter() - t0
        print(
            f"vLLM on Ray, first call: {sum(len(c.token_ids) for c in completions) / elapsed:.0f} tok/s"
        )
        assert sorted(engine._sessions.values()) == [0, 0, 1, 1]
        for req, comp in zip(requests, completions, strict=True):
            expected = _teacher_forced(reference, req.prompt_ids, comp.token_ids)
            assert max(abs(a - b) for a, b in zip(comp.logp, expected, strict=True)) < PARITY_TOL
        with torch.no_grad():
            for p in reference.parameters():
                p.mul_(1.1)
        engine.update_weights(reference.state_dict(), version=1)
        t0 = time.perf_counter()
        after = generate_sync(engine, requests)
        elapsed = time.perf_counter() - t0
        print(f"vLLM on Ray, warm: {sum(len(c.token_ids) for c in after) / elapsed:.0f} tok/s")
        assert {c.weight_version for c in after} == {1}
        for req, comp in zip(requests, after, strict=True):
            expected = _teacher_forced(reference, req.prompt_ids, comp.token_ids)
            assert max(abs(a - b) for a, b in zip(comp.logp, expected, strict=True)) < PARITY_TOL
    finally:
        engine.close()
