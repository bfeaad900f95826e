"""Expert iteration: a beam search guided by the policy finds solutions its samples miss,
and the policy imitates them.

Search is the improvement operator, as in AlphaZero and expert iteration (Anthony et al.,
2017): from each room, the search expands up to `beam_width` states per depth, ranked by the
policy's cumulative log-probability of the answers that led there, tries every candidate
answer the env offers (`TokenEnv.candidate_answers`) in each, and stops at the first answer
that solves the room. States the env calls the same (`TokenEnv.state_key`) are expanded once.
Only the env's own success flag and the policy's probabilities guide it; no solver is used.
The trainer then imitates the solutions found (`algo.name: expert-iteration`), so the next step's
search starts from a better policy.

A beam of 1 plays the policy's greedy move, never revisiting a state. Wider beams try the
policy's second and third choices where they lead somewhere new; with a beam as wide as the
number of reachable states the search is breadth-first and finds every shortest solution
itself, whatever the policy, so report `search/solved_frac` beside the policy's own success.

From a strong policy the search solves every room and its labels mostly repeat the policy's
own moves. `algo.search_easy_keep` focuses it: the policy's plain greedy play screens the
rooms first, only the ones it fails are searched, and a share of the ones it solves keep
their greedy solution as a label (`algo.search_easy_keep`).

Needs a Markov prompt (`rollout.history_turns: 0`: the prompt is the state), an env that
lists its candidate answers and can be copied in the middle of an episode (`TokenEnv.clone`),
and the policy in this process (`trainer.backend: local`).

    scorer = AnswerScorer(model, bridge, env.candidate_answers())
    found, stats = beam_search(env_factory, seeds, scorer, beam_width=8)
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from agentrl._kvcache import shared_prefix_batch
from agentrl.envs.base import Observation, TokenEnv
from agentrl.envs.contract import checked_reset, checked_step, env_label
from agentrl.rollout.expert import expert_episode
from agentrl.trajectory.bridge import ChatBridge
from agentrl.trajectory.types import Trajectory

SEARCH_KEY = "search"
"""`Trajectory.reset_info` key of a solution the search found: `{"beam_width": B}`."""


def is_search(traj: Trajectory) -> bool:
    """Whether `traj` is a solution found by the search (its answers were chosen, not
    sampled)."""
    return SEARCH_KEY in traj.reset_info


class AnswerScorer:
    """The policy's log-probability of each of a fixed set of candidate answers, in many
    states at once.

    The answers' ids share a common prefix (`<answer>` for Sokoban's moves) and must then
    differ at their next id, the decision id. An answer's score is the log-probability of the
    common prefix and its decision id after the state's prompt; the ids after the decision id
    (a closing tag) are not scored. The prompts' own common prefix (the system prompt) runs
    once per batch and its keys and values are shared, as the rollout engine does.
    """

    def __init__(
        self, model: Any, bridge: ChatBridge, answers: Sequence[str], *, batch_size: int = 256
    ) -> None:
        if len(answers) < 2:
            raise ValueError("search needs an env with at least two candidate answers")
        ids = [bridge.encode(a) for a in answers]
        common = 0
        while all(len(x) > common for x in ids) and len({x[common] for x in ids}) == 1:
            common += 1
        decision = [x[common] if len(x) > common else None for x in ids]
        if None in decision or len(set(decision)) != len(decision):
            raise ValueError(
                "search needs candidate answers whose ids differ at their first differing "
                f"position (after {common} shared ids): {list(answers)}"
            )
        self.model = model
        self.answers = list(answers)
        self.head: list[int] = ids[0][:common]
        self.decision: list[int] = [int(d) for d in decision if d is not None]
        self.batch_size = batch_size
        self.num_prompts = 0
        """Prompts scored so far (one model row each)."""

    @torch.no_grad()
    def __call__(self, prompts: Sequence[Sequence[int]]) -> torch.Tensor:
        """`[len(prompts), num_answers]` log-probabilities."""
        out = []
        device = next(self.model.parameters()).device
        keep = len(self.head) + 1  # the positions that predict the head and decision ids
        for start in range(0, len(prompts), self.batch_size):
            rows = [list(p) + self.head for p in prompts[start : start + self.batch_size]]
            n = len(rows)
            cache, _, ids, attention_mask, position_ids = shared_prefix_batch(
                self.model, rows, keep=keep, min_shared=1, pad_id=0, device=device
            )
            logp = (
                self.model(
                    input_ids=ids,
                    attention_mask=attention_mask,
                    position_ids=position_ids,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=keep,
                )
                .logits.float()[:, -keep:]
                .log_softmax(-1)
            )  # [n, keep, V]
            head_logp = torch.zeros(n, device=logp.device)
            for j, token in enumerate(self.head):
                head_logp += logp[:, j, token]
            out.append(logp[:, -1, self.decision] + head_logp.unsqueeze(-1))
            self.num_prompts += n
        return torch.cat(out).cpu() if out else torch.zeros((0, len(self.answers)))


@dataclass(order=True)
class _Node:
    neg_score: float
    order: int
    env: TokenEnv = field(compare=False)
    observation: Observation = field(compare=False)
    answers: tuple[str, ...] = field(compare=False)
    answer_logp: tuple[float, ...] = field(compare=False, default=())


def _key(env: TokenEnv, observation: Observation) -> Hashable:
    key = env.state_key()
    return key if key is not None else str(observation)


def beam_search(
    env_factory: Callable[[], TokenEnv],
    seeds: Sequence[int],
    scorer: Callable[[list[list[int]]], torch.Tensor],
    prompt_ids: Callable[[TokenEnv, Observation], list[int]],
    *,
    beam_width: int,
    max_depth: int,
    loops_fail: bool = False,
    answer_logp: dict[int, list[float]] | None = None,
) -> tuple[dict[int, list[str]], dict[str, float]]:
    """Search every room of `seeds` at once, one depth at a time.

    At each depth the live states of every room are scored in one batch (`scorer` of their
    `prompt_ids`), every candidate answer is played in a copy of each, and each room keeps
    its `beam_width` best new states by cumulative log-probability. A room is solved by the
    first answer after which the env reports `info["success"]`. Returns the answers of each
    solved room by seed, and the metrics `search/solved_frac`, `search/prompts_scored` and
    `search/solution_turns` (mean answers of a solution).

    `loops_fail` (a beam of 1 only) is the policy's plain greedy play: only the best answer
    is played in each state, and where it returns to a state seen before the room fails, as
    a greedy policy would loop there, instead of the next-best answer being taken.

    `answer_logp`, when given, is filled with each solution's per-answer log-probabilities
    under the policy (the scorer's, in the state where each answer was played).
    """
    if beam_width < 1:
        raise ValueError(f"beam_width must be >= 1, got {beam_width}")
    if loops_fail and beam_width != 1:
        raise ValueError(f"loops_fail needs beam_width 1, got {beam_width}")
    answers = list(getattr(scorer, "answers", []))
    beams: dict[int, list[_Node]] = {}
    seen: dict[int, set[Hashable]] = {}
    envs: list[TokenEnv] = []
    for seed in seeds:
        env = env_factory()
        envs.append(env)
        call = f"reset(seed={seed})"
        observation, _ = checked_reset(env.reset(seed=int(seed)), env=env_label(env), call=call)
        if not answers:
            answers = env.candidate_answers()
        beams[seed] = [_Node(0.0, 0, env, observation, ())]
        seen[seed] = {_key(env, observation)}
    found: dict[int, list[str]] = {}
    scored = 0
    order = 0
    try:
        for _ in range(max_depth):
            live = [(seed, node) for seed, nodes in beams.items() for node in nodes]
            if not live:
                break
            logp = scorer([prompt_ids(node.env, node.observation) for _, node in live])
            scored += len(live)
            children: dict[int, list[_Node]] = {}
            for (seed, node), row in zip(live, logp.tolist(), strict=True):
                if seed in found:
                    continue
                options = list(zip(answers, row, strict=True))
                if loops_fail:  # plain greedy play: the best answer only (the first of ties)
                    options = [max(options, key=lambda option: option[1])]
                for answer, lp in options:
                    env = node.env.clone()
                    observation, _, terminated, truncated, info = checked_step(
                        env.step(answer), env=env_label(env), call=f"step({answer!r}) in a search"
                    )
                    if terminated and info.get("success", False):
                        found[seed] = [*node.answers, answer]
                        if answer_logp is not None:
                            answer_logp[seed] = [*node.answer_logp, lp]
                        break
                    if terminated or truncated:
                        continue
                    order += 1
                    score = node.neg_score - lp
                    children.setdefault(seed, []).append(
                        _Node(
                            score,
                            order,
                            env,
                            observation,
                            (*node.answers, answer),
                            (*node.answer_logp, lp),
                        )
                    )
            beams = {}
            for seed, nodes in children.items():
                if seed in found:
                    continue
                keep: list[_Node] = []
                for node in sorted(nodes):  # best first; ties in the order played
                    key = _key(node.env, node.observation)
                    if key in seen[seed]:
                        if loops_fail:
                            break
                        continue
                    seen[seed].add(key)
                    keep.append(node)
                    if len(keep) == beam_width:
                        break
                beams[seed] = keep
    finally:
        for env in envs:
            env.close()
    lengths = [len(a) for a in found.values()]
    return found, {
        "search/solved_frac": len(found) / max(len(seeds), 1),
        "search/prompts_scored": float(scored),
        "search/solution_turns": sum(lengths) / max(len(lengths), 1),
    }


def _replayer(answers: Sequence[str]) -> Callable[[TokenEnv, int | None], str]:
    """An expert that gives `answers` in order, one per call."""
    moves = iter(answers)

    def answer(_env: TokenEnv, _max: int | None) -> str:
        move = next(moves, None)
        if move is None:
            raise _Unsolved
        return move

    return answer


class _Unsolved(Exception):
    """A replayed solution ran out of answers before the room was solved."""


def solution_trajectories(
    env_factory: Callable[[], TokenEnv],
    bridge: ChatBridge,
    found: dict[int, list[str]],
    *,
    beam_width: int,
    env_name: str = "",
    max_context_tokens: int = 4096,
    answer_logp: dict[int, list[float]] | None = None,
) -> list[Trajectory]:
    """The solutions `found` (answers by seed) as token-exact trajectories, one group each,
    replayed through the same bridge as the rollout (`rollout.history_turns: 0`). With
    `answer_logp` (by seed, as `beam_search` fills it) each trajectory's `reset_info` also
    keeps the policy's log-probability of each of its answers
    (`reset_info[SEARCH_KEY]["answer_logp"]`)."""
    env = env_factory()
    trajs = []
    try:
        for group, (seed, answers) in enumerate(sorted(found.items())):
            try:
                traj = expert_episode(
                    env,
                    bridge,
                    _replayer(answers),
                    seed,
                    group_id=group,
                    max_context_tokens=max_context_tokens,
                    env_name=env_name,
                    history_turns=0,
                )
            except _Unsolved:
                traj = None
            if traj is None or not traj.success:
                raise RuntimeError(
                    f"seed {seed}: replaying the search's solution did not solve the room "
                    "(is the env deterministic?)"
                )
            traj.reset_info = {SEARCH_KEY: {"beam_width": beam_width}}
            if answer_logp is not None and seed in answer_logp:
                traj.reset_info[SEARCH_KEY]["answer_logp"] = list(answer_logp[seed])
            trajs.append(traj)
    finally:
        env.close()
    return trajs


def timed_search(
    env_factory: Callable[[], TokenEnv],
    bridge: ChatBridge,
    model: Any,
    seeds: Sequence[int],
    *,
    beam_width: int,
    max_depth: int,
    env_name: str = "",
    max_context_tokens: int = 4096,
    easy_keep: float = 1.0,
    rng: random.Random | None = None,
) -> tuple[list[Trajectory], dict[str, float]]:
    """Search `seeds` with `model` (in eval mode, restored after) and return the solutions as
    trajectories, with the search's metrics and `search/wall_s`.

    With `easy_keep` below 1 the search is focused (`algo.search_easy_keep`): every room is
    first played greedily (`beam_search`'s `loops_fail`: a return to a state seen before
    fails the room); a share `easy_keep` of the rooms that play solves
    keep that solution (drawn with `rng`), and only the rooms it fails are searched with
    `beam_width`. Adds `search/greedy_solved_frac`, `search/hard_rooms` and
    `search/hard_solved_frac`."""
    if not 0.0 <= easy_keep <= 1.0:
        raise ValueError(f"easy_keep must be in [0, 1], got {easy_keep}")
    start = time.perf_counter()
    probe = env_factory()
    try:
        system_prompt = probe.system_prompt
        scorer = AnswerScorer(model, bridge, probe.candidate_answers())
    finally:
        probe.close()
    was_training = model.training
    model.eval()
    answer_logp: dict[int, list[float]] = {}  # both searches fill it: their rooms differ
    search = partial(
        beam_search,
        env_factory,
        scorer=scorer,
        prompt_ids=lambda _env, observation: bridge.prompt_ids(system_prompt, observation),
        max_depth=max_depth,
        answer_logp=answer_logp,
    )
    try:
        if easy_keep < 1.0:
            found, metrics = _focused_search(
                search, seeds, beam_width, easy_keep, rng or random.Random(0)
            )
        else:
            found, metrics = search(seeds, beam_width=beam_width)
    finally:
        model.train(was_training)
    trajs = solution_trajectories(
        env_factory,
        bridge,
        found,
        beam_width=beam_width,
        env_name=env_name,
        max_context_tokens=max_context_tokens,
        answer_logp=answer_logp,
    )
    metrics["search/wall_s"] = time.perf_counter() - start
    return trajs, metrics


def _focused_search(
    search: Callable[..., tuple[dict[int, list[str]], dict[str, float]]],
    seeds: Sequence[int],
    beam_width: int,
    easy_keep: float,
    rng: random.Random,
) -> tuple[dict[int, list[str]], dict[str, float]]:
    """Plain greedy play on every room; a share `easy_keep` of its solutions, and the full
    beam on the rooms it fails. `search/solved_frac` counts every room greedy play or the
    beam solved, `search/solution_turns` the kept solutions only."""
    easy, greedy = search(seeds, beam_width=1, loops_fail=True)
    hard_seeds = [s for s in seeds if s not in easy]
    found, metrics = search(hard_seeds, beam_width=beam_width) if hard_seeds else ({}, {})
    kept = {s: a for s, a in easy.items() if rng.random() < easy_keep}
    solutions = {**kept, **found}
    lengths = [len(a) for a in solutions.values()]
    return solutions, {
        "search/solved_frac": (len(easy) + len(found)) / max(len(seeds), 1),
        "search/prompts_scored": greedy["search/prompts_scored"]
        + metrics.get("search/prompts_scored", 0.0),
        "search/solution_turns": sum(lengths) / max(len(lengths), 1),
        "search/greedy_solved_frac": greedy["search/solved_frac"],
        "search/hard_rooms": float(len(hard_seeds)),
        "search/hard_solved_frac": len(found) / max(len(hard_seeds), 1),
    }


def sample_labels(
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    turn_ids: torch.Tensor,
    answer_logp: Sequence[Sequence[float] | None],
    *,
    tau: float,
    rng: random.Random,
) -> dict[str, float]:
    """Train fewer of a search's answers without changing the expected gradient
    (`algo.search_label_tau`; importance sampling by gradient size, Katharopoulos and
    Fleuret, 2018).

    Imitating an answer the policy gives probability `p` has a gradient about `1 - p` in
    size, so the answers it is already sure of add little. Each row (one answer: prompts are
    the state) is kept with probability `q = min(1, (1 - p) / tau)` and its advantages are
    divided by `q`; the others' are set to 0, and the update skips their forward and backward
    passes while its normaliser still counts their tokens. The loss is an unbiased estimate
    of the full one, and at the weights the search scored with, each kept row's weighted
    gradient is at most about `tau` (the update's later mini-batches see weights that moved).

    `advantages`, `loss_mask` and `turn_ids` are the batch's `[B, T]`; `advantages` changes in
    place. `answer_logp[r]` lists the per-turn log-probabilities of row `r`'s trajectory
    (None: not a search's solution, left as it is). Returns `search/label_keep_frac` (rows
    kept of the rows sampled) and `search/label_weight_max`.

    >>> mask = torch.tensor([[0, 1], [0, 1], [0, 1]])
    >>> adv, turns = mask.float(), torch.tensor([[-1, 0], [-1, 1], [-1, 0]])
    >>> logp = [[-2.0, -1e-4], [-2.0, -1e-4], None]  # rows 0, 1: turns 0, 1 of one solution
    >>> stats = sample_labels(adv, mask, turns, logp, tau=0.1, rng=random.Random(0))
    >>> adv.tolist()  # p = 0.14: kept; p = 0.9999: kept 1 time in 1,000; row 2: not a search's
    [[0.0, 1.0], [0.0, 0.0], [0.0, 1.0]]
    >>> stats["search/label_keep_frac"]
    0.5
    """
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    sampled = kept = 0
    weight_max = 0.0
    trained = loss_mask.bool()
    for row, logps in enumerate(answer_logp):
        if logps is None or not trained[row].any():
            continue
        turn = int(turn_ids[row][trained[row]].max())  # [T] -> the row's answer's turn
        q = min(1.0, -math.expm1(logps[turn]) / tau)  # 1 - p, accurate near p = 1
        sampled += 1
        if q > 0.0 and rng.random() < q:
            advantages[row] /= q
            kept += 1
            weight_max = max(weight_max, 1.0 / q)
        else:
            advantages[row] = 0.0
    return {
        "search/label_keep_frac": kept / max(sampled, 1),
        "search/label_weight_max": weight_max,
    }
