"""Registers the envs that ship with agentrl. Imported once by the registry."""

from agentrl.envs.registry import register

# Each built-in env module registers lazily by string, so listing envs imports nothing heavy.
