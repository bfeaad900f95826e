"""`check_env`: small named checks of the `TokenEnv` contract, each saying how to fix a failure.

>>> from agentrl.envs.guess_number import GuessNumber
>>> report = check_env(GuessNumber)
>>> report.ok
True
>>> "determinism" in [r.name for r in report.results]
True
"""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.envs.base import EnvNotResetError, TokenEnv
from agentrl.envs.contract import reset_problem, step_problem
from agentrl.envs.registry import UnknownEnvError, make

MALFORMED_ACTIONS: dict[str, str] = {
    "empty": "",
    "whitespace": " \n\t ",
    "unicode": "↑ 上 ⬆️ Ünïcödé 🚀 <answer>上</answer>",
    "control chars": "\x00\x01\x1b[2J\r\x7f<answer>\x00</answer>",
    "unclosed tag": "<answer>Up",
    "nested tags": "<answer><answer>1</answer></answer>",
    "boxed": r"The result is \boxed{\frac{1}{2}}.",
    "tool call": '<tool_call>{"name": "search", "arguments": {"q": 1}}</tool_call>',
    "code block": "```python\nimport os\nprint(1)\n```",
    "json": '{"action": "up", "value": [1, 2, null]}',
    "huge number": "<answer>" + "9" * 400 + "</answer>",
}
"""Named malformed actions every env must treat as an ordinary step."""


@dataclass
class CheckResult:
    """The outcome of one named check."""

    name: str
    passed: bool
    detail: str = ""
    """What was seen (on failure: what went wrong)."""
    fix: str = ""
    """On failure: how to fix it."""
    traceback: str = ""
    """When the env raised: the traceback, trimmed to the env's own frames."""


@dataclass
class CheckReport:
    """All check results for one env; renders as a rich table."""

    env: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        """The checks that failed."""
        return [r for r in self.results if not r.passed]

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        lines = [f"check_env({self.env}): {'ok' if self.ok else 'FAILED'}"]
        for r in self.results:
            lines.append(f"  [{'ok' if r.passed else 'FAIL'}] {r.name}: {r.detail}")
            if not r.passed and r.fix:
                lines.append(f"         fix: {r.fix}")
            if not r.passed and r.traceback:
                lines += [f"         {line}" for line in r.traceback.splitlines()]
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=f"check_env: {self.env}", title_justify="left")
        table.add_column("check")
        table.add_column("result")
        table.add_column("detail / how to fix", overflow="fold")
        for r in self.results:
            mark = "[green]ok[/green]" if r.passed else "[red]FAIL[/red]"
            text = Text(r.detail)
            if not r.passed:
                text.append("\nfix: ", style="yellow").append(r.fix)
                if r.traceback:
                    text.append("\n" + r.traceback, style="dim")
            table.add_row(r.name, mark, text)
        return table


class _CheckFailed(Exception):
    def __init__(self, detail: str, fix: str, cause: BaseException | None = None) -> None:
        super().__init__(detail)
        self.detail, self.fix = detail, fix
        self.traceback = env_traceback(cause) if cause is not None else ""


class EnvCallHung(BaseException):
    """An env call past its time limit (a BaseException: an env's `except Exception` must not
    swallow it)."""

    def __init__(self, message: str, seed: int | None = None) -> None:
        super().__init__(message)
        self.seed = seed


def _fmt_exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"[:300]


_ENVS_DIR = Path(__file__).resolve().parent
_CHECKS = (_ENVS_DIR / "check.py", _ENVS_DIR / "contract.py")


def env_traceback(error: BaseException) -> str:
    """The traceback of `error`, trimmed to the env's own frames (`_env_frame`)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _env_frame(f.filename)]
    lines = ["Traceback (the env's frames):\n", *traceback.format_list(frames)]
    if isinstance(error, EnvCallHung):
        lines.append("(where the call was when its time ran out)")
    else:
        lines += traceback.format_exception_only(type(error), error)
    return "".join(lines).rstrip()


def _env_frame(filename: str) -> bool:
    """Whether a frame is the env's: outside agentrl (a user's env) or among its envs, but
    not the checks, the contract helpers, the command line or contextlib."""
    path = Path(filename).resolve()
    if path in _CHECKS or path.name == "contextlib.py":
        return False
    return _ENVS_DIR.parent not in path.parents or _ENVS_DIR in path.parents


@contextmanager
def _limit(seconds: float | None, what: Callable[[], tuple[str, int | None]]) -> Iterator[None]:
    """Raise `EnvCallHung` in the main thread if the body runs past `seconds` (SIGALRM; elsewhere,
    and with None, no limit)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        message, seed = what()
        raise EnvCallHung(f"{message} did not return within {seconds:g} s", seed)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def bound_calls(env: TokenEnv, seconds: float | None) -> None:
    """Give `env`'s reset, step and close a time limit each (instance attributes; main thread
    only): a call past it raises `EnvCallHung`, naming the call and the episode's seed."""
    reset, step, close = env.reset, env.step, env.close
    seed: list[int | None] = [None]

    def bounded_reset(*args: Any, **kwargs: Any) -> Any:
        seed[0] = kwargs.get("seed")
        with _limit(seconds, lambda: (f"reset(seed={seed[0]})", seed[0])):
            return reset(*args, **kwargs)

    def bounded_step(*args: Any, **kwargs: Any) -> Any:
        with _limit(seconds, lambda: (f"step() in the episode with seed {seed[0]}", seed[0])):
            return step(*args, **kwargs)

    def bounded_close() -> Any:
        with _limit(seconds, lambda: ("close()", seed[0])):
            return close()

    env.reset, env.step, env.close = bounded_reset, bounded_step, bounded_close  # type: ignore[method-assign]


def _check_step(out: Any, where: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    problem = step_problem(out)
    if problem is not None:
        raise _CheckFailed(f"{where} returned {problem.returned}", problem.fix)
    return out


def _check_reset(out: Any, where: str) -> tuple[Any, dict[str, Any]]:
    problem = reset_problem(out)
    if problem is not None:
        raise _CheckFailed(f"{where} returned {problem.returned}", problem.fix)
    return out


def _episode(
    env: TokenEnv, seed: int, actions: Callable[[int], str], max_steps: int
) -> list[tuple[Any, ...]]:
    """Run one episode; the list of (observation, reward, terminated, truncated, info)."""
    obs, info = _check_reset(env.reset(seed=seed), f"reset(seed={seed})")
    trace: list[tuple[Any, ...]] = [(obs, info)]
    for t in range(max_steps):
        out = _check_step(env.step(actions(t)), f"step {t + 1} of the episode with seed {seed}")
        trace.append(out)
        if out[2] or out[3]:
            break
    return trace


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. numpy arrays inside info
        return repr(a) == repr(b)


def check_env(
    env_or_name: TokenEnv | str | Callable[[], TokenEnv],
    *,
    seed: int = 0,
    num_episodes: int = 3,
    call_timeout_s: float | None = None,
    **kwargs: Any,
) -> CheckReport:
    """Run the contract checks on an env (instance, registered name, class or factory).

    With a name, class or factory, fresh envs are built (`kwargs` go to the constructor), so
    `step` before `reset` is checked too; with an instance that was already reset, that check
    is reported as skipped-but-passed. Nothing raises: every problem lands in the report.
    `call_timeout_s` bounds each reset, step and close (in the main thread only: it uses
    SIGALRM); a call past it fails its check.
    """
    if isinstance(env_or_name, TokenEnv):
        instance = env_or_name
        label = type(instance).__name__

        def build() -> TokenEnv:
            return instance

    else:
        if isinstance(env_or_name, str):
            label = env_or_name

            def build() -> TokenEnv:
                return make(env_or_name, **kwargs)

        else:
            label = getattr(env_or_name, "__name__", repr(env_or_name))

            def build() -> TokenEnv:
                return env_or_name(**kwargs)

    report = CheckReport(label)

    def run(name: str, fn: Callable[[], str]) -> None:
        try:
            report.results.append(CheckResult(name, True, fn()))
        except _CheckFailed as e:
            report.results.append(CheckResult(name, False, e.detail, e.fix, e.traceback))
        except EnvCallHung as e:
            first = not any("did not return within" in r.detail for r in report.results)
            seed_ = "S" if e.seed is None else e.seed
            report.results.append(
                CheckResult(
                    name,
                    False,
                    str(e),
                    "every call must return: find the loop or wait that does not end "
                    f"(`agentrl play {label} --seed {seed_}` replays the episode); training "
                    "ends such an episode env_error after rollout.env_step_timeout_s",
                    env_traceback(e) if first else "",
                )
            )
        except Exception as e:  # noqa: BLE001 - an env bug is a failed check, not a crash
            report.results.append(
                CheckResult(
                    name,
                    False,
                    f"raised {_fmt_exc(e)}",
                    "see the traceback below; envs must not raise here",
                    env_traceback(e),
                )
            )

    try:
        with _limit(call_timeout_s, lambda: (f"building {label}", None)):
            env = build()
    except EnvCallHung as e:
        report.results.append(
            CheckResult(
                "construct",
                False,
                str(e),
                "make the constructor return",
                "",
            )
        )
        return report
    except UnknownEnvError as e:  # a misspelled name: the nearest and all known names, whole
        report.results.append(CheckResult("construct", False, str(e), "use one of the names above"))
        return report
    except Exception as e:  # noqa: BLE001
        report.results.append(
            CheckResult(
                "construct",
                False,
                f"raised {_fmt_exc(e)}",
                "make the env constructible with its defaults",
            )
        )
        return report
    report.results.append(CheckResult("construct", True, type(env).__name__))
    bound_calls(env, call_timeout_s)

    def step_before_reset() -> str:
        if env._has_reset:
            return "skipped: the instance given was already reset"
        try:
            env.step("<answer>1</answer>")
        except EnvNotResetError:
            return "raises EnvNotResetError"
        except Exception as e:  # noqa: BLE001
            raise _CheckFailed(
                f"raised {_fmt_exc(e)}", "call self.require_reset() first in step()", e
            ) from None
        raise _CheckFailed(
            "step() before reset() returned normally", "call self.require_reset() first in step()"
        )

    def system_prompt() -> str:
        prompt = env.system_prompt
        if not isinstance(prompt, str) or not prompt.strip():
            raise _CheckFailed(
                f"system_prompt is {prompt!r:.60}",
                "set the class attribute system_prompt to a non-empty str",
            )
        return f"{len(prompt)} chars"

    def max_turns() -> str:
        n = env.max_turns
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise _CheckFailed(f"max_turns is {n!r}", "set max_turns to a positive int")
        return str(n)

    max_steps = max(int(env.max_turns) if isinstance(env.max_turns, int) else 10, 1)
    rng_seed = np.random.SeedSequence(seed).generate_state(1)[0]

    def policy(episode: int) -> Callable[[int], str]:
        rng = np.random.default_rng([int(rng_seed), episode])
        actions: list[str] = []

        def act(t: int) -> str:
            while len(actions) <= t:
                actions.append(env.sample_action(rng))
            return actions[t]

        return act

    def determinism() -> str:
        for ep in range(num_episodes):
            act = policy(ep)
            a = _episode(env, seed + ep, act, max_steps)
            b = _episode(env, seed + ep, act, max_steps)
            if len(a) != len(b):
                raise _CheckFailed(
                    f"seed {seed + ep}: episode lengths {len(a) - 1} and {len(b) - 1} steps",
                    "draw randomness only from self.np_random and reset all state in reset()",
                )
            for t, (x, y) in enumerate(zip(a, b, strict=True)):
                for part, u, v in zip(
                    ("observation", "reward", "terminated", "truncated", "info"), x, y, strict=False
                ):
                    if t == 0 and part == "reward":
                        part = "info"  # reset's second element
                    if not _same(u, v):
                        raise _CheckFailed(
                            f"seed {seed + ep}, step {t}: {part} differs: {u!r:.80} vs {v!r:.80}",
                            "draw randomness only from self.np_random and reset all state in reset()",
                        )
        return f"{num_episodes} episodes replayed identically"

    def random_episode_ends() -> str:
        lengths = []
        for ep in range(num_episodes):
            trace = _episode(env, seed + 100 + ep, policy(100 + ep), max_steps)
            last = trace[-1]
            ended = len(trace) > 1 and (last[2] or last[3])
            if not ended and env.ends_within_max_turns:
                raise _CheckFailed(
                    f"seed {seed + 100 + ep}: no end after max_turns={max_steps} random steps",
                    "truncate the episode at max_turns (truncated=True) or set "
                    "ends_within_max_turns = False to leave it to the rollout",
                )
            lengths.append(len(trace) - 1)
        note = "" if env.ends_within_max_turns else " (the rollout truncates at max_turns)"
        return f"episode lengths {lengths}{note}"

    def malformed_actions() -> str:
        rng = np.random.default_rng(seed)
        printable = np.frombuffer(bytes(range(32, 127)), dtype=np.uint8)
        actions = dict(MALFORMED_ACTIONS)
        actions["10,000 random chars"] = rng.choice(printable, size=10_000).tobytes().decode()
        actions["10,000 random code points"] = "".join(
            chr(int(c)) for c in rng.integers(1, 0xD7FF, size=10_000)
        )
        ended = True
        for label_, action in actions.items():
            if ended:
                _check_reset(env.reset(seed=seed), f"reset(seed={seed})")
            try:
                out = env.step(action)
            except Exception as e:  # noqa: BLE001
                raise _CheckFailed(
                    f"step({label_} action) raised {_fmt_exc(e)}",
                    "treat malformed text as an ordinary step: penalty reward + feedback text",
                    e,
                ) from None
            ended = _check_step(out, f"step({label_} action)")[2] or out[3]
        return f"{len(actions)} malformed actions handled"

    def rewards_and_types() -> str:
        total = 0
        for ep in range(num_episodes):
            total += len(_episode(env, seed + 200 + ep, policy(200 + ep), max_steps)) - 1
        return f"{total} steps: finite float rewards, bool flags, valid observations"

    def spaces() -> str:
        """What Gymnasium's own checker needs: every observation in `observation_space`,
        every action in `action_space`."""
        for label_, action in MALFORMED_ACTIONS.items():
            if action not in env.action_space:
                raise _CheckFailed(
                    f"action_space {env.action_space!r:.60} does not hold the {label_} action",
                    "keep action_space = AnyText() (agentrl.envs): an answer can be any text",
                )
        for ep in range(num_episodes):
            act, ep_seed = policy(300 + ep), seed + 300 + ep
            out = env.reset(seed=ep_seed)
            for t in range(max_steps + 1):
                if (reset_problem if t == 0 else step_problem)(out) is not None:
                    break  # a broken return: the checks above report it
                if out[0] not in env.observation_space:
                    fix = (
                        "declare observation_space = TextOrMessages() (agentrl.envs)"
                        if isinstance(out[0], list)
                        else "let observation_space hold every observation (AnyText(): any str)"
                    )
                    raise _CheckFailed(
                        f"{'reset' if t == 0 else f'step {t}'} (seed {ep_seed}) returned "
                        f"{out[0]!r:.60}, not in observation_space {env.observation_space!r:.60}",
                        fix,
                    )
                if t == max_steps or (t > 0 and (out[2] or out[3])):
                    break
                out = env.step(act(t))
        return "observations and actions lie in the declared spaces"

    run("step before reset", step_before_reset)
    run("system_prompt", system_prompt)
    run("max_turns", max_turns)
    run("determinism", determinism)
    run("malformed actions", malformed_actions)
    run("rewards and types", rewards_and_types)
    run("random episode ends", random_episode_ends)
    run("spaces", spaces)
    if isinstance(env_or_name, TokenEnv):  # the caller's instance: its own methods again
        for method in ("reset", "step", "close"):
            vars(env).pop(method, None)
    return report
