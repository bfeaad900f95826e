"""Environments beyond the core: FrozenLake, Bandit, Countdown, and Gymnasium / TextArena adapters.

They register through the entry-point group `agentrl.envs` (see pyproject.toml), so
`agentrl envs list` shows them and `make("frozenlake")` works once agentrl is installed.
`gym:ENV_ID` names (e.g. `gym:Taxi-v3`) build a `GymTextEnv` around any Gymnasium env.
"""
