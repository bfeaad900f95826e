"""`python -m agentrl.cli` runs the `agentrl` command."""

from agentrl.cli import main

main()
