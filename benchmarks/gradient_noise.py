"""How much of an RL step's gradient is signal: the gradient noise scale of the default RL
against that of imitating the solver, at one Sokoban policy.

For each loss, the policy's gradient is taken on K independent batches (K rollouts of
`trainer.num_groups` x `rollout.group_size` episodes, 8 x 8 by default, on fresh training
seeds for RL; K batches of `--sft-episodes` solver episodes for SFT), with the weights held
fixed. With `g_i` the gradient of batch `i`
and `G` the expected gradient:

- `|G|^2` is estimated without bias by the mean of `g_i . g_j` over pairs `i != j`;
- the noise of one batch, `tr(Sigma_B) = E|g_i|^2 - |G|^2`;
- the noise scale in episodes, `B_noise = B tr(Sigma_B) / |G|^2` (McCandlish et al. 2018,
  "An Empirical Model of Large-Batch Training", `B_simple`).

Reading it: with plain SGD at batch `B`, the sum of `T` steps' gradients has signal `T |G|`
and noise `sqrt(T tr(Sigma_B))`, so the update is mostly signal only once `T B > B_noise`,
i.e. after `B_noise` episodes. A run that trains on fewer episodes than its `B_noise` moves
the weights mostly at random, and random moves of a trained model cost success.

The RL gradient is the trainer's own (`Trainer.train_step` with the optimizer step replaced
by a read-out of the gradient: rollout, scoring, the preset's advantages and loss), in one
mini-batch. The SFT gradient is `agentrl sft`'s loss (mean NLL of the solver's answer ids).
The `Adam-scaled` rows divide each coordinate by its root mean square over the K batches, as
Adam's second moment does: Adam moves a weight whose gradient is all noise as far as one
whose gradient is all signal, so its noise scale can be far above plain SGD's.
Standard errors are by bootstrap over the K batches. The cosine between the two mean
gradients says whether RL's expected step points where imitation's does.

`--line-search` then takes one step of each given L2 length along each of `--directions` and
validates it (1,024 seeds, paired against the start). On `tiny` and Sokoban its positive
control, the SFT direction, gained nothing at any length: the surface is too sharp along
gradient directions for one straight step (results/sokoban-rl/gradient-noise/).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/gradient_noise.py \
        --init results/sokoban-rl/warm_start_3cycles --batches 96
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ENV = "sokoban"
VALIDATION_OFFSET = 1_000_000
"""`benchmarks/learn_sokoban.py`'s validation seeds."""
SFT_FIRST_SEED = 3_000_000
"""Solver episodes for the SFT gradients start here: clear of the warm starts' expert seeds,
of RL's training seeds (from 500,000) and of the validation seeds (from 1,000,000)."""


def flat_grad(model: torch.nn.Module) -> np.ndarray:
    """The model's gradient as one float64 vector (zeros where a parameter has none)."""
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().double().flatten()
        for p in model.parameters()
        if p.requires_grad
    ]
    return torch.cat(parts).numpy()


def noise_stats(grads: np.ndarray, batch_episodes: float) -> dict[str, float]:
    """`|G|^2`, `tr(Sigma_B)` and `B_noise` (in episodes) from K per-batch gradients `[K, D]`.

    >>> rng = np.random.default_rng(0)
    >>> g = np.ones(1000) * 0.1 + rng.normal(0, 1.0, (200, 1000))  # |G|^2 = 10, tr = 1000
    >>> s = noise_stats(g, batch_episodes=64)
    >>> round(s["signal_sq"]), round(s["noise_tr"], -2), round(s["b_noise"], -3)
    (10, 1000.0, 6000.0)
    """
    k = grads.shape[0]
    gram = grads @ grads.T  # [K, K]
    diag = float(np.trace(gram))
    return _from_gram((float(gram.sum()) - diag) / (k * (k - 1)), diag / k, batch_episodes)


def _from_gram(cross_mean: float, self_mean: float, batch_episodes: float) -> dict[str, float]:
    """The statistics from the mean `g_i . g_j` over pairs `i != j` and the mean `|g_i|^2`."""
    noise_tr = self_mean - cross_mean
    b_noise = batch_episodes * noise_tr / cross_mean if cross_mean > 0 else float("inf")
    return {"signal_sq": cross_mean, "noise_tr": noise_tr, "b_noise": b_noise}


def bootstrap(grads: np.ndarray, batch_episodes: float, reps: int = 400) -> dict[str, float]:
    """`noise_stats` with bootstrap standard errors (batches resampled, pairs of a batch with
    itself left out) and a 90% interval for `B_noise`."""
    point = noise_stats(grads, batch_episodes)
    rng = np.random.default_rng(0)
    k = grads.shape[0]
    gram = grads @ grads.T
    samples = {"signal_sq": [], "noise_tr": [], "b_noise": []}
    for _ in range(reps):
        idx = rng.integers(0, k, k)
        sub = gram[np.ix_(idx, idx)]
        same = idx[:, None] == idx[None, :]
        off = sub[~same]
        cross = float(off.mean()) if off.size else 0.0
        for key, value in _from_gram(cross, float(np.diag(sub).mean()), batch_episodes).items():
            samples[key].append(value)
    out = dict(point)
    out["signal_sq_se"] = float(np.std(samples["signal_sq"]))
    out["noise_tr_se"] = float(np.std(samples["noise_tr"]))
    b = np.array(samples["b_noise"])
    out["b_noise_p05"], out["b_noise_p95"] = (
        float(np.quantile(b, q, method="inverted_cdf")) for q in (0.05, 0.95)
    )
    out["signal_positive_frac"] = float(np.mean(np.array(samples["signal_sq"]) > 0))
    return out


def rl_gradients(
    init: str, batches: int, overrides: list[str], env: str = ENV, preset: str | None = None
) -> tuple[np.ndarray, float, dict]:
    """K gradients of `agentrl train --env ENV [--preset P]`'s RL loss at `init`, each on a
    fresh rollout; the weights never move. Returns `[K, D]`, episodes per batch, and the mean
    of some step metrics."""
    from agentrl.train._cli import resolve_train_config
    from agentrl.train.trainer import Trainer

    cfg = resolve_train_config(
        config_file=None,
        overrides=[
            f"model.name={init}",
            "warm_start.expert=null",
            "algo.num_mini_batches=1",  # one gradient per rollout, over the whole batch
            "algo.ppo_epochs=1",
            "eval.every=0",
            "logging.progress=false",
            "logging.tensorboard=false",
            "logging.save_trajectories=0",
            "checkpoint.every=0",
            *overrides,
        ],
        preset=preset,
        flags={"env.name": env},
    )
    grads: list[np.ndarray] = []
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, Path(run_dir))
        model = trainer.policy.model

        def read_out() -> float:  # replaces the optimizer step: keep the gradient, move nothing
            grads.append(flat_grad(model))
            norm = float(np.linalg.norm(grads[-1]))
            for p in model.parameters():
                p.grad = None
            return norm

        trainer.policy.step = read_out
        keys = ("success_rate", "rollout/num_episodes", "advantage/baseline_coverage")
        seen: dict[str, list[float]] = {k: [] for k in keys}
        try:
            for _ in range(3 * batches):  # a step without credited rows gives no gradient
                if len(grads) == batches:
                    break
                before = len(grads)
                metrics = trainer.train_step()
                for k in keys:
                    if k in metrics:
                        seen[k].append(float(metrics[k]))
                print(
                    f"  rl batch {len(grads)}/{batches}: success {metrics.get('success_rate', 0):.2f}"
                    + ("" if len(grads) > before else " (no credited row: no gradient)"),
                    flush=True,
                )
        finally:
            trainer.close()
    if len(grads) < batches:
        raise RuntimeError(
            f"{len(grads)} of {batches} rollouts had a credited move (no episodes of a group "
            "differed): the policy at this point gives RL no gradient to measure"
        )
    episodes = cfg.trainer.num_groups * cfg.rollout.group_size
    return np.stack(grads), float(episodes), {k: float(np.mean(v)) for k, v in seen.items() if v}


def sft_gradients(init: str, batches: int, episodes: int) -> np.ndarray:
    """K gradients of `agentrl sft`'s loss (mean NLL of the solver's answer ids) at `init`,
    each on `episodes` new solver episodes, one action per turn, current grid only."""
    import functools

    from agentrl.envs import make
    from agentrl.rollout.models import load_model, load_tokenizer
    from agentrl.sft.data import expert_trajectories
    from agentrl.sft.expert import get_expert
    from agentrl.sft.train import masked_nll
    from agentrl.train.batch import to_batch

    tokenizer = load_tokenizer(init)
    model = load_model(init, dtype="float32", device=torch.device("cpu"))
    model.train()
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    factory = functools.partial(make, ENV, max_turns=10)
    grads = []
    for k in range(batches):
        first = SFT_FIRST_SEED + k * episodes
        trajs = expert_trajectories(
            factory,
            tokenizer,
            range(first, first + episodes),
            get_expert("solver"),
            max_actions_per_turn=1,
            env_name=ENV,
            history_turns=0,
        )
        batch = to_batch(trajs, pad_id=pad_id)
        nll, _ = masked_nll(model, batch)
        (nll / max(int(batch.loss_mask.sum()), 1)).backward()
        grads.append(flat_grad(model))
        model.zero_grad(set_to_none=True)
        print(f"  sft batch {k + 1}/{batches}", flush=True)
    return np.stack(grads)


def adam_scaled(grads: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """The gradients as Adam moves the weights: each coordinate divided by its root mean square
    over the K batches (what Adam's second moment settles at under these gradients)."""
    return grads / (np.sqrt((grads**2).mean(axis=0)) + eps)


def expected_cosine(a: np.ndarray, b: np.ndarray, a_sq: float, b_sq: float) -> float:
    """Cosine of the two expected gradients: `mean(a) . mean(b)` (unbiased, the batches being
    independent) over the square root of the unbiased `|G_a|^2 |G_b|^2`; nan where either is
    not positive. Only meaningful where both `|G|^2` are resolved (several SEs above 0): the
    ratio of noisy estimates can leave [-1, 1]."""
    if a_sq <= 0 or b_sq <= 0:
        return float("nan")
    return float(a.mean(0) @ b.mean(0) / np.sqrt(a_sq * b_sq))


def resolved(row: dict[str, float]) -> bool:
    """`|G|^2` is at least 2 bootstrap SEs above 0."""
    return row["signal_sq"] > 2 * row["signal_sq_se"]


def validation_successes(
    engine: Any, tokenizer: Any, episodes: int, temperature: float, seed: int = 0
) -> np.ndarray:
    """Success (0/1) of each of `episodes` validation seeds (from 1,000,000), played with the
    engine's current weights: `agentrl eval`'s protocol (10 turns, one action each, current grid
    only, 24 ids a turn as `learn_sokoban.py`), with a fixed sampling seed, so two policies
    are compared on the same seeds and, where they agree, the same draws."""
    import functools

    from agentrl.envs import make
    from agentrl.rollout.config import RolloutConfig, SamplingConfig
    from agentrl.rollout.loop import rollout
    from agentrl.train.evaluate import validation_seeds

    sampling = SamplingConfig(temperature=temperature, max_new_tokens=24, seed=seed)
    result = rollout(
        engine,
        functools.partial(make, ENV, max_turns=10),
        tokenizer,
        validation_seeds(episodes, VALIDATION_OFFSET),
        group_size=1,
        cfg=RolloutConfig(max_turns=10, history_turns=0, max_context_tokens=2048),
        sampling=sampling.to_params(),
        env_name=ENV,
    )
    return np.array([float(t.success) for t in result.trajectories])


def line_search(
    init: str,
    directions: dict[str, np.ndarray],
    norms: list[float],
    episodes: int,
    temperature: float,
) -> list[dict[str, Any]]:
    """Validation success after one step of L2 length `n` along each unit `direction` (in the
    weights' flat order), for each `n` in `norms`; each row has the paired change against the
    start on the same seeds and its SE."""
    from agentrl.config import TrainConfig
    from agentrl.rollout.models import load_model, load_tokenizer
    from agentrl.train.engines import SeededEngine, build_engine

    tokenizer = load_tokenizer(init)
    model = load_model(init, dtype="float32")
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    engine = SeededEngine(build_engine(TrainConfig(), Path(init)))
    rows = []
    try:
        base = validation_successes(engine, tokenizer, episodes, temperature)
        rows.append({"direction": "start", "norm": 0.0, "success": float(base.mean())})
        print(f"  start: {base.mean():.3f}", flush=True)
        version = 0
        for label, direction in directions.items():
            unit = torch.from_numpy(direction / np.linalg.norm(direction)).float()
            for norm in norms:
                weights, offset = {}, 0
                for name in names:
                    size = start[name].numel()
                    step = unit[offset : offset + size].view_as(start[name])
                    weights[name] = start[name] + norm * step
                    offset += size
                version += 1
                engine.update_weights(weights, version)
                won = validation_successes(engine, tokenizer, episodes, temperature)
                diff = won - base
                row = {
                    "direction": label,
                    "norm": norm,
                    "success": float(won.mean()),
                    "change": float(diff.mean()),
                    "change_se": float(diff.std(ddof=1) / np.sqrt(len(diff))),
                }
                rows.append(row)
                print(
                    f"  {label} step {norm:g}: {row['success']:.3f} "
                    f"({100 * row['change']:+.1f} ± {100 * row['change_se']:.1f})",
                    flush=True,
                )
    finally:
        engine.close()
    return rows


DIRECTIONS = ("rl", "sft", "rl-noise", "random", "rl-adam", "sft-adam", "rl-noise-adam")
"""Line-search directions: the mean RL and SFT gradients (descent), RL noise (the difference of
two RL batches' gradients: shaped like RL's noise, without its signal), an isotropic random
direction, and each of the first three divided coordinate-wise by its loss's gradient RMS, as
Adam's step is (`-adam`)."""


def summary_vectors(rl: np.ndarray, sft: np.ndarray) -> dict[str, np.ndarray]:
    """What the line search needs from the K gradients of each loss (float32, to save)."""
    vectors = {"rl_mean": rl.mean(0), "sft_mean": sft.mean(0), "rl_noise": rl[0] - rl[1]}
    vectors["rl_rms"] = np.sqrt((rl**2).mean(0))
    vectors["sft_rms"] = np.sqrt((sft**2).mean(0))
    return {k: v.astype(np.float32) for k, v in vectors.items()}


def directions_from(vectors: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """The named `DIRECTIONS` (unnormalised, float64) from `summary_vectors`."""
    eps = 1e-8
    v = {k: x.astype(np.float64) for k, x in vectors.items()}
    table = {
        "rl": lambda: -v["rl_mean"],
        "sft": lambda: -v["sft_mean"],
        "rl-noise": lambda: v["rl_noise"],
        "random": lambda: np.random.default_rng(0).normal(size=v["rl_mean"].shape[0]),
        "rl-adam": lambda: -v["rl_mean"] / (v["rl_rms"] + eps),
        "sft-adam": lambda: -v["sft_mean"] / (v["sft_rms"] + eps),
        "rl-noise-adam": lambda: v["rl_noise"] / (v["rl_rms"] + eps),
    }
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"unknown direction(s) {unknown}; choose from {', '.join(DIRECTIONS)}")
    return {name: table[name]() for name in names}


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Collect the K gradients of each loss, print the noise-scale table; returns the table's
    numbers and the line search's `summary_vectors`."""
    start = time.perf_counter()
    rl, rl_episodes, rl_metrics = rl_gradients(
        args.init, args.batches, args.set, preset=args.preset
    )
    rl_s = time.perf_counter() - start
    rows = {
        "rl": bootstrap(rl, rl_episodes) | {"episodes_per_batch": rl_episodes, "wall_s": rl_s},
        "rl (Adam-scaled)": bootstrap(adam_scaled(rl), rl_episodes)
        | {"episodes_per_batch": rl_episodes},
    }
    rows["rl"] |= rl_metrics
    # wall time of the rollouts and updates that bring the summed gradient to B_noise episodes
    rows["rl"]["s_per_batch"] = rl_s / args.batches
    for r in rows.values():
        r["seconds_to_b_noise"] = r["b_noise"] / rl_episodes * rl_s / args.batches
    if args.no_sft:
        sft = np.zeros_like(rl[:2])
        mean_cos = float("nan")
    else:
        sft = sft_gradients(args.init, args.batches, args.sft_episodes)
        rows["sft"] = bootstrap(sft, float(args.sft_episodes)) | {
            "episodes_per_batch": args.sft_episodes
        }
        rows["sft (Adam-scaled)"] = bootstrap(adam_scaled(sft), float(args.sft_episodes)) | {
            "episodes_per_batch": args.sft_episodes
        }
        mean_cos = expected_cosine(rl, sft, rows["rl"]["signal_sq"], rows["sft"]["signal_sq"])
    print(f"\ngradient noise at {args.init} ({args.batches} batches each; ± bootstrap SE)")
    print("| loss | episodes/batch | |G|^2 | tr(Sigma_B) | B_noise (episodes) | 90% interval |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['episodes_per_batch']:.0f} | {r['signal_sq']:.3g} ± "
            f"{r['signal_sq_se']:.2g} | {r['noise_tr']:.3g} ± {r['noise_tr_se']:.2g} | "
            f"{r['b_noise']:,.0f} | {r['b_noise_p05']:,.0f} - {r['b_noise_p95']:,.0f} |"
        )
    print(
        f"RL: {rows['rl']['s_per_batch']:.1f} s a batch (rollout and scoring), so "
        f"{rows['rl']['seconds_to_b_noise'] / 60:.1f} min of it to sum B_noise episodes"
    )
    if args.no_sft:
        pass
    elif resolved(rows["rl"]) and resolved(rows["sft"]):
        print(f"cosine of the expected RL and SFT gradients: {mean_cos:+.3f}")
    else:
        print(
            "cosine of the expected RL and SFT gradients: not resolved (|G|^2 within 2 SE of 0;"
            " more --batches)"
        )
    for name, r in rows.items():
        if not resolved(r):
            print(f"{name}: |G|^2 not resolved, so B_noise is at least its 5% bound")
    if "success_rate" in rl_metrics:
        print(f"RL rollouts' mean success: {rl_metrics['success_rate']:.3f}")
    return {"rows": rows, "cosine_rl_sft": mean_cos}, summary_vectors(rl, sft)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--init", required=True, help="Policy to measure at (model folder).")
    p.add_argument("--batches", type=int, default=24, help="Independent batches per loss (K).")
    p.add_argument("--sft-episodes", type=int, default=64, help="Solver episodes per SFT batch.")
    p.add_argument("--threads", type=int, default=1, help="torch threads.")
    p.add_argument("--set", action="append", default=[], help="RL config override key=value.")
    p.add_argument("--preset", default=None, help="RL preset (default: the env's, state-rloo).")
    p.add_argument("--no-sft", action="store_true", help="Measure the RL loss only.")
    p.add_argument("--out", type=Path, default=None, help="Write the numbers here as JSON.")
    p.add_argument(
        "--grads",
        type=Path,
        default=None,
        help="Save the line search's mean gradients here (.npz, about 30 MB for `tiny`); if the "
        "file exists, load them instead of measuring.",
    )
    p.add_argument(
        "--line-search",
        default="",
        help="Comma-separated L2 step lengths: validate one step of each length along each of "
        "--directions (e.g. 0.03,0.1,0.3).",
    )
    p.add_argument(
        "--directions",
        default="rl,sft,rl-noise,random",
        help=f"Comma-separated line-search directions, of: {', '.join(DIRECTIONS)}.",
    )
    p.add_argument("--eval-episodes", type=int, default=1024, help="Line-search validation seeds.")
    p.add_argument("--temperature", type=float, default=0.5, help="Line-search temperature.")
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    if args.no_sft and args.line_search and "sft" in args.directions:
        raise SystemExit("--no-sft measures no SFT gradient: leave the sft directions out")
    payload: dict[str, Any] = {"init": args.init, "batches": args.batches, "overrides": args.set}
    payload["preset"] = args.preset
    if args.grads is not None and args.grads.is_file():
        print(f"gradients from {args.grads} (not measured again)")
        vectors = dict(np.load(args.grads))
    else:
        measured, vectors = measure(args)
        payload |= measured
        if args.grads is not None:
            np.savez(args.grads, **vectors)
    search: list[dict[str, Any]] = []
    if args.line_search:
        norms = [float(x) for x in args.line_search.split(",")]
        directions = directions_from(vectors, args.directions.split(","))
        print(
            f"\none step along each direction ({args.eval_episodes} seeds, T={args.temperature:g})"
        )
        search = line_search(args.init, directions, norms, args.eval_episodes, args.temperature)
        print("| direction | step (L2) | success | paired change |")
        print("|---|---|---|---|")
        for r in search:
            change = (
                f"{100 * r['change']:+.1f} ± {100 * r['change_se']:.1f}" if "change" in r else ""
            )
            print(f"| {r['direction']} | {r['norm']:g} | {100 * r['success']:.1f}% | {change} |")
    if args.out is not None:
        payload["line_search"] = search
        args.out.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
